#!/usr/bin/env bash
# static-ffmpeg.sh builds a minimal static FFmpeg 5.1 and links vigil against
# it, so that the binary runs on machines without Debian's FFmpeg (the GPU
# machines run Ubuntu 24.04 and lack 154 of the 215 shared libraries that
# Debian's FFmpeg pulls in). Run by `make static`.
#
#   usage: static-ffmpeg.sh [VERSION]     VERSION goes into -X main.version
#
# Outputs:
#   bin/vigil-static    ./cmd/vigil linked against the static libav*.a; ldd shows
#                       only libc-type system libraries plus libz and libbz2
#   bin/ffmpeg-static   the matching ffmpeg CLI (same decoders, plus NVDEC/CUVID)
#
# Steps, each skipped when already done:
#   1. source: Debian's FFmpeg 5.1 orig tarball via `apt-get source
#      --download-only ffmpeg` into $CACHE/src (enables deb-src in
#      /etc/apt/sources.list.d/debian.sources first if it is missing); the
#      tarball is checked against the sha256 in the .dsc that apt verified.
#   2. build deps: nasm, libffmpeg-nvenc-dev (NVDEC/CUVID headers),
#      pkg-config, build-essential, zlib1g-dev, libbz2-dev.
#   3. configure/make/install into $CACHE/ffmpeg-static-<version>-<hash>,
#      where <hash> covers the configure flags, the nv-codec-headers version
#      and this recipe, so changing any of them rebuilds into a new prefix.
#      A stamp file there makes a second run a no-op.
#   4. go build with PKG_CONFIG_PATH/PKG_CONFIG_LIBDIR set to the prefix only
#      (Debian's shared .pc files cannot win) and CGO_LDFLAGS from
#      `pkg-config --static --libs ...`; then ldd must show no libav*/libsw*.
#
# What is in the FFmpeg build (see FLAGS below; README.md "GPU machines"):
# protocols file, pipe, tcp, udp, rtp, http, httpproxy, crypto (no TLS, so no
# https:// or rtsps://); demuxers for RTSP/RTP/SDP cameras, HTTP MJPEG and
# HLS, files in AVI, MP4/MOV, Matroska, MPEG-TS, raw H.264/HEVC/MJPEG, and
# still images; video decoders H.264, HEVC, MPEG-4 Part 2 (Xvid/DivX),
# MS-MPEG4 v1-3, Cinepak, MJPEG, PNG, plus h264/hevc_cuvid and NVDEC
# hwaccels; a few audio decoders so that probing and the CLI behave as with
# Debian's FFmpeg on files with sound; swscale, swresample and a small
# avfilter.
set -euo pipefail
cd "$(dirname "$0")/.."
START=$SECONDS

CACHE="${VIGIL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/vigil}"
SRC="$CACHE/src"
mkdir -p "$SRC" bin
VERSION_LD="${1:-$(git describe --always --dirty 2>/dev/null || echo dev)}"

log() { printf 'static: %s\n' "$*" >&2; }
die() { printf 'static: error: %s\n' "$*" >&2; exit 1; }
sudo_() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# Bump when the build recipe changes in a way the flags do not show.
RECIPE=1

# --- 1. source ------------------------------------------------------------------
orig() { ls "$SRC"/ffmpeg_5.1.*.orig.tar.xz 2>/dev/null | sort -V | tail -1 || true; }
if [ -z "$(orig)" ]; then
  SOURCES=/etc/apt/sources.list.d/debian.sources
  if [ -f "$SOURCES" ] && ! grep -q '^Types:.*deb-src' "$SOURCES"; then
    log "enabling deb-src in $SOURCES"
    sudo_ sed -i 's/^Types: deb$/Types: deb deb-src/' "$SOURCES"
    sudo_ apt-get update -qq
  fi
  log "downloading Debian's FFmpeg source into $SRC"
  if ! (cd "$SRC" && apt-get source --download-only -qq ffmpeg >/dev/null); then
    sudo_ apt-get update -qq
    (cd "$SRC" && apt-get source --download-only -qq ffmpeg >/dev/null) ||
      die "apt-get source ffmpeg failed (is deb-src enabled in /etc/apt/sources.list*?)"
  fi
  [ -n "$(orig)" ] || die "no ffmpeg_5.1.*.orig.tar.xz in $SRC (Debian's ffmpeg is no longer 5.1?)"
fi
TARBALL=$(orig)
FFVER=$(basename "$TARBALL" | sed 's/^ffmpeg_\(.*\)\.orig\.tar\.xz$/\1/')

# --- 2. build dependencies --------------------------------------------------------
PKGS=(build-essential pkg-config nasm zlib1g-dev libbz2-dev libffmpeg-nvenc-dev xz-utils)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive sudo_ apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
NVHDR=$(dpkg-query -W -f='${Version}' libffmpeg-nvenc-dev)

# --- 3. FFmpeg ---------------------------------------------------------------------
FLAGS=(
  --enable-static --disable-shared --enable-pic
  --disable-debug --disable-doc --disable-programs --enable-ffmpeg
  # Nothing from the build machine unless named: no VAAPI/VDPAU/X11/ALSA/SDL
  # or lzma shared libraries sneak in.
  --disable-autodetect --enable-pthreads --enable-zlib --enable-bzlib
  --disable-everything
  --enable-avcodec --enable-avformat --enable-avfilter --enable-avdevice
  --enable-swscale --enable-swresample
  --enable-protocol=file,pipe,tcp,udp,rtp,http,httpproxy,crypto
  --enable-demuxer=rtsp,rtp,sdp,avi,mov,matroska,mpegts,h264,hevc,mjpeg,mpjpeg,hls,image2,image_png_pipe,image_jpeg_pipe
  --enable-decoder=h264,hevc,mpeg4,msmpeg4v1,msmpeg4v2,msmpeg4v3,cinepak,mjpeg,png
  --enable-decoder=aac,ac3,pcm_s16le,pcm_alaw,pcm_mulaw
  --enable-parser=h264,hevc,mpeg4video,mjpeg,png,aac,ac3
  --enable-bsf=h264_mp4toannexb,hevc_mp4toannexb
  # NVIDIA: libcuda/libnvcuvid are dlopened at run time through ffnvcodec.
  --enable-ffnvcodec --enable-cuda --enable-cuvid --enable-nvdec
  --enable-decoder=h264_cuvid,hevc_cuvid
  --enable-hwaccel=h264_nvdec,hevc_nvdec,mpeg4_nvdec,mjpeg_nvdec
  --enable-filter=scale,null,format,hwdownload,hwupload,hwupload_cuda,anull,aformat,aresample
  --enable-muxer=null
  --enable-encoder=rawvideo,wrapped_avframe,pcm_s16le
)
HASH=$(printf '%s\n' "$RECIPE" "$FFVER" "$NVHDR" "${FLAGS[@]}" | sha256sum | cut -c1-12)
PREFIX="$CACHE/ffmpeg-static-$FFVER-$HASH"
STAMP="$PREFIX/.vigil-stamp"

if [ -f "$STAMP" ]; then
  log "FFmpeg $FFVER up to date in $PREFIX"
else
  # The .dsc lists the tarball's sha256; apt checked the .dsc against the
  # signed Sources index when it downloaded it.
  DSC=$(ls "$SRC"/ffmpeg_"$FFVER"-*.dsc 2>/dev/null | sort -V | tail -1 || true)
  [ -n "$DSC" ] || die "no .dsc for ffmpeg $FFVER in $SRC; remove $TARBALL and rerun"
  want=$(awk -v f="$(basename "$TARBALL")" '/^Checksums-Sha256:/{s=1;next} /^[^ ]/{s=0} s && $3==f {print $1}' "$DSC")
  got=$(sha256sum "$TARBALL" | cut -d' ' -f1)
  [ -n "$want" ] && [ "$got" = "$want" ] || die "sha256 mismatch for $TARBALL: got $got, want ${want:-nothing in $DSC}"

  B="$SRC/build-$FFVER-$HASH"
  rm -rf "$B" "$PREFIX" && mkdir -p "$B"
  log "unpacking $(basename "$TARBALL") (sha256 $got)"
  tar -xJf "$TARBALL" -C "$B" --strip-components=1
  log "configuring FFmpeg $FFVER (flags hash $HASH)"
  (cd "$B" && ./configure --prefix="$PREFIX" "${FLAGS[@]}" >configure.out 2>&1) ||
    { tail -20 "$B/configure.out" "$B/ffbuild/config.log" >&2 || true; die "FFmpeg configure failed; see $B/ffbuild/config.log"; }
  log "building FFmpeg with make -j$(nproc) (a minute or two; log: $B/make.out)"
  t=$SECONDS
  (cd "$B" && make -j"$(nproc)" >make.out 2>&1 && make install >>make.out 2>&1) ||
    { tail -30 "$B/make.out" >&2; die "FFmpeg build failed; see $B/make.out"; }
  log "built FFmpeg in $((SECONDS - t)) s"
  printf '%s\n' "$FFVER" "${FLAGS[@]}" >"$STAMP"
  rm -rf "$B"
fi

# --- 4. vigil against it ---------------------------------------------------------------
# PKG_CONFIG_LIBDIR replaces pkg-config's default search path, so go-astiav's
# `#cgo pkg-config:` lines can only see the static .pc files.
export PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig" PKG_CONFIG_LIBDIR="$PREFIX/lib/pkgconfig"
libs=()
for l in libavcodec libavformat libavfilter libavdevice libswscale libswresample libavutil; do
  [ -f "$PREFIX/lib/pkgconfig/$l.pc" ] && libs+=("$l")
done
CGO_LDFLAGS="$(pkg-config --static --libs "${libs[@]}")"
export CGO_LDFLAGS CGO_ENABLED=1
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}"
GO=$(bash scripts/go.sh) || die "no Go toolchain new enough for go.mod (run make setup)"
log "building bin/vigil-static ($VERSION_LD)"
"$GO" build -trimpath -ldflags "-X main.version=$VERSION_LD" -o bin/vigil-static ./cmd/vigil
cmp -s "$PREFIX/bin/ffmpeg" bin/ffmpeg-static || install -m 755 "$PREFIX/bin/ffmpeg" bin/ffmpeg-static

# Only system libraries may be linked dynamically.
deps=$(ldd bin/vigil-static | awk '{print $1}')
if bad=$(grep -E '^lib(av|sw|postproc)' <<<"$deps"); then
  die "bin/vigil-static links shared FFmpeg libraries: $(echo $bad)"
fi
if bad=$(grep -vE '^(linux-vdso|/lib64/ld-linux|lib(c|m|z|bz2|dl|pthread|rt|resolv)\.so)' <<<"$deps"); then
  die "bin/vigil-static links unexpected shared libraries: $(echo $bad)"
fi
bin/vigil-static version >/dev/null || die "bin/vigil-static does not run"
log "bin/vigil-static $(du -h bin/vigil-static | cut -f1), links only: $(echo $deps)"
log "bin/ffmpeg-static $(du -h bin/ffmpeg-static | cut -f1) (FFmpeg $FFVER); done in $((SECONDS - START)) s"
