#!/usr/bin/env bash
# A Debian 12 base image with Python 3.11, made locally with debootstrap from the Debian
# mirror apt already uses: for machines that cannot pull from Docker Hub (the images' default
# base is python:3.11-slim-bookworm). Both Dockerfiles need only python3 -m venv and apt from
# their base, which this gives. Built once: an existing image of that name is kept.
#
# usage: debian-base.sh [IMAGE]   (default mlbench/debian-python:3.11-bookworm)
# Settings: DEBIAN_MIRROR (default: the first Debian mirror in apt's sources), DOCKER_HOST.
set -euo pipefail

image="${1:-mlbench/debian-python:3.11-bookworm}"
here="$(cd "$(dirname "$0")/.." && pwd)"

if docker image inspect "$image" >/dev/null 2>&1; then
    echo "base image $image already built"
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "debootstrap needs root: run as root, or build with the default base (Docker Hub)" >&2
    exit 1
fi
command -v debootstrap >/dev/null || [ -x /usr/sbin/debootstrap ] \
    || bash "$here/apt-install.sh" debootstrap >&2
export PATH="$PATH:/usr/sbin:/sbin"

mirror="${DEBIAN_MIRROR:-}"
if [ -z "$mirror" ]; then
    mirror="$(grep -hoE '(https?://[^ ]+/debian)/?( |$)' /etc/apt/sources.list \
        /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null \
        | head -1 | tr -d ' ' || true)"
    mirror="${mirror:-http://deb.debian.org/debian}"
fi

rootfs="$(mktemp -d -t mlbench-rootfs-XXXXXX)"
trap 'rm -rf "$rootfs"' EXIT
echo "debootstrap bookworm from $mirror (about a minute)"
if ! debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1; then
    echo "debootstrap could not fetch Debian from $mirror: set DEBIAN_MIRROR to a reachable" \
        "mirror. Its log ends:" >&2
    tail -n 15 "$rootfs.log" >&2
    rm -f "$rootfs.log"
    exit 1
fi
rm -f "$rootfs.log"
# Like Docker's Debian images: no package caches, no documentation.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/usr/share/doc/* \
    "$rootfs"/usr/share/man/*
tar -C "$rootfs" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' - "$image" >/dev/null
echo "base image $image built"
