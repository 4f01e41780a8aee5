#!/usr/bin/env bash
# Call 1 (2026-12-02): ONNX Runtime into /tmp/eng/lib for the later calls;
# decode-only NVDEC CPU per frame, the driver's wait (poll 0) against
# decode.nvdec_poll (200 µs), unpaced (TestNVDECDecodeRate) and paced
# (TestNVDECStart's settled window).
set -uo pipefail
C=$(cd "$(dirname "$0")" && pwd)
D=/tmp/eng; R=$OUT; T0=$SECONDS
mkdir -p $D/lib
for f in .carry/acc3lib/*.xz; do xz -dc -T0 "$f" >"$D/lib/$(basename "$f" .xz)"; done
cp .carry/acc3lib/libonnxruntime_providers_shared.so $D/lib/
xz -dc -T0 $C/decode.test.xz >$D/decode.test && chmod +x $D/decode.test
cp $C/cam1080.mp4 $D/
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version,clocks.max.video --format=csv; echo "cores: $(nproc)"; sha256sum $D/decode.test $D/cam1080.mp4; } >$R/machine.txt 2>&1
export VIGIL_H264=$D/cam1080.mp4
cd decode || exit 1
rate() { # poll_us sessions label
  VIGIL_NVDEC_POLL_US=$1 VIGIL_NVDEC_RATE="direct:$2" VIGIL_NVDEC_RATE_LABEL=$3 timeout 120 $D/decode.test -test.run '^TestNVDECDecodeRate$' -test.v 2>&1 | grep -E '^RESULT|FAIL|panic' ; }
{
  rate 0 14 -wait-a; rate 200 14 -poll200-a; rate 200 14 -poll200-b; rate 0 14 -wait-b
  rate 100 14 -poll100; rate 0 7 -wait; rate 200 7 -poll200; rate 0 28 -wait; rate 200 28 -poll200
} | tee $R/rate.txt
echo "rate done after $((SECONDS-T0)) s"
start() { # poll_us sessions label
  VIGIL_NVDEC_POLL_US=$1 VIGIL_NVDEC_START="direct:$2" VIGIL_NVDEC_START_SECONDS=20 VIGIL_NVDEC_RATE_LABEL=$3 timeout 120 $D/decode.test -test.run '^TestNVDECStart$' -test.v 2>&1 | grep -E '^RESULT|FAIL|panic' ; }
{ start 0 96 -wait; start 200 96 -poll200; start 0 160 -wait; start 200 160 -poll200; } | tee $R/paced.txt
echo "all done after $((SECONDS-T0)) s"
