# proctor/server: `proctor serve` (the CLI with the server app), built by `pnpm images --deploy`
# from the local proctor/base image and the workspace's built packages; nothing is downloaded.
# With --queue it runs no trials itself (workers do), so it needs no Docker socket and runs as
# the unprivileged user `proctor`. Batches, bundles and results live in the /data volume.
FROM proctor/base:bookworm
COPY node /usr/local/bin/node
COPY cli /opt/proctor/cli
COPY server /opt/proctor/server
# `proctor serve` loads the server app as an optional peer of the CLI.
RUN ln -s /opt/proctor/server /opt/proctor/cli/node_modules/@proctor/server \
 && groupadd --system --gid 10001 proctor \
 && useradd --system --uid 10001 --gid proctor --home-dir /data --shell /usr/sbin/nologin proctor \
 && mkdir -p /data && chown proctor:proctor /data \
 && ln -s /opt/proctor/cli/dist/main.js /usr/local/bin/proctor
ENV NODE_ENV=production
USER proctor
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/node", "/opt/proctor/cli/dist/main.js"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080", "--data-dir", "/data"]
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
  CMD ["/usr/local/bin/node", "-e", "fetch('http://127.0.0.1:8080/health').then(r => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
LABEL org.opencontainers.image.title="proctor/server" proctor.image="deploy"
