#!/usr/bin/python3
"""The ONNX graph edits of `vigil model quantize` (static QDQ INT8).

vigil embeds this script and runs it with Debian's python3-onnx and
python3-numpy (make setup installs them); the activation ranges come from
vigil itself, which runs the fp32 model through ONNX Runtime on real frames.

  quantize_model.py expose MODEL OUT
      OUT is MODEL with every float tensor a node makes added as a graph
      output (types from ONNX shape inference), so that ONNX Runtime hands
      vigil the activations to calibrate. Prints one JSON object: the names
      added.
  quantize_model.py qdq MODEL RANGES.json OUT
      OUT is MODEL in the QDQ format (QuantizeLinear/DequantizeLinear pairs,
      opset 13 or later), as ONNX Runtime's own static quantizer writes it:
        - activations uint8, asymmetric, per tensor, from RANGES ({name:
          [low, high]}, widened to hold 0 so that zero is exact);
        - Conv, MatMul and Gemm weights int8, symmetric, per output channel
          (scale = max|w| / 127); Conv and Gemm biases int32 at scale
          input scale x weight scale, zero point 0;
        - MaxPool, Resize, Reshape, Transpose keep their input's scale on
          their output (ONNX Runtime then drops their Q/DQ pair and runs
          them on the bytes);
        - Relu after a Conv has no pair between them (ONNX Runtime folds
          it into the Conv's output quantisation).
      Nodes with no Conv, MatMul or Gemm after them (a detector's last
      convolutions, its sigmoids and the concatenation of boxes and
      scores) stay float: one uint8 scale for box offsets and 0..1 scores
      together would cost the scores their precision. Graph outputs are
      never quantised. Prints one JSON object: counts of what was done.
  quantize_model.py blocks MODEL RANGES.json
      The blocks qdq would quantise, in graph order: a Conv (or MatMul,
      Gemm) with the SiLU after it (Sigmoid and Mul of the Conv's output)
      and a Relu after it is one block, named after the Conv; any other
      quantised node is a block of its own. Prints {"blocks": [{"id",
      "op", "nodes"}]}.
  quantize_model.py variants MODEL RANGES.json SPEC.json
      Writes several QDQ copies in one run. SPEC is a list of {"out":
      path, "float": [block ids]} (those blocks stay float, the rest as
      qdq) or {"out": path, "only": [block ids]} (only those blocks are
      quantised). Prints {"variants": [counts, ...]}.
"""
import copy
import json
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference

MIN_OPSET = 13  # DequantizeLinear's axis (per-channel weights)
WEIGHTED = {"Conv", "MatMul", "Gemm"}
# Ops ONNX Runtime's CPU provider runs on quantised tensors (QLinear*
# kernels, or the bytes themselves for SAME_SCALE).
QUANTIZED = WEIGHTED | {"Add", "Mul", "Sigmoid", "Concat", "MaxPool", "Resize", "Relu",
                        "AveragePool", "GlobalAveragePool", "Reshape", "Transpose"}
SAME_SCALE = {"MaxPool", "Resize", "Reshape", "Transpose"}
DATA_INPUTS = {"Resize": 1, "Reshape": 1, "Transpose": 1, "MaxPool": 1, "Relu": 1, "Sigmoid": 1,
               "AveragePool": 1, "GlobalAveragePool": 1}


def float_tensors(model):
    """Names of the float tensors the graph's nodes make."""
    inferred = shape_inference.infer_shapes(model)
    types = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output) + list(inferred.graph.input):
        types[vi.name] = vi.type.tensor_type.elem_type
    out = []
    for n in model.graph.node:
        if n.op_type in ("Constant", "ConstantOfShape", "Shape"):
            continue
        for o in n.output:
            if o and types.get(o) == TensorProto.FLOAT:
                out.append(o)
    return out


def expose(src, dst):
    model = onnx.load(src)
    have = {o.name for o in model.graph.output}
    added = []
    for name in float_tensors(model):
        if name not in have:
            model.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
            added.append(name)
    onnx.save(model, dst)
    print(json.dumps({"added": added}))


def to_opset13(model):
    ver = max([o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] or [0])
    if ver >= MIN_OPSET:
        return model
    try:
        from onnx import version_converter
        return version_converter.convert_version(model, MIN_OPSET)
    except Exception as e:  # the converter lacks some ops' adapters
        changed = {"Squeeze", "Unsqueeze", "Split", "ReduceSum", "Pad"}  # signatures that moved to inputs by 13
        bad = sorted({n.op_type for n in model.graph.node} & changed)
        if bad:
            raise SystemExit("cannot move the model to opset %d for per-channel QDQ (%s; it has %s)" % (MIN_OPSET, e, ", ".join(bad)))
        for o in model.opset_import:
            if o.domain in ("", "ai.onnx"):
                o.version = MIN_OPSET
        return model


def act_params(lo, hi):
    """uint8 asymmetric scale and zero point for [lo, hi] (0 included)."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if hi - lo < 1e-12:
        return 1.0, 0
    scale = (hi - lo) / 255.0
    zp = int(round(-lo / scale))
    return scale, min(max(zp, 0), 255)


def qdq(src, ranges_path, dst):
    model = to_opset13(onnx.load(src))
    ranges = json.load(open(ranges_path))
    stats = quantize(model, ranges)
    onnx.save(model, dst)
    print(json.dumps(stats))


def analyse(model, ranges):
    """The graph's consumers and producers, and the nodes qdq quantises."""
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    consumers, producer = {}, {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
        for o in n.output:
            producer[o] = n
    graph_outputs = {o.name for o in g.output}

    # Nodes with a weighted op downstream (reverse topological sweep).
    feeds_weighted = {}
    for n in reversed(list(g.node)):
        f = False
        for o in n.output:
            for c in consumers.get(o, []):
                if c.op_type in WEIGHTED or feeds_weighted.get(id(c)):
                    f = True
        feeds_weighted[id(n)] = f

    def data_inputs(n):
        k = DATA_INPUTS.get(n.op_type, len(n.input))
        if n.op_type in WEIGHTED:
            k = 1 if n.op_type != "MatMul" else 2
        return [x for x in n.input[:k] if x]

    def quantizable(n):
        if n.op_type not in QUANTIZED or not feeds_weighted[id(n)]:
            return False
        for x in data_inputs(n):
            if x in inits:
                if n.op_type == "MatMul":
                    continue
                return False  # a float constant operand (Mul by a constant): keep float
            if x not in ranges:
                return False
        if n.op_type in WEIGHTED:
            w = n.input[1]
            if w not in inits or (n.op_type == "Gemm" and any(a.name == "transA" and a.i for a in n.attribute)):
                return False
        return all(o in ranges for o in n.output if o)

    quant = [n for n in g.node if quantizable(n)]
    return inits, consumers, producer, quant, data_inputs


def blocks_of(model, ranges):
    """The quantised nodes grouped into blocks (see the module's doc)."""
    _, consumers, _, quant, _ = analyse(model, ranges)
    qnames = {n.name for n in quant}
    taken, out = set(), []
    for n in quant:
        if n.name in taken:
            continue
        nodes, op = [n.name], n.op_type
        if n.op_type in WEIGHTED:
            cs = consumers.get(n.output[0], [])
            sig = [c for c in cs if c.op_type == "Sigmoid" and c.name in qnames]
            mul = [c for c in cs if c.op_type == "Mul" and c.name in qnames]
            relu = [c for c in cs if c.op_type == "Relu" and c.name in qnames]
            if len(sig) == 1 and len(mul) == 1 and sig[0].output[0] in mul[0].input and len(cs) == 2:
                nodes += [sig[0].name, mul[0].name]
                op += "+SiLU"
            elif len(relu) == 1 and len(cs) == 1:
                nodes.append(relu[0].name)
                op += "+Relu"
        taken.update(nodes)
        out.append({"id": n.name, "op": op, "nodes": nodes})
    return out


def quantize(model, ranges, keep=None):
    """Edits model in place into QDQ; keep, when given, is the set of node
    names that may be quantised (the others stay float). Returns counts."""
    g = model.graph
    graph_outputs = {o.name for o in g.output}
    inits, consumers, producer, quant, data_inputs = analyse(model, ranges)
    if keep is not None:
        # A same-scale op (MaxPool, Resize, ...) whose input comes from a
        # float node stays float too: alone between float nodes it gains
        # nothing, and ONNX Runtime runs a lone uint8 MaxPool in NCHW with
        # a slow kernel (YOLOX-Nano's SPP: 5.2 ms against 0.15 ms float,
        # docs/int8/profile-lone-maxpool.txt).
        kept = set()
        for n in quant:
            if n.name not in keep:
                continue
            if n.op_type in SAME_SCALE:
                p = producer.get(n.input[0])
                if p is None or p.name not in kept:
                    continue
            kept.add(n.name)
        quant = [n for n in quant if n.name in kept]
    qset = {id(n) for n in quant}

    # Same-scale ops pass their input's range on (ONNX Runtime drops their
    # pairs only when input and output scales agree).
    for n in g.node:
        if id(n) in qset and n.op_type in SAME_SCALE:
            ranges[n.output[0]] = ranges[n.input[0]]

    params = {}  # tensor -> (scale, zp)
    new_nodes_after = {}  # producer id (or None for graph inputs) -> nodes to add
    renamed = {}  # tensor -> its dequantised name
    stats = {"quantized_nodes": len(quant), "qdq_pairs": 0, "weights": 0, "biases": 0, "float_nodes": len(g.node) - len(quant)}
    added_inits = []

    def pair(t):
        if t in renamed:
            return renamed[t]
        s, z = act_params(*ranges[t])
        params[t] = (s, z)
        sn, zn = t + "_scale", t + "_zero_point"
        added_inits.append(numpy_helper.from_array(np.array(s, dtype=np.float32), sn))
        added_inits.append(numpy_helper.from_array(np.array(z, dtype=np.uint8), zn))
        q, dq = t + "_QuantizeLinear", t + "_DequantizeLinear"
        nodes = [helper.make_node("QuantizeLinear", [t, sn, zn], [q], name=q),
                 helper.make_node("DequantizeLinear", [q, sn, zn], [dq], name=dq)]
        p = producer.get(t)
        new_nodes_after.setdefault(id(p) if p is not None else None, []).extend(nodes)
        renamed[t] = dq
        stats["qdq_pairs"] += 1
        return dq

    def weight(n):
        w = numpy_helper.to_array(inits[n.input[1]]).astype(np.float32)
        axis = 0
        if n.op_type == "MatMul":
            axis = w.ndim - 1
        elif n.op_type == "Gemm" and not any(a.name == "transB" and a.i for a in n.attribute):
            axis = 1
        red = tuple(i for i in range(w.ndim) if i != axis)
        amax = np.abs(w).max(axis=red) if red else np.abs(w)
        scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
        shp = [1] * w.ndim
        shp[axis] = -1
        q = np.clip(np.round(w / scale.reshape(shp)), -127, 127).astype(np.int8)
        base = n.input[1]
        qn, sn, zn, dn = base + "_quantized", base + "_scale", base + "_zero_point", base + "_DequantizeLinear"
        added_inits.extend([numpy_helper.from_array(q, qn), numpy_helper.from_array(scale, sn),
                            numpy_helper.from_array(np.zeros(scale.shape, dtype=np.int8), zn)])
        stats["weights"] += 1
        return helper.make_node("DequantizeLinear", [qn, sn, zn], [dn], name=dn, axis=axis), dn, scale

    out_nodes = []
    pending_before = {}  # node id -> weight DQ nodes to put before it
    for n in quant:
        for i, x in enumerate(list(n.input)):
            if not x:
                continue
            if x in inits:
                continue
            if i < len(data_inputs(n)) and x in ranges:
                n.input[i] = pair(x)
        if n.op_type in WEIGHTED:
            dqw, dn, ws = weight(n)
            n.input[1] = dn
            before = [dqw]
            if n.op_type in ("Conv", "Gemm") and len(n.input) > 2 and n.input[2] in inits:
                b = numpy_helper.to_array(inits[n.input[2]]).astype(np.float64)
                xs = params[n.input[0][: -len("_DequantizeLinear")]][0]
                bs = (xs * ws.astype(np.float64)).astype(np.float32)
                if bs.size == 1:
                    bs = np.full(b.shape, bs.item(), dtype=np.float32)
                bq = np.round(b / bs).astype(np.int32)
                base = n.input[2]
                qn, sn, zn, dn2 = base + "_quantized", base + "_scale", base + "_zero_point", base + "_DequantizeLinear"
                added_inits.extend([numpy_helper.from_array(bq, qn), numpy_helper.from_array(bs, sn),
                                    numpy_helper.from_array(np.zeros(bs.shape, dtype=np.int32), zn)])
                before.append(helper.make_node("DequantizeLinear", [qn, sn, zn], [dn2], name=dn2, axis=0))
                n.input[2] = dn2
                stats["biases"] += 1
            pending_before[id(n)] = before

    # Outputs: one pair each, unless a graph output, or a Conv output whose
    # only consumer is a quantised Relu.
    for n in quant:
        for o in n.output:
            if not o or o in graph_outputs:
                continue
            cs = consumers.get(o, [])
            if n.op_type == "Conv" and len(cs) == 1 and cs[0].op_type == "Relu" and id(cs[0]) in qset:
                continue
            dq = pair(o)
            for c in cs:
                for i, x in enumerate(c.input):
                    if x == o:
                        c.input[i] = dq

    # Graph inputs consumed by quantised nodes were renamed by pair(); put
    # their pairs first.
    for n in new_nodes_after.get(None, []):
        out_nodes.append(n)
    for n in g.node:
        out_nodes.extend(pending_before.get(id(n), []))
        out_nodes.append(n)
        out_nodes.extend(new_nodes_after.get(id(n), []))
    # A pair's Quantize reads the original tensor: keep that name on the
    # producer (consumers were renamed above).
    del g.node[:]
    g.node.extend(out_nodes)
    used = {x for n in out_nodes for x in n.input}
    keep = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(keep + added_inits)
    onnx.checker.check_model(model)
    return stats


def blocks(src, ranges_path):
    model = to_opset13(onnx.load(src))
    print(json.dumps({"blocks": blocks_of(model, json.load(open(ranges_path)))}))


def variants(src, ranges_path, spec_path):
    base = to_opset13(onnx.load(src))
    ranges = json.load(open(ranges_path))
    bl = {b["id"]: b["nodes"] for b in blocks_of(base, ranges)}
    every = {x for ns in bl.values() for x in ns}
    out = []
    for v in json.load(open(spec_path)):
        if "only" in v:
            keep = {x for b in v["only"] for x in bl[b]}
        else:
            keep = every - {x for b in v.get("float", []) for x in bl[b]}
        m = copy.deepcopy(base)
        st = quantize(m, dict(ranges), keep)
        onnx.save(m, v["out"])
        out.append(st)
    print(json.dumps({"variants": out}))


def main(argv):
    if len(argv) == 3 and argv[0] == "expose":
        expose(argv[1], argv[2])
    elif len(argv) == 4 and argv[0] == "qdq":
        qdq(argv[1], argv[2], argv[3])
    elif len(argv) == 3 and argv[0] == "blocks":
        blocks(argv[1], argv[2])
    elif len(argv) == 4 and argv[0] == "variants":
        variants(argv[1], argv[2], argv[3])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
