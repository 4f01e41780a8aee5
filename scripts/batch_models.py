#!/usr/bin/python3
"""Make fixed-batch-N copies of fixed-batch-1 ONNX detectors for vigil's
cross-stream batching.

The shipped BlazeFace models and YOLOX-Nano exports have batch 1 baked into
their input and output shapes and into the int64 shape constants that feed
Reshape (input 1), ConstantOfShape (input 0) and Resize (input 3, sizes).
This script sets the leading 1 of each of those to N, and nothing else.
A Reshape shape that starts with 0 (copy the input's batch) is left as it
is. It refuses, naming the node, a graph it cannot rebatch safely:

* a shape that is computed (Shape/Concat/...) rather than a constant
  initializer, or a constant that does not start with batch 1;
* a shape constant that some node also reads as data (changing it would
  change that node's result);
* a node that could mix or drop batch items: Transpose moving axis 0,
  Slice/Split/Gather/Flatten on axis 0.

The result is checked with onnx.checker; vigil's tests then check, item by
item, that a batch-N run gives the batch-1 outputs (BlazeFace 4 and 32,
YOLOX-Nano 8).

usage: batch_models.py MODEL.onnx N [N ...]   writes MODEL.bN.onnx beside it
(skipped when it exists and is newer than MODEL.onnx)
"""
import os
import sys

import onnx
from onnx import helper, numpy_helper

# op type -> index of the input that is a shape with a leading batch dim.
SHAPE_INPUTS = {"Reshape": 1, "ConstantOfShape": 0, "Resize": 3}


def attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def refuse(path, msg):
    raise SystemExit(f"{path}: {msg}; cannot rebatch safely")


def check_batch_axis(path, node, inits):
    """Refuse nodes that would move, mix or drop batch items."""
    t = node.op_type
    where = f"{t} node {node.name or node.output[0]}"
    if t == "Transpose":
        perm = attr(node, "perm")
        if perm is None or perm[0] != 0:
            refuse(path, f"{where} moves the batch axis (perm {perm})")
    elif t in ("Split", "Gather", "Flatten"):
        axis = attr(node, "axis", 1 if t == "Flatten" else 0)
        if axis == 0:
            refuse(path, f"{where} works on the batch axis")
    elif t == "Slice":
        if len(node.input) < 4 or not node.input[3]:
            refuse(path, f"{where} has no axes input, so it slices the batch axis")
        if node.input[3] not in inits:
            refuse(path, f"{where} has computed axes")
        axes = numpy_helper.to_array(inits[node.input[3]]).tolist()
        if 0 in axes:
            refuse(path, f"{where} slices the batch axis")


def batched(model_path, n):
    m = onnx.load(model_path)
    g = m.graph
    inits = {i.name: i for i in g.initializer}
    shape_consts = set()
    data_uses = set()
    for node in g.node:
        check_batch_axis(model_path, node, inits)
        k = SHAPE_INPUTS.get(node.op_type)
        for idx, name in enumerate(node.input):
            if idx == k and name:
                shape_consts.add(name)
            elif name:
                data_uses.add(name)
    for name in sorted(shape_consts):
        if name not in inits:
            refuse(model_path, f"shape {name} is computed, not a constant")
        if name in data_uses:
            refuse(model_path, f"shape constant {name} is also read as data")
        arr = numpy_helper.to_array(inits[name]).copy()
        if arr.ndim == 1 and arr.size > 0 and arr[0] == 0:
            continue  # Reshape's "copy the input's dimension": already N
        if arr.ndim != 1 or arr.size == 0 or arr[0] != 1:
            refuse(model_path, f"shape constant {name}={arr.tolist()} does not start with batch 1")
        arr[0] = n
        inits[name].CopyFrom(numpy_helper.from_array(arr, name))
    for vi in list(g.input) + list(g.output):
        dims = vi.type.tensor_type.shape.dim
        if not dims or dims[0].dim_value != 1:
            refuse(model_path, f"{vi.name} does not have batch 1")
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
