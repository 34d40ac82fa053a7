#!/usr/bin/env bash
# Build the node image (default netdp-node:latest) from the project's wheels.
#
# The host fills deploy/.wheelhouse with `pip wheel` (PyPI or a local pip cache); the docker
# build then runs with --network none and pip installs only from that wheelhouse, so it
# works where no container or package registry is reachable from the build.
#
# Usage: deploy/build-node-image.sh [--base IMAGE] [--image NAME:TAG]
#   --base    base image with python3 + venv (default python:3.11-slim; offline:
#             netdp-base:bookworm from deploy/build-base-image.sh), or $NETDP_BASE_IMAGE
#   --image   name of the result (default netdp-node:latest), or $NETDP_NODE_IMAGE
#   $PYTHON   host interpreter that builds the wheels (default: the repo's .venv, else python3);
#             it must be the base image's Python minor version, since wheels are version-specific
set -euo pipefail

BASE=${NETDP_BASE_IMAGE:-python:3.11-slim}
IMAGE=${NETDP_NODE_IMAGE:-netdp-node:latest}
while [ $# -gt 0 ]; do
    case "$1" in
        --base) BASE=$2; shift ;;
        --image) IMAGE=$2; shift ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

DEPLOY_DIR=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$DEPLOY_DIR")
WHEELS="$DEPLOY_DIR/.wheelhouse"
if [ -z "${PYTHON:-}" ]; then
    if [ -x "$REPO/.venv/bin/python" ]; then PYTHON="$REPO/.venv/bin/python"; else PYTHON=python3; fi
fi

version_of() { "$@" -c 'import sys; print("%d.%d" % sys.version_info[:2])'; }
host_version=$(version_of "$PYTHON")
image_version=$(version_of docker run --rm --network none --entrypoint python3 "$BASE")
if [ "$host_version" != "$image_version" ]; then
    echo "host Python $host_version ($PYTHON) differs from $BASE's Python $image_version;" \
         "set PYTHON to a $image_version interpreter" >&2
    exit 1
fi

start=$(date +%s)
# Build from a copy of the sources, so setuptools' build/ cache in the shared tree can never
# put stale modules into the wheel. Refill the wheelhouse from scratch so no stale wheel
# reaches the image; pip's cache keeps this quick.
mkdir -p "$WHEELS"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
tar -C "$REPO" --exclude=./.git --exclude=./.venv --exclude=./deploy --exclude=./build \
    --exclude='*.egg-info' --exclude=__pycache__ -cf - . | tar -C "$scratch" -xf -
fill=$(mktemp -d "$WHEELS/.fill.XXXXXX")
trap 'rm -rf "$scratch" "$fill"' EXIT
"$PYTHON" -m pip wheel --quiet --disable-pip-version-check --wheel-dir "$fill" "$scratch"
rm -rf "$WHEELS/app" "$WHEELS/deps"
mkdir "$WHEELS/app"
mv "$fill"/netdp-*.whl "$WHEELS/app/"
mv "$fill" "$WHEELS/deps"
echo "wheelhouse ready in $(( $(date +%s) - start ))s"

previous=$(docker image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
docker build --network none --build-arg BASE_IMAGE="$BASE" \
    -t "$IMAGE" -f "$DEPLOY_DIR/Dockerfile" "$DEPLOY_DIR"
# The image this build replaced is now untagged; drop it unless a container still uses it.
if [ -n "$previous" ] && [ "$previous" != "$(docker image inspect --format '{{.Id}}' "$IMAGE")" ]; then
    docker rmi "$previous" >/dev/null 2>&1 || true
fi
echo "built $IMAGE on $BASE in $(( $(date +%s) - start ))s"
