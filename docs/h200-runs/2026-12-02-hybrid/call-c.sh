#!/usr/bin/env bash
# Call C (2026-12-02, second session), run inline right after call B on the
# warm machine: waits for BenchmarkViewerCost (started by call B in its own
# session) and collects it, then TestNVDECDecodeRate at 14 unpaced sessions
# with the driver's wait and with nvdec_poll 100us, each with a Go CPU
# profile (rate-wait.pprof, rate-poll100.pprof).
D=/tmp/eng; R=$OUT; T0=$SECONDS
while pgrep -f BenchmarkViewerCost >/dev/null && [ $((SECONDS-T0)) -lt 260 ]; do sleep 3; done
echo "viewer wait $((SECONDS-T0)) s"; cp $D/viewer-cost.txt $R/
ld=$D/lib
for d in /usr/local/cuda/lib64 /opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn/lib /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu13/lib; do [ -d "$d" ] && ld="$ld:$d"; done
export LD_LIBRARY_PATH=$ld
rate() { (cd decode && VIGIL_H264=$D/cam1080.mp4 VIGIL_NVDEC_POLL_US=$1 VIGIL_NVDEC_RATE="direct:14" VIGIL_NVDEC_RATE_LABEL=$2 timeout 60 $D/decode.test -test.run '^TestNVDECDecodeRate$' -test.v -test.cpuprofile $R/rate$2.pprof 2>&1 | grep -E '^RESULT|FAIL|panic'); }
{ rate 0 -wait; rate 100 -poll100; } | tee $R/rate-c.txt
