#!/usr/bin/env bash
# Call F (2026-12-02, third session), after call A on a cold machine: where
# the CPU goes at a hybrid 200-stream point (176 on NVDEC, 24 on the CPU,
# the binary and config of call B's b-h176): a Go CPU profile of the run
# (--cpuprofile), and every 5 s each thread's utime+stime and nice value
# from /proc/PID/task/*/stat (software decoders' threads run at nice 10,
# decode.cpu_nice; FFmpeg's, ONNX Runtime's and the driver's threads are
# not Go's and are missing from the Go profile).
# Carried: .carry/t1 (vigil.xz).
set -uo pipefail
D=/tmp/eng; R=$OUT; T0=$SECONDS
[ -s "$D/lib/libonnxruntime_providers_cuda.so" ] || { echo "no ONNX Runtime in /tmp/eng/lib: the machine went cold" | tee "$R/summary-f.txt"; exit 1; }
xz -dc -T0 .carry/t1/vigil.xz >$D/vigil && chmod +x $D/vigil
ld=$D/lib
for d in /usr/local/cuda/lib64 /opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn/lib /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu13/lib; do [ -d "$d" ] && ld="$ld:$d"; done
export LD_LIBRARY_PATH=$ld VIGIL_ORT_LIBRARY=$D/lib/libonnxruntime.so.1 VIGIL_CACHE_DIR=$D
{ date -u; $D/vigil version; sha256sum $D/vigil; cat /proc/loadavg; getconf _NPROCESSORS_ONLN; lscpu | grep -E 'Thread|Core|Socket|Model name'; } >$R/machine-f.txt 2>&1
cd $D || exit 1
NV=10974535021
cat >h176.yaml <<YAML
infer: {batch_sizes: [1, 8, 32, 64], cuda_graph: true}
decode: {hwaccel: hybrid, nvdec: direct, hw_surfaces: 8, nvdec_pixel_rate: $NV, cpu_pixel_rate: $((NV * 24 / 176))}
pipeline: {max_queue_delay_us: 4000}
YAML
n=f-h176-prof
echo "\$ vigil bench --streams --config h176.yaml ($(tr '\n' ' ' <h176.yaml)) --model yolox-nano --source cam1080.mp4 --budget-ms 100 --ceiling 0 --warmup 10s --each 6s --start 200 --max-streams 200 --cpuprofile f-h176.pprof" >$n.txt
timeout 150 ./vigil bench --streams --config h176.yaml --model yolox-nano --source cam1080.mp4 --budget-ms 100 --ceiling 0 --warmup 10s --each 6s --start 200 --max-streams 200 --cpuprofile $R/f-h176.pprof >>$n.txt 2>&1 &
pid=$!
while kill -0 $pid 2>/dev/null; do
  { echo "@ $((SECONDS - T0)) $(date +%s.%N)"; for t in /proc/$pid/task/*; do cat $t/stat 2>/dev/null; done; } >>$R/threads-f.txt
  sleep 5
done
wait $pid; echo "exit status $? after $((SECONDS - T0)) s" >>$n.txt
grep -v cudnn_fe_call $n.txt >$R/$n.txt
xz -9 $R/threads-f.txt
grep -hE '^\$|^ +[0-9]+ +[0-9.]+ +[0-9.]+|drops:|by decoder|fails|result|panic|exit status' $R/$n.txt | cut -c1-600 | tee $R/summary-f.txt
