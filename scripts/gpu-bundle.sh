#!/usr/bin/env bash
# gpu-bundle.sh packs a self-contained vigil for an NVIDIA GPU machine into
# .gpu/ (git-ignored), small enough to carry in one 64 MiB transfer together
# with the repository. Run by `make gpu-bundle`, after `make static`.
#
#   .gpu/bin/vigil-static.xz      bin/vigil-static, stripped (static FFmpeg inside)
#   .gpu/bin/ffmpeg-static.xz     the matching ffmpeg CLI (NVDEC/CUVID enabled)
#   .gpu/lib/...                  ONNX Runtime 1.29.0 with its CUDA 13 execution
#                                 provider (cubins pruned to sm_90, the H100/H200's
#                                 architecture), the TensorRT provider and the
#                                 provider bridge
#   .gpu/assets.tar.xz            models/*.onnx and media/Megamind.avi from the cache
#   .gpu/unpack.sh                `. .gpu/unpack.sh` on the GPU machine unpacks to
#                                 /tmp/vigil-gpu (once) and exports the paths
#   .gpu/MANIFEST                 sha256 of every file above
#
# ONNX Runtime comes from two npm packages (adapted from
# ../shared/tools/gpu-bundle/make-ort-gpu-bundle.sh):
#   onnxruntime-node@1.29.0                         libonnxruntime.so.1 (core, with
#                                                    the CUDA/TensorRT provider bridge)
#   com.github.asus4.onnxruntime.linux-x64-gpu@0.4.9 Microsoft's ORT 1.29.0 CUDA 13
#                                                    providers (do not mix them with
#                                                    another core version)
# The CUDA provider is 230 MB; scripts/prune_fatbin.py zero-fills every cubin
# that is not sm_90, and xz does the rest. The compressed libraries are cached
# in $CACHE/ort-gpu-1.29.0 (the 290 MB of .tgz files are deleted after), so a
# second run only re-packs what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
START=$SECONDS
CACHE="${VIGIL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/vigil}"
OUT=.gpu
LIMIT_MIB=60 # the device tool carries 64 MiB a call, repository included

log() { printf 'gpu-bundle: %s\n' "$*" >&2; }
die() { printf 'gpu-bundle: error: %s\n' "$*" >&2; exit 1; }
sha() { sha256sum "$1" | cut -d' ' -f1; }
# check FILE SHA256: fails loudly on mismatch.
check() {
  local got; got=$(sha "$1")
  [ "$got" = "$2" ] || { rm -f "$1"; die "sha256 mismatch for $1: got $got, want $2"; }
}
# xz_to SRC DEST: --x86 (BCJ) makes machine code ~8 % smaller.
xz_to() { xz -T0 --x86 --lzma2=preset="${XZ_PRESET:-6}" -c "$1" >"$2.tmp" && mv "$2.tmp" "$2"; }

# --ort-only (scripts/image.sh): only fill the ONNX Runtime cache below.
ORT_ONLY=0; [ "${1:-}" = --ort-only ] && ORT_ONLY=1
for f in bin/vigil-static bin/ffmpeg-static; do
  [ "$ORT_ONLY" = 1 ] || [ -x "$f" ] || die "$f is missing; run make static first"
done
for c in npm xz strip python3; do
  command -v "$c" >/dev/null || die "$c not found (run make setup; strip is in binutils)"
done

# --- ONNX Runtime 1.29.0 GPU, compressed once into the cache -----------------------
ORT="$CACHE/ort-gpu-1.29.0"
mkdir -p "$ORT"
NODE_TGZ=onnxruntime-node-1.29.0.tgz
NODE_TGZ_SHA=cfdfb45ec4044b1fdca43e5d2e180fb6817e649ff8ad1e0dfc90e18e51b67037
GPU_TGZ=com.github.asus4.onnxruntime.linux-x64-gpu-0.4.9.tgz
GPU_TGZ_SHA=2b459e0c17f340c92970c10ed86de4f37a3009f93c14053e6ad4334cbb6be412
CORE=package/bin/napi-v6/linux/x64/libonnxruntime.so.1
CORE_SHA=89688f5cf51c7e31befbb7b9101bc027799009b18d1baa9a5b1146a72e69538d
P=package/Plugins/Linux/x64
CUDA_SHA=56cf3254b118ad837ccc4ed8f6d1b23504bbf7ef91b34cbc0b289cb7f10b3037
CUDA90_SHA=954a6f20441f6c7ffc83b3008afa0310a3ccecef2e74ec6885842e05914dc065 # after prune_fatbin.py 90
SHARED_SHA=c6a12593396095f5670160e284c35d1700b7708cf3037b7042e2a5200ccae772
TRT_SHA=ef6071798a339038ad66c428fb1a809cf8e499bffc3b6870e4e8bc4f4c6a6320
ORT_FILES=(libonnxruntime.so.1.xz libonnxruntime_providers_cuda.so.xz
  libonnxruntime_providers_tensorrt.so.xz libonnxruntime_providers_shared.so)

if ! (cd "$ORT" && sha256sum -c --quiet --status SHA256SUMS 2>/dev/null); then
  cd "$ORT"
  # npm_pack SPEC TGZ SHA256
  npm_pack() {
    if [ ! -f "$2" ]; then
      log "downloading npm $1"
      npm pack --silent "$1" >/dev/null || die "npm pack $1 failed"
    fi
    check "$2" "$3"
  }
  npm_pack onnxruntime-node@1.29.0 "$NODE_TGZ" "$NODE_TGZ_SHA"
  npm_pack com.github.asus4.onnxruntime.linux-x64-gpu@0.4.9 "$GPU_TGZ" "$GPU_TGZ_SHA"
  rm -rf package
  tar -xzf "$NODE_TGZ" "$CORE"
  tar -xzf "$GPU_TGZ" "$P/libonnxruntime_providers_cuda.so" "$P/libonnxruntime_providers_shared.so" \
    "$P/libonnxruntime_providers_tensorrt.so"
  check "$CORE" "$CORE_SHA"
  check "$P/libonnxruntime_providers_cuda.so" "$CUDA_SHA"
  check "$P/libonnxruntime_providers_shared.so" "$SHARED_SHA"
  check "$P/libonnxruntime_providers_tensorrt.so" "$TRT_SHA"
  log "pruning the CUDA provider to sm_90: $(python3 "$REPO/scripts/prune_fatbin.py" \
    "$P/libonnxruntime_providers_cuda.so" cuda_sm90.so 90)"
  check cuda_sm90.so "$CUDA90_SHA"
  log "compressing ONNX Runtime (xz -9e, once; about 2 minutes on 2 cores)"
  XZ_PRESET=9e xz_to "$CORE" libonnxruntime.so.1.xz
  XZ_PRESET=9e xz_to cuda_sm90.so libonnxruntime_providers_cuda.so.xz
  XZ_PRESET=9e xz_to "$P/libonnxruntime_providers_tensorrt.so" libonnxruntime_providers_tensorrt.so.xz
  cp "$P/libonnxruntime_providers_shared.so" .
  sha256sum "${ORT_FILES[@]}" >SHA256SUMS
  rm -rf package cuda_sm90.so "$NODE_TGZ" "$GPU_TGZ"
  cd "$REPO"
fi

[ "$ORT_ONLY" = 0 ] || exit 0

# --- the bundle ------------------------------------------------------------------------
# .gpu/.inputs remembers the sha256 of what each packed file was made from, so
# an unchanged binary is not compressed again.
mkdir -p "$OUT/bin" "$OUT/lib"
touch "$OUT/.inputs"
fresh() { grep -qxF "$2 $1" "$OUT/.inputs" && [ -f "$1" ]; } # fresh PACKED INPUT_SHA
remember() { grep -v " $1\$" "$OUT/.inputs" >"$OUT/.inputs.tmp" || true; echo "$2 $1" >>"$OUT/.inputs.tmp"; mv "$OUT/.inputs.tmp" "$OUT/.inputs"; }

for f in "${ORT_FILES[@]}"; do
  cmp -s "$ORT/$f" "$OUT/lib/$f" || cp "$ORT/$f" "$OUT/lib/$f"
done

for b in vigil-static ffmpeg-static; do
  in=$(sha "bin/$b")
  if ! fresh "$OUT/bin/$b.xz" "$in"; then
    log "packing bin/$b (stripped, xz)"
    tmp=$(mktemp)
    strip -o "$tmp" "bin/$b"
    [ "$b" != vigil-static ] || "$tmp" version >/dev/null || die "stripped $b does not run"
    xz_to "$tmp" "$OUT/bin/$b.xz" && rm -f "$tmp"
    remember "$OUT/bin/$b.xz" "$in"
  fi
done

# Models and the demo clip, so that `vigil detect` and configs/demo.yaml work
# with VIGIL_CACHE_DIR pointing at the unpacked bundle.
ASSETS=($(cd "$CACHE" && ls models/*.onnx media/Megamind.avi 2>/dev/null)) || true
[ "${#ASSETS[@]}" -ge 2 ] && [ -f "$CACHE/media/Megamind.avi" ] || die "models or media missing in $CACHE; run make setup"
in=$(cd "$CACHE" && sha256sum "${ASSETS[@]}" | sha256sum | cut -d' ' -f1)
if ! fresh "$OUT/assets.tar.xz" "$in"; then
  log "packing models and media/Megamind.avi"
  tar -C "$CACHE" -cf - "${ASSETS[@]}" | xz -T0 -6 >"$OUT/assets.tar.xz.tmp" && mv "$OUT/assets.tar.xz.tmp" "$OUT/assets.tar.xz"
  remember "$OUT/assets.tar.xz" "$in"
fi

cat >"$OUT/unpack.sh.tmp" <<'EOS'
#!/usr/bin/env bash
# unpack.sh (bash): source it on the GPU machine (". .gpu/unpack.sh"; made by
# vigil's scripts/gpu-bundle.sh). It unpacks the bundle into $VIGIL_GPU_DIR
# (default /tmp/vigil-gpu), only when that copy is missing or differs from
# this bundle's MANIFEST, then exports:
#   PATH               + $VIGIL_GPU_DIR/bin (vigil-static, ffmpeg-static)
#   VIGIL_CACHE_DIR    $VIGIL_GPU_DIR: vigil's models/, media/ and lib/
#   VIGIL_ORT_LIBRARY  $VIGIL_GPU_DIR/lib/libonnxruntime.so.1 (what vigil loads)
#   ORT_LIB            the same, for other ONNX Runtime tools
#   LD_LIBRARY_PATH    + the bundle's lib/, CUDA's lib64 (cuBLAS, cudart, NVRTC)
#                      and the cuDNN 9 / CUDA 13 wheels of a PyTorch venv, if there
_vigil_gpu_unpack() {
  local src dst f rel d
  src=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd) || return 1
  dst=${VIGIL_GPU_DIR:-/tmp/vigil-gpu}
  if ! cmp -s "$src/MANIFEST" "$dst/MANIFEST"; then
    command -v xz >/dev/null || { echo "vigil-gpu: xz not found" >&2; return 1; }
    (cd "$src" && sha256sum --quiet -c MANIFEST) || { echo "vigil-gpu: $src is damaged (MANIFEST)" >&2; return 1; }
    echo "vigil-gpu: unpacking $src into $dst" >&2
    rm -rf "$dst.tmp" && mkdir -p "$dst.tmp" || return 1
    while read -r _ rel; do
      case $rel in
        *.tar.xz) tar -xJf "$src/$rel" -C "$dst.tmp" ;;
        *.xz) mkdir -p "$dst.tmp/$(dirname "$rel")" && xz -dc -T0 "$src/$rel" >"$dst.tmp/${rel%.xz}" ;;
        *) mkdir -p "$dst.tmp/$(dirname "$rel")" && cp "$src/$rel" "$dst.tmp/$rel" ;;
      esac || { echo "vigil-gpu: unpacking $rel failed" >&2; return 1; }
    done <"$src/MANIFEST"
    chmod +x "$dst.tmp"/bin/*
    cp "$src/MANIFEST" "$dst.tmp/MANIFEST"
    rm -rf "$dst" && mv "$dst.tmp" "$dst" || return 1
  fi
  export VIGIL_CACHE_DIR="$dst"
  export VIGIL_ORT_LIBRARY="$dst/lib/libonnxruntime.so.1"
  export ORT_LIB="$VIGIL_ORT_LIBRARY"
  case ":$PATH:" in *":$dst/bin:"*) ;; *) export PATH="$dst/bin:$PATH" ;; esac
  local ld="$dst/lib"
  for d in /usr/local/cuda/lib64 /opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn/lib \
    /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu13/lib; do
    [ -d "$d" ] && ld="$ld:$d"
  done
  case ":${LD_LIBRARY_PATH:-}:" in *":$dst/lib:"*) ;; *) export LD_LIBRARY_PATH="$ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;; esac
  echo "vigil-gpu: ready in $dst: $(vigil-static version | head -1)" >&2
}
_vigil_gpu_unpack
unset -f _vigil_gpu_unpack
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  echo "vigil-gpu: unpacked, but run as a program its exports are lost: source it (. ${BASH_SOURCE[0]})" >&2
fi
EOS
mv "$OUT/unpack.sh.tmp" "$OUT/unpack.sh"
chmod +x "$OUT/unpack.sh"

(cd "$OUT" && find bin lib assets.tar.xz -type f | sort | xargs sha256sum >MANIFEST.tmp && mv MANIFEST.tmp MANIFEST)

bytes=$(du -sb "$OUT" | cut -f1)
mib=$(awk -v b="$bytes" 'BEGIN{printf "%.1f", b/1048576}')
(cd "$OUT" && find . -type f ! -name .inputs -printf '%s %P\n' | sort -k2 |
  awk '{printf "  %7.2f MiB  .gpu/%s\n", $1/1048576, $2}') >&2
if [ "$bytes" -gt $((LIMIT_MIB * 1048576)) ]; then
  die "$OUT is $mib MiB, over the $LIMIT_MIB MiB limit (the repository and .gpu must fit in one 64 MiB carry)"
fi
log "$OUT is $mib MiB (limit $LIMIT_MIB MiB); done in $((SECONDS - START)) s"
