#!/usr/bin/env bash
# Call 3 (2026-12-02), on the machine call 2 left warm: waits for the soak
# that call 2 started, collects it, then `vigil bench --streams` on cam1080
# with YOLOX-Nano: NVDEC only at 160 with CUDA graphs on and off, and hybrid
# (direct NVDEC + CPU) at 176 and 192 with a CPU profile. $1: decode.nvdec_poll.
set -uo pipefail
D=/tmp/eng; R=$OUT; T0=$SECONDS; POLL=${1:-0s}
[ -x "$D/vigil" ] || { echo "no /tmp/eng/vigil: the machine went cold" | tee "$R/summary3.txt"; exit 1; }
while pgrep -f gpu-soak.py >/dev/null && [ $((SECONDS-T0)) -lt 200 ]; do sleep 5; done
echo "soak wait ended after $((SECONDS-T0)) s; still running: $(pgrep -f gpu-soak.py | wc -l)" >>$D/soak.txt
cp $D/soak.txt $D/soak-started.txt $R/ ; tail -c 20000 $D/soak-vigil.log >$R/soak-vigil-tail.log
pkill -f gpu-soak.py; pkill -f 'vigil run'; sleep 2
ld=$D/lib
for d in /usr/local/cuda/lib64 /opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn/lib /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu13/lib; do [ -d "$d" ] && ld="$ld:$d"; done
export LD_LIBRARY_PATH=$ld VIGIL_CACHE_DIR=$D VIGIL_ORT_LIBRARY=$D/lib/libonnxruntime.so.1
cd $D || exit 1
for g in true false; do
cat >nv-$g.yaml <<YAML
infer: {batch_sizes: [1, 8, 32, 64], cuda_graph: $g}
decode: {hwaccel: cuda, nvdec: direct, hw_surfaces: 8, nvdec_poll: $POLL}
pipeline: {max_queue_delay_us: 4000}
YAML
done
cat >hybrid.yaml <<YAML
infer: {batch_sizes: [1, 8, 32, 64], cuda_graph: true}
decode: {hwaccel: hybrid, nvdec: direct, hw_surfaces: 8, nvdec_poll: $POLL, nvdec_pixel_rate: 10974535021, cpu_pixel_rate: 3271226779}
pipeline: {max_queue_delay_us: 4000}
YAML
b() { # name config args...
  local n=$1 c=$2; shift 2
  nvidia-smi dmon -s u -d 1 -o T >"$R/dmon-$n.txt" 2>&1 & local smi=$!
  echo "\$ vigil bench --streams --config $c --model yolox-nano --source cam1080.mp4 --budget-ms 100 $*" >"$D/$n.txt"
  timeout 240 ./vigil bench --streams --config $c --model yolox-nano --source cam1080.mp4 --budget-ms 100 "$@" >>"$D/$n.txt" 2>&1
  echo "exit status $? after $((SECONDS - T0)) s" >>"$D/$n.txt"
  kill $smi 2>/dev/null; wait $smi 2>/dev/null
  grep -v cudnn_fe_call "$D/$n.txt" >"$R/$n.txt"
}
b nv160-graphs nv-true.yaml --ceiling 0 --warmup 10s --each 6s --start 160 --max-streams 160
b nv160-eager nv-false.yaml --ceiling 0 --warmup 10s --each 6s --start 160 --max-streams 160
b hybrid hybrid.yaml --ceiling 5s --warmup 10s --each 6s --start 176 --step 16 --max-streams 192 --cpuprofile $R/hybrid.pprof
for f in $R/nv160-*.txt $R/hybrid.txt; do echo "== $f"; grep -E 'ceiling|^ +[0-9]+ +[0-9.]+ +[0-9.]+|fails|result|acceptance|panic|rror|exit status' $f | cut -c1-260; done | tee $R/summary3.txt
