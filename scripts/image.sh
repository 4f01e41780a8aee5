#!/usr/bin/env bash
# image.sh builds vigil's OCI image archives without a container daemon:
# the root filesystem is assembled from Debian packages installed on this
# (Debian 12) machine, and umoci (Debian's package) turns it into an OCI
# image layout, packed as one tar. Run by `make image`, after `make build`.
#
#   usage: image.sh [--rootfs-only] cpu|gpu|all [OUTDIR]   (OUTDIR: bin/image)
#
# Outputs, in OUTDIR:
#   vigil-cpu.oci.tar   bin/vigil with ONNX Runtime 1.30.0 (the CPU library
#                       make setup installs), models, and every Debian package
#                       that owns a shared library bin/vigil or ONNX Runtime
#                       loads (ldd), plus base-files, netbase, tzdata and
#                       ca-certificates
#   vigil-gpu.oci.tar   the same root filesystem, with ONNX Runtime 1.29.0 and
#                       its CUDA 13 and TensorRT providers (the libraries
#                       make gpu-bundle caches) instead; the CUDA 13 user-space
#                       libraries (cudart, cuBLAS, cuDNN 9, TensorRT) are not
#                       Debian 12 packages and are not in it (deploy/README.md)
#   vigil-*.rootfs/     with --rootfs-only: the root filesystem alone (what
#                       the image's single layer holds), for tests
#
# An archive is an OCI image layout in a tar ("oci-archive"), tagged
# vigil:<version>-cpu or -gpu: `skopeo copy oci-archive:vigil-cpu.oci.tar
# docker://registry/vigil:TAG`, `podman load -i`, or `docker load -i`
# (Docker 25+). Files are taken from the packages as dpkg installed them
# (dpkg -L), so the image's packages are the versions on this machine;
# /var/lib/dpkg/status.d/ records them for scanners.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${VIGIL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/vigil}"
log() { printf 'image: %s\n' "$*" >&2; }
die() { printf 'image: error: %s\n' "$*" >&2; exit 1; }

ROOTFS_ONLY=0
if [ "${1:-}" = --rootfs-only ]; then ROOTFS_ONLY=1; shift; fi
WHICH=${1:-all}
OUTDIR=${2:-bin/image}
case $WHICH in cpu | gpu | all) ;; *) die "usage: image.sh [--rootfs-only] cpu|gpu|all [OUTDIR]" ;; esac
BIN=${VIGIL_BIN:-bin/vigil}
[ -x "$BIN" ] || die "$BIN is missing; run make build first"
[ -f "$CACHE/lib/libonnxruntime.so.1" ] || die "$CACHE/lib/libonnxruntime.so.1 is missing; run make setup"
[ "$ROOTFS_ONLY" = 1 ] || command -v umoci >/dev/null || die "umoci not found (make setup installs Debian's umoci)"
for c in dpkg-query ldd ldconfig tar; do command -v "$c" >/dev/null || die "$c not found"; done
VERSION=$("$BIN" version | awk 'NR==1{print $2}')
mkdir -p "$OUTDIR"
ARCH=x86_64-linux-gnu

# packages BINARY...: the packages owning every shared library the given
# binaries load (ldd), plus the base packages. dpkg records /lib and
# /usr/lib paths apart and usrmerge moved the files, so each library is
# looked up under both, in one dpkg-query call (one reads the whole
# database); a library no package owns cannot go into the image.
packages() {
  local libs; libs=$(ldd "$@" | awk '/=> \//{print $3} /^[ \t]*\/lib64/{print $1}' | sort -u)
  local l cands=()
  for l in $libs; do
    for f in "$l" "$(readlink -f "$l")"; do f=${f#/usr}; cands+=("$f" "/usr$f"); done
  done
  local found; found=$(dpkg-query -S "${cands[@]}" 2>/dev/null || true)
  for l in $libs; do
    local r; r=$(readlink -f "$l")
    awk -F': ' -v a="${l#/usr}" -v b="${r#/usr}" '{p=$2; sub(/^\/usr/, "", p)} p==a||p==b{ok=1} END{exit !ok}' <<<"$found" || die "no Debian package owns $l (it cannot go into the image)"
  done
  { printf '%s\n' base-files netbase tzdata ca-certificates libc6 libgcc-s1 libstdc++6; cut -d: -f1 <<<"$found" | tr ',' '\n' | tr -d ' '; } | sort -u
}

# rootfs DIR ORTDIR: the root filesystem with the ONNX Runtime libraries of
# ORTDIR (libonnxruntime.so.1 and any providers) in /usr/lib/vigil.
rootfs() {
  local dir=$1 ort=$2
  rm -rf "$dir" && mkdir -p "$dir"/usr/{bin,sbin,lib,lib64}
  # usrmerge, as Debian 12 installs it.
  ln -s usr/bin "$dir/bin" && ln -s usr/sbin "$dir/sbin" && ln -s usr/lib "$dir/lib" && ln -s usr/lib64 "$dir/lib64"
  local pkgs; pkgs=$(packages "$BIN" "$ort"/libonnxruntime.so.1)
  log "$(echo "$pkgs" | wc -l) Debian packages: $(echo $pkgs)"
  mkdir -p "$dir/var/lib/dpkg/status.d"
  local list; list=$(mktemp)
  for p in $pkgs; do
    # Files and symlinks only: directories are made as needed, through the
    # usrmerge links above. Docs other than the copyright go.
    dpkg-query -L "$p" | while read -r f; do
      [ -d "$f" ] && [ ! -L "$f" ] && continue
      case $f in /usr/share/doc/*/copyright) ;; /usr/share/doc/* | /usr/share/man/* | /usr/share/info/* | /usr/share/lintian/*) continue ;; esac
      [ -e "$f" ] || [ -L "$f" ] && echo "${f#/}"
    done
    dpkg-query -s "$p" >"$dir/var/lib/dpkg/status.d/$p"
  done >"$list"
  tar -C / --no-recursion -cf - -T "$list" | tar -C "$dir" -xf - --keep-directory-symlink
  rm -f "$list"
  # Libraries chosen through Debian's alternatives (libblas.so.3,
  # liblapack.so.3) are symlinks that update-alternatives made, listed by
  # no package: copy each link of the chain as this machine has it.
  local l f
  for l in $(ldd "$BIN" "$ort"/libonnxruntime.so.1 | awk '/=> \//{print $3}' | sort -u); do
    f=$l
    while [ -L "$f" ] && [ ! -e "$dir$f" ]; do
      mkdir -p "$dir$(dirname "$f")" && cp -P "$f" "$dir$f"
      f=$(cd "$(dirname "$f")" && realpath -s "$(readlink "$f")")
    done
  done
  install -m 0755 "$BIN" "$dir/usr/bin/vigil"
  mkdir -p "$dir/usr/lib/vigil" "$dir/usr/share/vigil/models"
  install -m 0644 "$ort"/* "$dir/usr/lib/vigil/"
  install -m 0644 "$CACHE"/models/*.onnx "$dir/usr/share/vigil/models/"
  mkdir -p "$dir/etc/ld.so.conf.d"
  echo 'include /etc/ld.so.conf.d/*.conf' >"$dir/etc/ld.so.conf"
  echo /usr/lib/vigil >"$dir/etc/ld.so.conf.d/vigil.conf"
  ldconfig -r "$dir"
  mkdir -p "$dir"/{etc/vigil,var/lib/vigil,var/cache/vigil,tmp,run,dev,proc,sys}
  chmod 1777 "$dir/tmp"
  printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nvigil:x:65532:65532:vigil:/var/lib/vigil:/usr/sbin/nologin\n' >"$dir/etc/passwd"
  printf 'root:x:0:\nvigil:x:65532:\n' >"$dir/etc/group"
  printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$dir/etc/nsswitch.conf"
  # The image's default configuration: state in /var/lib/vigil (a volume),
  # listeners on loopback, as vigil's defaults; a deployment mounts its own
  # (deploy/helm/vigil, deploy/compose.yaml).
  printf 'data_dir: /var/lib/vigil\n' >"$dir/etc/vigil/vigil.yaml"
  chown -R 65532:65532 "$dir/var/lib/vigil" "$dir/var/cache/vigil" 2>/dev/null || true
}

# oci FLAVOUR ROOTFS: OUTDIR/vigil-FLAVOUR.oci.tar from ROOTFS, one layer.
oci() {
  local flavour=$1 dir=$2 tag="$VERSION-$1"
  local work; work=$(mktemp -d)
  local rootless=(); [ "$(id -u)" = 0 ] || rootless=(--rootless)
  umoci init --layout "$work/layout"
  umoci new --image "$work/layout:$tag"
  umoci insert "${rootless[@]}" --image "$work/layout:$tag" "$dir" /
  local env=(--config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
    --config.env VIGIL_ORT_LIBRARY=/usr/lib/vigil/libonnxruntime.so.1 --config.env VIGIL_CACHE_DIR=/usr/share/vigil)
  if [ "$flavour" = gpu ]; then
    # What the NVIDIA container toolkit mounts into the container: the
    # driver's compute libraries and NVDEC (video).
    env+=(--config.env NVIDIA_VISIBLE_DEVICES=all --config.env NVIDIA_DRIVER_CAPABILITIES=compute,utility,video)
  fi
  umoci config --image "$work/layout:$tag" --os linux --architecture amd64 --author "vigil scripts/image.sh" \
    --config.entrypoint /usr/bin/vigil --config.cmd run --config.cmd --config --config.cmd /etc/vigil/vigil.yaml \
    --config.user 65532:65532 --config.workingdir /var/lib/vigil "${env[@]}" \
    --config.volume /var/lib/vigil --config.volume /var/cache/vigil \
    --config.exposedports 8080/tcp --config.exposedports 9090/tcp --config.exposedports 4222/tcp --config.exposedports 6222/tcp \
    --config.label org.opencontainers.image.title=vigil --config.label "org.opencontainers.image.version=$VERSION" \
    --config.label org.opencontainers.image.source=https://github.com/vigil-video/vigil \
    --config.label "org.opencontainers.image.description=vigil streaming video analytics ($flavour build)" \
    --no-history
  umoci gc --layout "$work/layout"
  tar -C "$work/layout" -cf "$OUTDIR/vigil-$flavour.oci.tar.tmp" . && mv "$OUTDIR/vigil-$flavour.oci.tar.tmp" "$OUTDIR/vigil-$flavour.oci.tar"
  rm -rf "$work"
  log "$OUTDIR/vigil-$flavour.oci.tar (vigil:$tag, $(du -h "$OUTDIR/vigil-$flavour.oci.tar" | cut -f1))"
}

# build FLAVOUR ORTDIR
build() {
  local dir="$OUTDIR/vigil-$1.rootfs"
  rootfs "$dir" "$2"
  [ "$ROOTFS_ONLY" = 1 ] && { log "$dir (root filesystem only)"; return 0; }
  oci "$1" "$dir"
  rm -rf "$dir"
}

if [ "$WHICH" != gpu ]; then
  ort=$(mktemp -d) && cp "$CACHE/lib/libonnxruntime.so.1" "$ort/"
  build cpu "$ort"; rm -rf "$ort"
fi
if [ "$WHICH" != cpu ]; then
  ORTGPU="$CACHE/ort-gpu-1.29.0"
  if ! (cd "$ORTGPU" 2>/dev/null && sha256sum -c --quiet --status SHA256SUMS); then
    log "no ONNX Runtime GPU libraries in $ORTGPU yet: fetching them as make gpu-bundle does"
    bash scripts/gpu-bundle.sh --ort-only
  fi
  ort=$(mktemp -d)
  for f in "$ORTGPU"/*; do
    case $f in *.xz) xz -dc "$f" >"$ort/$(basename "${f%.xz}")" ;; */SHA256SUMS) ;; *) cp "$f" "$ort/" ;; esac
  done
  build gpu "$ort"; rm -rf "$ort"
fi
