# proctor/redis: Debian's redis-server on the local proctor/base image (no registry needed;
# apt reaches Debian's mirror during the build). Append-only persistence in /data.
FROM proctor/base:bookworm
RUN export DEBIAN_FRONTEND=noninteractive \
 && apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends redis-server >/dev/null \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /data && chown redis:redis /data
USER redis
WORKDIR /data
VOLUME ["/data"]
EXPOSE 6379
ENTRYPOINT ["/usr/bin/redis-server"]
CMD ["--bind", "0.0.0.0", "--protected-mode", "no", "--dir", "/data", "--appendonly", "yes", "--appendfsync", "everysec"]
HEALTHCHECK --interval=5s --timeout=3s --retries=5 CMD ["/usr/bin/redis-cli", "ping"]
LABEL org.opencontainers.image.title="proctor/redis" proctor.image="deploy"
