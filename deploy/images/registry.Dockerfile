# proctor/registry: Debian's docker-registry (the CNCF distribution registry) on the local
# proctor/base image, for workers that share task images (docs/images.md). Blobs in
# /var/lib/registry. Settings can be overridden per key with REGISTRY_* variables (e.g.
# REGISTRY_HTTP_TLS_CERTIFICATE, REGISTRY_AUTH_HTPASSWD_PATH): see deploy/compose.yaml.
FROM proctor/base:bookworm
RUN export DEBIAN_FRONTEND=noninteractive \
 && apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends docker-registry >/dev/null \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /var/lib/registry \
 && printf '%s\n' 'version: 0.1' 'log:' '  level: info' 'storage:' '  filesystem:' '    rootdirectory: /var/lib/registry' '  delete:' '    enabled: true' 'http:' '  addr: :5000' > /etc/docker/registry/config.yml
VOLUME ["/var/lib/registry"]
EXPOSE 5000
ENTRYPOINT ["/usr/bin/docker-registry"]
CMD ["serve", "/etc/docker/registry/config.yml"]
LABEL org.opencontainers.image.title="proctor/registry" proctor.image="deploy"
