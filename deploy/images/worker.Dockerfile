# proctor/worker: `proctor-worker`, built by `pnpm images --deploy` from the local proctor/base
# image and the workspace's built packages; nothing is downloaded.
#
# It NEEDS THE HOST'S DOCKER SOCKET (-v /var/run/docker.sock:/var/run/docker.sock): trials run
# in sandbox containers on the host's daemon, siblings of this one. That socket is root on the
# host, so this image runs as root; give it only to workers you trust. Sandboxes never see a
# path of this container: files reach them through the Docker API (see docs/deploy.md).
FROM proctor/base:bookworm
COPY node /usr/local/bin/node
COPY worker /opt/proctor/worker
# The static busybox every sandbox runs Proctor's own tools with (a read-only volume).
COPY busybox /usr/local/bin/busybox
RUN ln -s /opt/proctor/worker/dist/main.js /usr/local/bin/proctor-worker && mkdir -p /var/lib/proctor-worker
ENV NODE_ENV=production \
    PROCTOR_RUNTIME=docker \
    PROCTOR_WORKER_DIR=/var/lib/proctor-worker \
    PROCTOR_WORKER_HOST=0.0.0.0 \
    PROCTOR_WORKER_PORT=9464
EXPOSE 9464
ENTRYPOINT ["/usr/local/bin/node", "/opt/proctor/worker/dist/main.js"]
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["/usr/local/bin/node", "-e", "fetch('http://127.0.0.1:' + (process.env.PROCTOR_WORKER_PORT || 9464) + '/health').then(r => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
LABEL org.opencontainers.image.title="proctor/worker" proctor.image="deploy" proctor.needs="/var/run/docker.sock"
