#!/usr/bin/python3
"""Make fixed-batch-N copies of fixed-batch-1 ONNX detectors for vigil's
cross-stream batching.

The shipped BlazeFace models (and YOLOX-Nano exports) have batch 1 baked
into their input and output shapes and into the int64 shape constants that
feed Reshape (data input 1) and ConstantOfShape (input 0). This script sets
the leading 1 of each of those to N, and nothing else; it refuses a model in
which any such constant does not start with 1. The result is checked with
onnx.checker; vigil's tests then check, item by item, that a batch-N run
gives the batch-1 outputs.

usage: batch_models.py MODEL.onnx N [N ...]   writes MODEL.bN.onnx beside it
(skipped when it exists and is newer than MODEL.onnx)
"""
import os
import sys

import onnx
from onnx import numpy_helper


def batched(model_path, n):
    m = onnx.load(model_path)
    g = m.graph
    inits = {i.name: i for i in g.initializer}
    shape_consts = set()
    for node in g.node:
        if node.op_type == "Reshape" and len(node.input) > 1:
            shape_consts.add(node.input[1])
        elif node.op_type == "ConstantOfShape":
            shape_consts.add(node.input[0])
    for name in sorted(shape_consts):
        if name not in inits:
            raise SystemExit(f"{model_path}: shape {name} is computed, not a constant; cannot rebatch")
        arr = numpy_helper.to_array(inits[name]).copy()
        if arr.ndim != 1 or arr.size == 0 or arr[0] != 1:
            raise SystemExit(f"{model_path}: shape constant {name}={arr.tolist()} does not start with batch 1")
        arr[0] = n
        inits[name].CopyFrom(numpy_helper.from_array(arr, name))
    for vi in list(g.input) + list(g.output):
        dims = vi.type.tensor_type.shape.dim
        if not dims or dims[0].dim_value != 1:
            raise SystemExit(f"{model_path}: {vi.name} does not have batch 1")
        dims[0].dim_value = n
    del g.value_info[:]  # stale intermediate shapes; ORT infers them again
    onnx.checker.check_model(m)
    return m


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    src = sys.argv[1]
    for n in map(int, sys.argv[2:]):
        if n < 2:
            continue
        dst = src[: -len(".onnx")] + f".b{n}.onnx"
        if os.path.exists(dst) and os.path.getmtime(dst) >= os.path.getmtime(src):
            continue
        m = batched(src, n)
        tmp = dst + ".tmp"
        onnx.save(m, tmp)
        os.replace(tmp, dst)
        print(f"setup: wrote {dst}", file=sys.stderr)


if __name__ == "__main__":
    main()
