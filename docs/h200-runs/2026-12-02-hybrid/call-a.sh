#!/usr/bin/env bash
# Call A (2026-12-02, second session): ONNX Runtime 1.29's CUDA provider
# libraries into /tmp/eng/lib, and the inputs of call B into /tmp/eng:
# cam1080.mp4, YOLOX-Nano with fixed-batch copies (scripts/batch_models.py),
# and the CPU bench's assets (Megamind.avi, BlazeFace) as an asset cache.
# Carried: .carry/acc3lib (the libraries, xz) and .carry/s5a.
set -uo pipefail
D=/tmp/eng; R=$OUT; S=.carry/s5a
mkdir -p $D/lib $D/models $D/cache/media $D/cache/models
for f in .carry/acc3lib/*.xz; do xz -dc -T0 "$f" >"$D/lib/$(basename "$f" .xz)"; done
cp .carry/acc3lib/libonnxruntime_providers_shared.so $D/lib/
cp $S/cam1080.mp4 $D/; xz -dc $S/yolox_nano.onnx.xz >$D/models/yolox_nano.onnx
cp $S/Megamind.avi $D/cache/media/; cp $S/face_detection_*.onnx $D/cache/models/
cp scripts/batch_models.py scripts/gpu-soak.py $D/
python3 $D/batch_models.py $D/models/yolox_nano.onnx 8 32 64 >$R/setup-a.txt 2>&1
python3 $D/batch_models.py $D/cache/models/face_detection_back_256x256_barracuda.onnx 4 8 32 >>$R/setup-a.txt 2>&1
python3 $D/batch_models.py $D/cache/models/face_detection_front_128x128_barracuda.onnx 4 8 32 >>$R/setup-a.txt 2>&1
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version,clocks.max.video --format=csv; echo "cores: $(nproc)"; cat /proc/loadavg; sha256sum $D/lib/* $D/models/* $D/cam1080.mp4 $D/cache/*/*; } >$R/machine-a.txt 2>&1
ls -la $D $D/models $D/cache/models >>$R/setup-a.txt
tail -5 $R/setup-a.txt
