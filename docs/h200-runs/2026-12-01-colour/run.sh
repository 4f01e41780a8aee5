#!/usr/bin/env bash
# run.sh WHICH TESTS: unpacks the carried ONNX Runtime GPU libraries, the
# inputs and the WHICH (new|old) gpu test binary into /tmp/vg, then runs
# the binary's tests matching TESTS, with output to $OUT/WHICH-gpu-test.txt.
set -uo pipefail
C=$(cd "$(dirname "$0")/.." && pwd)
W=$1 RUN=$2 D=/tmp/vg
mkdir -p $D/lib $D/models $D/media
for f in $C/common/lib/*; do
  case $f in *.xz) b=$(basename "$f" .xz); [ -f $D/lib/$b ] || xz -dc -T0 "$f" >$D/lib/$b ;; *) cp -n "$f" $D/lib/ ;; esac
done
[ -f $D/yolox_nano.onnx ] || xz -dc $C/common/yolox_nano.onnx.xz >$D/yolox_nano.onnx
[ -f $C/$W/assets.tar.xz ] && tar -xJf $C/$W/assets.tar.xz -C $D
xz -dc $C/$W/gpu.test.xz >$D/$W.test && chmod +x $D/$W.test
ld=$D/lib
for d in /usr/local/cuda/lib64 /opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn/lib /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu13/lib; do
  [ -d "$d" ] && ld="$ld:$d"
done
export LD_LIBRARY_PATH=$ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export VIGIL_CACHE_DIR=$D VIGIL_ORT_LIBRARY=$D/lib/libonnxruntime.so.1 VIGIL_YOLOX=$D/yolox_nano.onnx \
  VIGIL_H264=$C/common/cam1080.mp4 VIGIL_VTEST=$C/common/sd-vtest37.mp4
{
  echo "# $W: $(sha256sum $D/$W.test | cut -c1-16) $(date -u +%FT%TZ)"
  nvidia-smi -L
  echo "+ $W.test -test.v -test.count 1 -test.run '$RUN'"
  cd $D && time ./$W.test -test.v -test.count 1 -test.run "$RUN" 2>&1
  echo "exit $?"
} 2>&1 | tee $OUT/$W-gpu-test.txt
