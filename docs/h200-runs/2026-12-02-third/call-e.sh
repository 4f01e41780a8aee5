#!/usr/bin/env bash
# Call E (2026-12-02, third session): TestNVDECPictureCopy (issue 19: a
# frame of direct NVDEC and one of FFmpeg's NVDEC hwaccel, copied out of
# device memory for pictures, equal the software decoder's copy), with
# decode.test at this commit (go test -c -tags gpu, static FFmpeg 5.1.9)
# and the GPU test clips of TestMakeNVDECClips. Needs no ONNX Runtime.
# Carried: .carry/t3 (decode.test.xz, clips/).
set -uo pipefail
D=/tmp/eng; R=$OUT; mkdir -p $D
xz -dc -T0 .carry/t3/decode.test.xz >$D/decode.test && chmod +x $D/decode.test
rm -rf $D/clips; cp -r .carry/t3/clips $D/clips
{ date -u; nvidia-smi -L; sha256sum $D/decode.test $D/clips/*; } >$R/machine-e.txt 2>&1
cd decode && VIGIL_NVDEC_CLIPS=$D/clips timeout 150 $D/decode.test -test.run '^TestNVDECPictureCopy$' -test.v -test.count=1 >$R/picture-copy.txt 2>&1
echo "exit status $?" >>$R/picture-copy.txt
tail -15 $R/picture-copy.txt
