#!/usr/bin/env bash
# Build the local base image netdp-base:bookworm without any container registry.
#
# Why: the machines we build and test on reach no registry and their docker engine starts
# empty, but they do reach the Debian apt mirror they are configured with. So we debootstrap
# a minimal bookworm (python3 + python3-venv, the same Python 3.11 as the host so host-built
# wheels install) from that mirror and `docker import` the root filesystem.
#
# Usage: deploy/build-base-image.sh [--force] [--image NAME:TAG]
#   --force   rebuild even if the image already exists (default: keep the cached image)
#   --image   image name (default: netdp-base:bookworm, or $NETDP_BASE_IMAGE)
set -euo pipefail

SUITE=bookworm
IMAGE=${NETDP_BASE_IMAGE:-netdp-base:${SUITE}}
FORCE=0
PACKAGES=python3,python3-venv

while [ $# -gt 0 ]; do
    case "$1" in
        --force) FORCE=1 ;;
        --image) IMAGE=$2; shift ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

DEPLOY_DIR=$(cd "$(dirname "$0")" && pwd)
ROOTFS="$DEPLOY_DIR/.rootfs/$SUITE"

if [ "$FORCE" = 0 ] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
    echo "base image $IMAGE already exists (use --force to rebuild)"
    exit 0
fi

# Print the first mirror URI configured for $SUITE (deb822 *.sources or one-line *.list format).
apt_mirror() {
    local files=()
    shopt -s nullglob
    files=(/etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list /etc/apt/sources.list)
    shopt -u nullglob
    awk -v suite="$SUITE" '
        function flush() {
            if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " suite " ") && uris != "") {
                split(uris, u, " "); print u[1]; found = 1; exit
            }
            types = ""; suites = ""; uris = ""
        }
        FNR == 1 { flush() }
        FILENAME ~ /\.sources$/ {
            if ($0 ~ /^[[:space:]]*$/) { flush(); next }
            if ($1 == "Types:")  { $1 = ""; types = substr($0, 2) }
            if ($1 == "Suites:") { $1 = ""; suites = substr($0, 2) }
            if ($1 == "URIs:")   { $1 = ""; uris = substr($0, 2) }
            next
        }
        $1 == "deb" {
            i = 2
            if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
            if ($(i + 1) == suite) { print $i; found = 1; exit }
        }
        END { if (!found) flush() }
    ' "${files[@]}"
}

MIRROR=$(apt_mirror)
if [ -z "$MIRROR" ]; then
    echo "no apt source for '$SUITE' found in /etc/apt; configure one and retry" >&2
    exit 1
fi

if ! command -v debootstrap >/dev/null 2>&1; then
    echo "installing debootstrap"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap
fi

echo "debootstrapping $SUITE from $MIRROR into $ROOTFS"
start=$(date +%s)
rm -rf "$ROOTFS"
mkdir -p "$ROOTFS"
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOTFS" "$MIRROR"

# Slim the tree: package caches, indexes, docs and locales are not needed at run time.
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/* \
       "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/info/* \
       "$ROOTFS"/usr/share/locale/*

echo "importing as $IMAGE"
tar -C "$ROOTFS" --numeric-owner -c . | docker import \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]' \
    - "$IMAGE" >/dev/null
rm -rf "$ROOTFS"
echo "built $IMAGE in $(( $(date +%s) - start ))s"
