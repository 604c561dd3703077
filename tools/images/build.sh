#!/usr/bin/env bash
# Build Proctor's test images without a registry. Idempotent: an image already present is kept.
#   proctor/base:bookworm  debootstrap minbase + bash, python3, pytest, git, procps, ca-certificates
#   proctor/busybox:latest busybox-static in an empty rootfs (about 2 MB), for fast tests
set -euo pipefail

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

case "${1:-all}" in
  busybox) build_busybox ;;
  base) build_base ;;
  all) install_attr; build_busybox; build_base ;;
  *) echo "usage: $0 [all|busybox|base]" >&2; exit 2 ;;
esac
