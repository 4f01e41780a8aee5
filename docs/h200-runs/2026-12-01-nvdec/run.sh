#!/usr/bin/env bash
# run.sh PART...: runs on the H200 from the carried folder (this file's
# folder, .carry/nvdec), writing to $OUT. PARTs, in the order given:
#   tests    the direct-NVDEC GPU tests of the decode test binary
#   kernel   infer/gpu's P016 kernel test (no ONNX Runtime needed)
#   rate     the decode-only measurement, in one block: the probe
#            (../shared/tools/nvdec-direct, built here from its source), then
#            vigil's decode.Source with direct NVDEC and with FFmpeg's
#            hwaccel, each at 7, 14 and 28 sessions on cam1080, with
#            nvidia-smi logging alongside
#   profile  direct and ffmpeg at 14 sessions again, with a CPU profile each
#            (labelled -profiled; not the figures, since profiling costs a little)
#   detect   infer/gpu's detection tests with ONNX Runtime's CUDA provider
#            (lib/ and yolox_nano.onnx.xz carried)
set -uo pipefail
C=$(cd "$(dirname "$0")" && pwd)
D=/tmp/nv
mkdir -p "$D"
for b in decode gpu; do
  [ -f "$C/$b.test.xz" ] && xz -dc "$C/$b.test.xz" >"$D/$b.test" && chmod +x "$D/$b.test"
done
export VIGIL_NVDEC_CLIPS=$C/clips VIGIL_H264=$C/cam1080.mp4
{
  date -u
  nvidia-smi -L
  nvidia-smi --query-gpu=driver_version,clocks.max.video,clocks.video,utilization.decoder --format=csv
  echo "cores: $(nproc)"
  sha256sum "$D"/*.test "$C"/cam1080.* "$C"/clips/*
} >"$OUT/machine.txt" 2>&1
cd "$D" || exit 1
for part in "$@"; do
  case $part in
  tests)
    echo "## decode GPU tests"
    timeout 300 ./decode.test -test.v -test.count 1 -test.run 'TestNVDECDirect|TestNVDECMatchesSoftware' 2>&1 | tee "$OUT/gpu-tests.txt" |
      grep -E '^(--- |    --- |PASS|FAIL|ok)|bit-identical|decoders made|panic|Error:' | head -40
    ;;
  kernel)
    echo "## infer/gpu kernel test"
    timeout 120 ./gpu.test -test.v -test.count 1 -test.run 'TestKernelDeepMatchesNV12|TestKernelHalfOutput' 2>&1 | tee "$OUT/kernel-test.txt" |
      grep -E '^(--- |PASS|FAIL|ok)|panic|Error:' | head -20
    ;;
  rate)
    echo "## decode-only rate, cam1080 (probe, then vigil direct, then vigil ffmpeg)"
    gcc -O2 -Wall -I"$C/probe" -o "$D/nvdecbench" "$C/probe/nvdecbench.c" -ldl -lpthread >"$D/gcc.txt" 2>&1 &&
      echo "probe built here" || { echo "probe: gcc failed ($(head -c 300 "$D/gcc.txt")), using the carried binary"; cp "$C/probe/nvdecbench" "$D/"; }
    nvidia-smi --query-gpu=timestamp,utilization.decoder,utilization.gpu,clocks.video --format=csv -lms 500 >"$OUT/nvsmi-query.csv" 2>&1 &
    SMI=$!
    for n in 7 14 28; do
      timeout 60 "$D/nvdecbench" "$C/cam1080.h264" --sessions "$n" --seconds 6 --label "probe-n$n" 2>&1
    done | tee "$OUT/probe.txt" | grep -E '^RESULT|failed|error' | cut -c1-120
    VIGIL_NVDEC_RATE="direct:7,14,28 ffmpeg:7,14,28" timeout 400 ./decode.test -test.v -test.count 1 -test.run 'TestNVDECDecodeRate$' 2>&1 |
      tee "$OUT/vigil-rate.txt" | grep -E '^RESULT|^--- |FAIL|panic' | cut -c1-330
    kill $SMI 2>/dev/null
    ;;
  profile)
    echo "## profiled runs"
    VIGIL_NVDEC_RATE="direct:14 ffmpeg:14" VIGIL_NVDEC_RATE_LABEL=-profiled VIGIL_NVDEC_RATE_PROFILE=$OUT timeout 120 \
      ./decode.test -test.v -test.count 1 -test.run 'TestNVDECDecodeRate$' 2>&1 | tee -a "$OUT/vigil-rate.txt" | grep -E '^RESULT|^--- |FAIL' | cut -c1-200
    ;;
  detect)
    echo "## infer/gpu detection tests (ONNX Runtime, CUDA provider)"
    mkdir -p "$D/lib"
    for f in "$C"/lib/*; do
      case $f in *.xz) xz -dc -T0 "$f" >"$D/lib/$(basename "$f" .xz)" ;; *) cp "$f" "$D/lib/" ;; esac
    done
    xz -dc "$C/yolox_nano.onnx.xz" >"$D/yolox_nano.onnx"
    ld=$D/lib
    for d in /usr/local/cuda/lib64 /opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn/lib /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu13/lib; do
      [ -d "$d" ] && ld="$ld:$d"
    done
    LD_LIBRARY_PATH=$ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} VIGIL_CACHE_DIR=$D VIGIL_ORT_LIBRARY=$D/lib/libonnxruntime.so.1 \
      VIGIL_YOLOX=$D/yolox_nano.onnx VIGIL_HEVC=$C/clips/cam720-hevc.mp4 VIGIL_HEVC10=$C/clips/cam720-hevc10.mp4 \
      timeout 300 ./gpu.test -test.v -test.count 1 -test.run 'TestNVDECFramesMatchSoftware|TestKernelDeepMatchesNV12' 2>&1 |
      tee "$OUT/detect-test.txt" | grep -E '^(--- |    --- |PASS|FAIL|ok)|detections match|panic|Error:' | head -30
    ;;
  esac
done
