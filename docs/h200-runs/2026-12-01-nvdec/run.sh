#!/usr/bin/env bash
# run.sh [tests] [rate]: runs on the H200 from the carried folder (this
# file's folder, .carry/nvdec): the direct-NVDEC GPU tests of the decode
# test binary, then, in the same call, the decode-only measurement: the
# probe (../shared/tools/nvdec-direct, built here from its source) and
# vigil's decode.Source with direct NVDEC and with FFmpeg's hwaccel, each at
# 7, 14 and 28 sessions on cam1080, with nvidia-smi logging alongside.
# Outputs go to $OUT.
set -uo pipefail
C=$(cd "$(dirname "$0")" && pwd)
D=/tmp/nv
mkdir -p "$D"
PARTS=${*:-tests rate}
xz -dc "$C/decode.test.xz" >"$D/decode.test" && chmod +x "$D/decode.test"
export VIGIL_NVDEC_CLIPS=$C/clips VIGIL_H264=$C/cam1080.mp4
{
  date -u
  nvidia-smi -L
  nvidia-smi --query-gpu=driver_version,clocks.max.video,clocks.video,utilization.decoder --format=csv
  echo "cores: $(nproc)"
  sha256sum "$D/decode.test" "$C/cam1080.mp4" "$C/cam1080.h264" "$C"/clips/*
} >"$OUT/machine.txt" 2>&1
cd "$D" || exit 1
for part in $PARTS; do
  case $part in
  tests)
    echo "## GPU tests (decode, -tags gpu)"
    timeout 300 ./decode.test -test.v -test.count 1 -test.run 'TestNVDECDirect|TestNVDECMatchesSoftware' 2>&1 | tee "$OUT/gpu-tests.txt" | grep -E '^(=== RUN|--- |    --- |PASS|FAIL|ok)|bit-identical|decoders made|panic' | head -60
    ;;
  rate)
    echo "## decode-only rate, cam1080 (probe, then vigil direct, then vigil ffmpeg)"
    gcc -O2 -Wall -I"$C/probe" -o "$D/nvdecbench" "$C/probe/nvdecbench.c" -ldl -lpthread >"$D/gcc.txt" 2>&1 &&
      echo "probe built here" || { echo "probe: gcc failed ($(head -c 300 "$D/gcc.txt")), using the carried binary"; cp "$C/probe/nvdecbench" "$D/"; }
    nvidia-smi --query-gpu=timestamp,utilization.decoder,utilization.gpu,clocks.video --format=csv -lms 500 >"$OUT/nvsmi-query.csv" 2>&1 &
    SMI=$!
    for n in 7 14 28; do
      timeout 60 "$D/nvdecbench" "$C/cam1080.h264" --sessions "$n" --seconds 6 --label "probe-n$n" 2>&1
    done | tee "$OUT/probe.txt" | grep -E '^RESULT|failed|error' | cut -c1-300
    VIGIL_NVDEC_RATE="direct:7,14,28 ffmpeg:7,14,28" timeout 400 ./decode.test -test.v -test.count 1 -test.run 'TestNVDECDecodeRate$' 2>&1 |
      tee "$OUT/vigil-rate.txt" | grep -E '^RESULT|^--- |FAIL|panic' | cut -c1-400
    kill $SMI 2>/dev/null
    ;;
  esac
done
