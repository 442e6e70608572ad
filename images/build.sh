#!/usr/bin/env bash
# Builds the three images from images/*.Dockerfile with podman, on a machine without access to an image registry:
#   localhost/geofed/ps:dev, localhost/geofed/operator:dev, localhost/geofed/client:dev-cpu, and
#   localhost/geofed/client:dev-cuda where its base (CUDA_BASE, Ubuntu 22.04) is present or can be pulled
# (TAG=... and PREFIX=... change the tag and the name prefix).
# Usage: images/build.sh [ps|operator|client|client-cuda|base ...]
#
# The Dockerfiles' base images come from a registry on a normal machine. Here a base is made once from the Debian
# archive (debootstrap --variant=minbase bookworm plus Debian's python3) and tagged with the names the Dockerfiles
# use in FROM: python:3.11.11-slim-bookworm (ps, operator) and localhost/geofed/base:bookworm, which the client's
# BASE_IMAGE build-arg points at (the CPU variant, no CUDA: TORCH_INDEX is torch's CPU index where that resolves,
# else torch comes from the pip configuration). Existing base images are kept (to rebuild them:
# podman rmi localhost/geofed/base:bookworm docker.io/library/python:3.11.11-slim-bookworm). Layers are cached,
# so a rebuild after a source change reinstalls no dependency.
#
# pip inside the build uses the host's pip configuration: `pip config list` is written into one pip.conf mounted at
# /etc/pip.conf, with every local path it names (wheel folders, file:// indexes, the CA bundle, constraint files)
# mounted read-only at the same path. The build uses the host's network.
set -euo pipefail
cd "$(dirname "$0")/.."

PREFIX=${PREFIX:-localhost/geofed}
TAG=${TAG:-dev}
BASE=${BASE:-localhost/geofed/base:bookworm}
PYTHON_BASE=${PYTHON_BASE:-docker.io/library/python:3.11.11-slim-bookworm}  # ps/operator FROM, fully qualified
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# runc: crun fails on hosts with hybrid cgroups (v1 controllers); PODMAN_FLAGS: more global flags (--root DIR ...).
read -r -a extra_flags <<<"${PODMAN_FLAGS:-}"
PODMAN=(podman --runtime runc --cgroup-manager=cgroupfs "${extra_flags[@]}")
PYTHON=${PYTHON:-python3}

PATH="$PATH:/usr/sbin:/sbin"  # debootstrap lives in /usr/sbin
for tool in podman runc debootstrap; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "images/build.sh: $tool is not installed (Debian: apt-get install -y podman buildah runc debootstrap)" >&2
    exit 1
  fi
done

log() { echo "images/build.sh: $*" >&2; }
scratch=()  # removed on exit, however the script ends
trap 'for d in "${scratch[@]}"; do "${as_root[@]}" rm -rf "$d"; done' EXIT
as_root=()
[ "$(id -u)" -eq 0 ] || as_root=(sudo)  # debootstrap creates device nodes and root-owned files

build_base() {
  if "${PODMAN[@]}" image exists "$BASE"; then
    log "base $BASE exists"
  else
    local root
    root=$(mktemp -d /var/tmp/geofed-base.XXXXXX)
    scratch+=("$root")
    log "debootstrap bookworm into $root (about 1-2 minutes)"
    "${as_root[@]}" debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates \
      bookworm "$root" "$DEBIAN_MIRROR" >"$root.log" 2>&1 || { cat "$root.log" >&2; exit 1; }
    rm -f "$root.log"  # kept, with its path in the error, when debootstrap fails
    "${as_root[@]}" rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    "${as_root[@]}" tar -C "$root" -c . | "${PODMAN[@]}" import \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV LANG=C.UTF-8' \
      --change 'CMD ["python3"]' \
      - "$BASE" >/dev/null
  fi
  if ! "${PODMAN[@]}" image exists "$PYTHON_BASE"; then  # a real python image, where one was pulled, is kept
    "${PODMAN[@]}" tag "$BASE" "$PYTHON_BASE"
  fi
}

# The host's pip settings as podman build flags: a merged pip.conf and read-only mounts of the paths it names.
PIP_MOUNTS=()
pip_mounts() {
  local conf="$1"
  "$PYTHON" - "$conf" <<'EOF'
import os, subprocess, sys
out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
options, paths = {}, set()
for line in out.splitlines():
    key, _, value = line.partition("=")
    section, _, option = key.rpartition(".")
    if section not in ("global", ":env:", "install"):
        continue
    value = value.strip().strip("'\"")
    options[option] = value  # the environment's PIP_* (listed last) win, as in pip
    for word in value.split():
        path = word[len("file://"):] if word.startswith("file://") else word
        if word.startswith("file://") and os.path.basename(path.rstrip("/")) == "simple":
            path = os.path.dirname(path.rstrip("/"))  # a local simple index links to files beside it
        if path.startswith("/") and os.path.exists(path):
            paths.add(os.path.realpath(path))
open(sys.argv[1], "w").write("[global]\n" + "".join(f"{k} = {v}\n" for k, v in options.items()))
for path in sorted(paths):
    print(path)
EOF
}

build_image() {
  local name="$1" ref="$2"
  shift 2
  local start=$SECONDS
  log "building $ref"
  "${PODMAN[@]}" build --pull=never --network host --layers "${PIP_MOUNTS[@]}" \
    -f "images/$name.Dockerfile" -t "$ref" "$@" . >&2
  log "built $ref in $((SECONDS - start)) s"
}

# torch's CPU index where it resolves; else PyPI's (already pip's index: torch then comes from the pip
# configuration, e.g. a local wheel folder, or PyPI). TORCH_INDEX overrides.
torch_index() {
  if [ -n "${TORCH_INDEX:-}" ]; then
    echo "$TORCH_INDEX"
  elif "$PYTHON" -c "import socket; socket.getaddrinfo('download.pytorch.org', 443)" 2>/dev/null; then
    echo https://download.pytorch.org/whl/cpu
  else
    echo https://pypi.org/simple
  fi
}

CUDA_BASE=${CUDA_BASE:-docker.io/library/ubuntu:22.04}  # the CUDA client's FROM (client.Dockerfile's default)

# Whether the CUDA client's base is here or can be pulled: a machine without a registry builds the CPU images only.
cuda_base_reachable() {
  "${PODMAN[@]}" image exists "$CUDA_BASE" || timeout 120 "${PODMAN[@]}" pull -q "$CUDA_BASE" >/dev/null 2>&1
}

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(ps operator client)
  if cuda_base_reachable; then
    targets+=(client-cuda)
  else
    log "skipping localhost/geofed/client:$TAG-cuda: its base $CUDA_BASE is neither here nor pullable (set CUDA_BASE)"
  fi
fi

build_base
workdir=$(mktemp -d /tmp/geofed-build.XXXXXX)
scratch+=("$workdir")
chmod 755 "$workdir"
mapfile -t host_paths < <(pip_mounts "$workdir/pip.conf")
PIP_MOUNTS+=(-v "$workdir/pip.conf:/etc/pip.conf:ro")
for path in "${host_paths[@]}"; do PIP_MOUNTS+=(-v "$path:$path:ro"); done

for target in "${targets[@]}"; do
  case "$target" in
    base) ;;
    ps | operator) build_image "$target" "$PREFIX/$target:$TAG" ;;
    # CPU variant: the local Debian base instead of Ubuntu's; torch comes from the index pip is configured with.
    client) build_image client "$PREFIX/client:$TAG-cpu" --build-arg "BASE_IMAGE=$BASE" \
      --build-arg "TORCH_INDEX=$(torch_index)" ;;
    # CUDA variant: the Dockerfile's own base and torch's CUDA 12.8 index (a registry and the internet needed).
    client-cuda)
      cuda_base_reachable || { log "the CUDA client's base $CUDA_BASE is neither here nor pullable"; exit 1; }
      build_image client "$PREFIX/client:$TAG-cuda" --build-arg "BASE_IMAGE=$CUDA_BASE" ;;
    *) log "unknown image '$target' (ps, operator, client, client-cuda, base)"; exit 2 ;;
  esac
done
