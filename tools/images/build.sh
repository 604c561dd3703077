#!/usr/bin/env bash
# Build Proctor's images without a registry. Idempotent: an image already present is kept.
#   proctor/base:bookworm  debootstrap minbase + bash, python3, pytest, git, procps, ca-certificates
#   proctor/busybox:latest busybox-static in an empty rootfs (about 2 MB), for fast tests
# With --deploy (`pnpm images --deploy`, or `build.sh deploy`), also the deployment images, always
# rebuilt from this checkout (deploy/images/*.Dockerfile, used by deploy/compose.yaml):
#   proctor/server  proctor serve, as the unprivileged user proctor
#   proctor/worker  proctor-worker (root: it needs the host's Docker socket)
#   proctor/redis    Debian's redis-server (built once; PROCTOR_REBUILD_PACKAGES=1 rebuilds it)
#   proctor/registry Debian's docker-registry (compose's registry profile; built once too)
# They start FROM proctor/base:bookworm; server and worker copy in the workspace's built packages
# (pnpm deploy) and a Node binary from npm's node-linux-<arch> package (PROCTOR_IMAGE_NODE=<path>
# to use another, e.g. the host's); redis and registry install Debian's package with apt.
set -euo pipefail
cd "$(dirname "$0")/../.."

have() { docker image inspect "$1" >/dev/null 2>&1; }
need_pkg() {
  command -v "$1" >/dev/null 2>&1 && return 0
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq "$2" >/dev/null
}

build_busybox() {
  local name=proctor/busybox:latest
  if have "$name"; then echo "images: $name present"; return; fi
  need_pkg busybox busybox-static
  local bin; bin=$(command -v busybox)
  file -L "$bin" 2>/dev/null | grep -q 'statically linked' || { [ -x /bin/busybox ] && bin=/bin/busybox; }
  local root; root=$(mktemp -d)
  mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,tmp,app,logs,etc,root,proc,sys,dev}
  cp "$bin" "$root/bin/busybox"
  chroot "$root" /bin/busybox --install -s 2>/dev/null || (cd "$root/bin" && for a in $("$bin" --list); do ln -sf busybox "$a"; done)
  echo 'root:x:0:0:root:/root:/bin/sh' > "$root/etc/passwd"
  echo 'root:x:0:' > "$root/etc/group"
  chmod 1777 "$root/tmp"
  tar -C "$root" -c . | docker import -c 'CMD ["/bin/sh"]' -c 'WORKDIR /app' - "$name" >/dev/null
  rm -rf "$root"
  echo "images: built $name"
}

build_base() {
  local name=proctor/base:bookworm
  if have "$name"; then echo "images: $name present"; return; fi
  need_pkg debootstrap debootstrap
  local root; root=$(mktemp -d)
  local mirror=${PROCTOR_DEBIAN_MIRROR:-$(grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v security | head -n1)}
  mirror=${mirror:-http://deb.debian.org/debian}
  echo "images: debootstrap bookworm from $mirror (about a minute)"
  debootstrap --variant=minbase \
    --include=bash,python3,python3-pytest,git,procps,ca-certificates,coreutils \
    bookworm "$root" "$mirror" >/tmp/proctor-debootstrap.log 2>&1 || {
      echo "images: debootstrap failed; see /tmp/proctor-debootstrap.log" >&2; tail -n 20 /tmp/proctor-debootstrap.log >&2; exit 1; }
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  mkdir -p "$root/app" "$root/logs"
  tar -C "$root" -c . | docker import -c 'CMD ["/bin/bash"]' -c 'WORKDIR /app' -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' - "$name" >/dev/null
  rm -rf "$root"
  echo "images: built $name"
}

# Node for the deployment images: npm's official binary package, fetched by npm (cached) before
# the build; the image build itself downloads nothing.
stage_node() {
  local out=$1
  if [ -n "${PROCTOR_IMAGE_NODE:-}" ]; then cp "$PROCTOR_IMAGE_NODE" "$out/node"; return; fi
  local version=${PROCTOR_IMAGE_NODE_VERSION:-20.20.2} arch
  case "$(uname -m)" in x86_64) arch=x64 ;; aarch64) arch=arm64 ;; *) echo "images: no npm Node package for $(uname -m); set PROCTOR_IMAGE_NODE to a Node >= 20.19 binary" >&2; exit 1 ;; esac
  local cache=${XDG_CACHE_HOME:-$HOME/.cache}/proctor/node
  local tgz="$cache/node-linux-$arch-$version.tgz"
  if [ ! -s "$tgz" ]; then
    mkdir -p "$cache"
    echo "images: npm pack node-linux-$arch@$version (once; cached in $cache)"
    (cd "$cache" && npm pack --silent "node-linux-$arch@$version" >/dev/null)
  fi
  tar -xzf "$tgz" -C "$out" package/bin/node
  mv "$out/package/bin/node" "$out/node" && rm -rf "$out/package"
}

build_deploy() {
  build_busybox
  build_base
  stage=$(mktemp -d)
  trap 'rm -rf "$stage" "$stage.build.log"' EXIT
  # PROCTOR_IMAGES_BUILT=1: the caller built them (an Nx target that depends on ^build).
  if [ -z "${PROCTOR_IMAGES_BUILT:-}" ]; then
  echo "images: building the workspace's packages (nx; cached)"
  NX_DAEMON=false NX_NO_CLOUD=true NX_TUI=false pnpm exec nx run-many -t build -p @proctor/cli @proctor/server @proctor/worker --outputStyle=static >"$stage.build.log" 2>&1 || {
    echo "images: the build failed; last lines of $stage.build.log:" >&2; tail -n 30 "$stage.build.log" >&2; exit 1; }
  rm -f "$stage.build.log"
  fi
  for pkg in cli server worker; do
    pnpm --filter "@proctor/$pkg" deploy --prod --legacy --prefer-offline "$stage/$pkg" >"$stage/deploy.log" 2>&1 || {
      echo "images: pnpm deploy of @proctor/$pkg failed:" >&2; tail -n 30 "$stage/deploy.log" >&2; exit 1; }
  done
  rm -f "$stage/deploy.log"
  stage_node "$stage"
  "$stage/node" -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a === 20 && b >= 19) ? 0 : 1)' \
    || { echo "images: the image's Node must be >= 20.19" >&2; exit 1; }
  # The static busybox sandboxes need, from the proctor/busybox image.
  local holder; holder=$(docker create proctor/busybox:latest /bin/busybox true)
  docker cp "$holder:/bin/busybox" "$stage/busybox" >/dev/null
  docker rm "$holder" >/dev/null
  for image in server worker; do
    echo "images: building proctor/$image"
    DOCKER_BUILDKIT=0 docker build -q -f "deploy/images/$image.Dockerfile" -t "proctor/$image:latest" "$stage" >/dev/null 2>"$stage/docker.log" || {
      echo "images: building proctor/$image failed:" >&2; tail -n 30 "$stage/docker.log" >&2; exit 1; }
  done
  # Debian's packages, built once (PROCTOR_REBUILD_PACKAGES=1 rebuilds them).
  mkdir -p "$stage/empty"
  for image in redis:redis-server registry:docker-registry; do
    name=${image%%:*} package=${image#*:}
    if have "proctor/$name:latest" && [ -z "${PROCTOR_REBUILD_PACKAGES:-}" ]; then
      echo "images: proctor/$name:latest present"
      continue
    fi
    echo "images: building proctor/$name (apt-get install $package)"
    DOCKER_BUILDKIT=0 docker build -q -f "deploy/images/$name.Dockerfile" -t "proctor/$name:latest" "$stage/empty" >/dev/null 2>"$stage/docker.log" || {
      echo "images: building proctor/$name failed:" >&2; tail -n 30 "$stage/docker.log" >&2; exit 1; }
  done
  echo "images: built proctor/server, proctor/worker, proctor/redis, proctor/registry"
}

if ! docker version --format '{{.Server.Version}}' >/dev/null 2>&1; then
  echo "images: no Docker engine answers; nothing to build (proctor will use the local runtime;"
  echo "        start an engine with tools/docker/ensure-engine.sh to run tasks in containers)"
  exit 0
fi

# getfattr is the Docker runtime's second way (after the @napi-rs/xattr binding) to read overlay
# xattrs, which keeps a container's changes a few-ms read on this host. Best effort: no apt, no attr.
install_attr() {
  command -v getfattr >/dev/null 2>&1 && return 0
  command -v apt-get >/dev/null 2>&1 || { echo "images: no apt-get here; getfattr (attr) not installed"; return 0; }
  echo "images: installing Debian's attr (getfattr)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq attr >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq attr >/dev/null; } ||
    echo "images: installing attr failed; the Docker runtime still reads changes with the @napi-rs/xattr binding"
}

target=${1:-all}
deploy=no
for arg in "$@"; do [ "$arg" = --deploy ] && deploy=yes; done
[ "$target" = --deploy ] && target=all
case "$target" in
  busybox) build_busybox ;;
  base) build_base ;;
  all) install_attr; build_busybox; build_base; if [ "$deploy" = yes ]; then build_deploy; fi ;;
  deploy) build_deploy ;;
  *) echo "usage: $0 [all|busybox|base|deploy] [--deploy]" >&2; exit 2 ;;
esac
