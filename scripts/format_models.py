#!/usr/bin/python3
"""Make test models in every output format vigil decodes, with real weights.

No registry these machines reach carries YOLOv8, RT-DETR or RF-DETR weights,
so this wraps the real YOLOX-Nano graph (Megvii's yolox_nano.onnx: input
"images" [1,3,416,416] BGR 0..255, output "output" [1,3549,85] raw grid
values) with ONNX ops that decode its grid and rewrite the result into each
layout. Every model sees the same pixels as YOLOX-Nano (each prefix undoes
its format's input convention exactly, up to float rounding), so each of
vigil's decoders must find YOLOX-Nano's detections on the same frames.

  yolov8.onnx   images [1,3,416,416] RGB v/255 -> output0 [1,84,3549]:
                cx,cy,w,h (input pixels), 80 scores = obj*p (no objectness)
  yolov8t.onnx  images [1,3,416,416] float16 BGR 0..255 -> output0 [1,3549,84]
                (the transposed layout)
  yolov10.onnx  images [1,416,416,3] uint8 RGB (NHWC) -> output0 [1,300,6]:
                x1,y1,x2,y2,score,class after ONNX NonMaxSuppression
  rtdetr.onnx   images [1,3,416,416] RGB v/255, orig_target_sizes [1,2] int64
                -> labels [1,300] int64, boxes [1,300,4] (xyxy scaled to
                orig_target_sizes), scores [1,300]
  rfdetr.onnx   input [1,3,416,416] RGB ImageNet mean/std -> dets [1,300,4]
                (normalised cx,cy,w,h), labels [1,300,80] logits
  ssd.onnx      image_tensor [1,416,416,3] uint8 RGB -> detection_boxes
                [1,300,4] (normalised ymin,xmin,ymax,xmax), detection_classes
                [1,300] (COCO category ids), detection_scores [1,300],
                num_detections [1] (TensorFlow's detection API)

The end-to-end and DETR layouts get YOLOX's own post-processing in the
graph: the best class per cell, score obj*p >= 0.3, class-aware NMS at IoU
0.45 (yolox/utils/boxes.py), at most 300 rows, padded (score 0, logits -20).

With --edge it writes small synthetic models for edge cases instead (no
YOLOX needed): zero detections, 300 detections, boxes out of the input,
NaN and infinite values, two image inputs.

usage: format_models.py YOLOX_NANO.onnx OUTDIR
       format_models.py --edge OUTDIR
Needs Debian's python3-onnx and python3-numpy (make setup installs them).
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 11
W = H = 416
STRIDES = (8, 16, 32)
SCORE, IOU, KEEP = 0.3, 0.45, 300


class Graph:
    """Nodes and initializers added with generated names."""

    def __init__(self, prefix):
        self.prefix, self.n, self.nodes, self.inits = prefix, 0, [], []

    def name(self):
        self.n += 1
        return "%s_%d" % (self.prefix, self.n)

    def const(self, value, dtype=np.float32):
        t = numpy_helper.from_array(np.asarray(value, dtype=dtype), self.name())
        self.inits.append(t)
        return t.name

    def op(self, op_type, inputs, out=None, **attrs):
        out = out or self.name()
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out


def grid():
    gx, gy, st = [], [], []
    for s in STRIDES:
        ys, xs = np.meshgrid(np.arange(H // s), np.arange(W // s), indexing="ij")
        gx.append(xs.ravel())
        gy.append(ys.ravel())
        st.append(np.full(xs.size, s))
    return np.concatenate(gx), np.concatenate(gy), np.concatenate(st)


def decode(g, raw):
    """raw [1,3549,85] -> boxes xyxy [3549,4], cxcywh [3549,4], scores [3549,80]."""
    gx, gy, st = grid()
    p = g.op("Squeeze", [raw], axes=[0])
    sl = lambda a, b: g.op("Slice", [p, g.const([a], np.int64), g.const([b], np.int64), g.const([1], np.int64)])  # axis 1
    xy, wh, obj, cls = sl(0, 2), sl(2, 4), sl(4, 5), sl(5, 85)
    grid_xy = g.const(np.stack([gx, gy], 1))
    stride = g.const(st[:, None])
    cxy = g.op("Mul", [g.op("Add", [xy, grid_xy]), stride])
    size = g.op("Mul", [g.op("Exp", [wh]), stride])
    half = g.op("Mul", [size, g.const(0.5)])
    xyxy = g.op("Concat", [g.op("Sub", [cxy, half]), g.op("Add", [cxy, half])], axis=1)
    cxcywh = g.op("Concat", [cxy, size], axis=1)
    scores = g.op("Mul", [obj, cls])
    return xyxy, cxcywh, scores


def nms(g, xyxy, scores):
    """YOLOX's class-aware NMS on the best class of each cell: returns the
    kept rows' indices [K] (at most KEEP), best scores and classes."""
    best = g.op("ReduceMax", [scores], axes=[1], keepdims=0)
    cls = g.op("ArgMax", [scores], axis=1, keepdims=0)
    onehot = g.op("OneHot", [cls, g.const([80], np.int64), g.const([0, 1])], axis=-1)
    masked = g.op("Mul", [onehot, g.op("Unsqueeze", [best], axes=[1])])  # only the best class
    per_class = g.op("Unsqueeze", [g.op("Transpose", [masked], perm=[1, 0])], axes=[0])
    boxes = g.op("Unsqueeze", [xyxy], axes=[0])
    sel = g.op("NonMaxSuppression", [boxes, per_class, g.const([KEEP], np.int64), g.const([IOU]), g.const([SCORE])])
    idx = g.op("Squeeze", [g.op("Slice", [sel, g.const([2], np.int64), g.const([3], np.int64), g.const([1], np.int64)])], axes=[1])  # column 2
    idx = g.op("Slice", [idx, g.const([0], np.int64), g.const([KEEP], np.int64)])
    return idx, best, cls


def pad_rows(g, x, value=0.0):
    """Pads [K, ...] (K <= KEEP) with rows of value to [KEEP, ...] and adds
    the batch dimension."""
    k = g.op("Slice", [g.op("Shape", [x]), g.const([0], np.int64), g.const([1], np.int64)])
    extra = g.op("Sub", [g.const([KEEP], np.int64), k])
    zero = g.const([0], np.int64)
    pads = g.op("Concat", [zero, zero, extra, zero], axis=0)
    out = g.op("Pad", [x, pads, g.const(value)], mode="constant")
    return g.op("Unsqueeze", [out], axes=[0])


def gather(g, x, idx):
    return g.op("Gather", [x, idx], axis=0)


def build(yolox, prefix_fn, outputs_fn, inputs, outputs, path):
    """Wraps yolox: prefix_fn(g) -> the tensor fed to YOLOX's input;
    outputs_fn(g, raw) writes the named outputs."""
    base = onnx.load(yolox)
    g = Graph("fmt")
    feed = prefix_fn(g)
    for n in base.graph.node:  # rename YOLOX's input to the prefix's result
        for i, x in enumerate(n.input):
            if x == "images":
                n.input[i] = feed
    outputs_fn(g, "output")
    graph = helper.make_graph(list(g.nodes[:0]) + list(base.graph.node) + g.nodes, os.path.basename(path)[:-5],
                              inputs, outputs, list(base.graph.initializer) + g.inits)
    # Prefix nodes must come before YOLOX's: sort topologically.
    graph = topo(graph)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="vigil scripts/format_models.py")
    m.ir_version = base.ir_version
    onnx.checker.check_model(m)
    onnx.save(m, path)


def topo(graph):
    have = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    pending, order = list(graph.node), []
    while pending:
        rest = []
        for n in pending:
            if all(x in have for x in n.input):
                order.append(n)
                have.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(pending):
            raise SystemExit("format_models.py: graph has a cycle or a missing input: %s" % rest[0].name)
        pending = rest
    del graph.node[:]
    graph.node.extend(order)
    return graph


def info(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def rgb01_to_bgr255(g, x):
    x = g.op("Mul", [x, g.const(255.0)])
    return g.op("Gather", [x, g.const([2, 1, 0], np.int64)], axis=1)


def yolov8(g, raw, transposed):
    _, cxcywh, scores = decode(g, raw)
    rows = g.op("Concat", [cxcywh, scores], axis=1)  # [3549,84]
    if not transposed:
        rows = g.op("Transpose", [rows], perm=[1, 0])
    g.op("Unsqueeze", [rows], "output0", axes=[0])


def e2e(g, raw):
    xyxy, _, scores = decode(g, raw)
    idx, best, cls = nms(g, xyxy, scores)
    cls_f = g.op("Cast", [gather(g, cls, idx)], to=TensorProto.FLOAT)
    rows = g.op("Concat", [gather(g, xyxy, idx), g.op("Unsqueeze", [gather(g, best, idx)], axes=[1]),
                           g.op("Unsqueeze", [cls_f], axes=[1])], axis=1)
    g.op("Identity", [pad_rows(g, rows)], "output0")


def rtdetr(g, raw):
    xyxy, _, scores = decode(g, raw)
    idx, best, cls = nms(g, xyxy, scores)
    # boxes normalised, then scaled to orig_target_sizes (w, h), as
    # RT-DETR's postprocessor does.
    size = g.op("Cast", [g.op("Concat", ["orig_target_sizes", "orig_target_sizes"], axis=1)], to=TensorProto.FLOAT)
    boxes = g.op("Mul", [g.op("Div", [gather(g, xyxy, idx), g.const([W, H, W, H])]), size])
    g.op("Squeeze", [pad_rows(g, g.op("Unsqueeze", [gather(g, best, idx)], axes=[1]))], "scores", axes=[2])
    labels = g.op("Cast", [g.op("Unsqueeze", [gather(g, cls, idx)], axes=[1])], to=TensorProto.FLOAT)
    g.op("Cast", [g.op("Squeeze", [pad_rows(g, labels)], axes=[2])], "labels", to=TensorProto.INT64)
    g.op("Identity", [pad_rows(g, boxes)], "boxes")


def rfdetr(g, raw):
    xyxy, cxcywh, scores = decode(g, raw)
    idx, best, cls = nms(g, xyxy, scores)
    g.op("Identity", [pad_rows(g, g.op("Div", [gather(g, cxcywh, idx), g.const([W, H, W, H])]))], "dets")
    s = g.op("Clip", [gather(g, best, idx), g.const(1e-6), g.const(1 - 1e-6)])
    logit = g.op("Log", [g.op("Div", [s, g.op("Sub", [g.const(1.0), s])])])
    onehot = g.op("OneHot", [gather(g, cls, idx), g.const([80], np.int64), g.const([0, 1])], axis=-1)
    # logit(score) in the best class's column, -20 elsewhere.
    rows = g.op("Add", [g.op("Mul", [onehot, g.op("Unsqueeze", [g.op("Add", [logit, g.const(20.0)])], axes=[1])]), g.const(-20.0)])
    g.op("Identity", [pad_rows(g, rows, -20.0)], "labels")


def ssd(g, raw):
    xyxy, _, scores = decode(g, raw)
    idx, best, cls = nms(g, xyxy, scores)
    yxyx = g.op("Gather", [gather(g, xyxy, idx), g.const([1, 0, 3, 2], np.int64)], axis=1)
    g.op("Identity", [pad_rows(g, g.op("Div", [yxyx, g.const([H, W, H, W])]))], "detection_boxes")
    ids = g.op("Cast", [gather(g, g.const(COCO80_TO_91, np.int64), gather(g, cls, idx))], to=TensorProto.FLOAT)
    g.op("Squeeze", [pad_rows(g, g.op("Unsqueeze", [ids], axes=[1]))], "detection_classes", axes=[2])
    g.op("Squeeze", [pad_rows(g, g.op("Unsqueeze", [gather(g, best, idx)], axes=[1]))], "detection_scores", axes=[2])
    k = g.op("Slice", [g.op("Shape", [idx]), g.const([0], np.int64), g.const([1], np.int64)])
    g.op("Cast", [k], "num_detections", to=TensorProto.FLOAT)


# COCO category ids (1..90) of the 80 classes, in YOLOX's order.
COCO80_TO_91 = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 27, 28, 31, 32, 33,
                34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61,
                62, 63, 64, 65, 67, 70, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 84, 85, 86, 87, 88, 89, 90]


def real(yolox, out):
    f32, nchw = TensorProto.FLOAT, [1, 3, H, W]
    build(yolox, lambda g: rgb01_to_bgr255(g, "images"), lambda g, r: yolov8(g, r, False),
          [info("images", f32, nchw)], [info("output0", f32, [1, 84, 3549])], os.path.join(out, "yolov8.onnx"))
    build(yolox, lambda g: g.op("Cast", ["images"], to=TensorProto.FLOAT), lambda g, r: yolov8(g, r, True),
          [info("images", TensorProto.FLOAT16, nchw)], [info("output0", f32, [1, 3549, 84])], os.path.join(out, "yolov8t.onnx"))

    def nhwc_u8(g):
        x = g.op("Transpose", [g.op("Cast", ["images"], to=TensorProto.FLOAT)], perm=[0, 3, 1, 2])
        return g.op("Gather", [x, g.const([2, 1, 0], np.int64)], axis=1)
    build(yolox, nhwc_u8, e2e, [info("images", TensorProto.UINT8, [1, H, W, 3])],
          [info("output0", f32, [1, KEEP, 6])], os.path.join(out, "yolov10.onnx"))

    def nhwc_u8_tensor(g):
        x = g.op("Transpose", [g.op("Cast", ["image_tensor"], to=TensorProto.FLOAT)], perm=[0, 3, 1, 2])
        return g.op("Gather", [x, g.const([2, 1, 0], np.int64)], axis=1)
    build(yolox, nhwc_u8_tensor, ssd, [info("image_tensor", TensorProto.UINT8, [1, H, W, 3])],
          [info("detection_boxes", f32, [1, KEEP, 4]), info("detection_classes", f32, [1, KEEP]),
           info("detection_scores", f32, [1, KEEP]), info("num_detections", f32, [1])], os.path.join(out, "ssd.onnx"))
    build(yolox, lambda g: rgb01_to_bgr255(g, "images"), rtdetr,
          [info("images", f32, nchw), info("orig_target_sizes", TensorProto.INT64, [1, 2])],
          [info("labels", TensorProto.INT64, [1, KEEP]), info("boxes", f32, [1, KEEP, 4]), info("scores", f32, [1, KEEP])],
          os.path.join(out, "rtdetr.onnx"))

    def imagenet(g):
        mean = g.const(np.array([0.485, 0.456, 0.406]).reshape(1, 3, 1, 1))
        std = g.const(np.array([0.229, 0.224, 0.225]).reshape(1, 3, 1, 1))
        return rgb01_to_bgr255(g, g.op("Add", [g.op("Mul", ["input", std]), mean]))
    build(yolox, imagenet, rfdetr, [info("input", f32, nchw)],
          [info("dets", f32, [1, KEEP, 4]), info("labels", f32, [1, KEEP, 80])], os.path.join(out, "rfdetr.onnx"))


def constant_model(path, outputs, inputs=(("images", [1, 3, 32, 32]),)):
    """A model whose outputs are constants (plus 0 * the input's sum, so
    that they depend on the input)."""
    g = Graph("edge")
    zero = g.op("Mul", [g.op("ReduceSum", [inputs[0][0]], keepdims=0), g.const(0.0)])
    outs = []
    for name, value in outputs:
        g.op("Add", [g.const(value), zero], name)
        outs.append(info(name, TensorProto.FLOAT, list(np.shape(value))))
    graph = helper.make_graph(g.nodes, os.path.basename(path)[:-5], [info(n, TensorProto.FLOAT, s) for n, s in inputs], outs, g.inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="vigil scripts/format_models.py")
    m.ir_version = 7
    onnx.checker.check_model(m)
    onnx.save(m, path)


def edge(out):
    e2e = lambda rows: np.concatenate([rows, np.zeros((KEEP - len(rows), 6))])[None].astype(np.float32)
    constant_model(os.path.join(out, "e2e_zero.onnx"), [("output0", np.zeros((1, KEEP, 6), np.float32))])
    full = np.array([[i % 30, i // 30 * 3, i % 30 + 2, i // 30 * 3 + 2, 0.9, i % 80] for i in range(KEEP)], np.float32)
    constant_model(os.path.join(out, "e2e_full.onnx"), [("output0", full[None])])
    constant_model(os.path.join(out, "e2e_outside.onnx"), [("output0", e2e(np.array([
        [-50, -50, 10, 10, 0.9, 0],    # clamped to [0,0,10,10]
        [20, 20, 100, 100, 0.9, 1],    # clamped to the input's edge
        [40, 40, 80, 80, 0.9, 2],      # wholly outside: dropped
        [10, 10, 5, 5, 0.9, 3],        # inverted: dropped
        [1, 1, 4, 4, 0.9, -1],         # negative class: skipped
        [1, 1, 4, 4, 0.9, 2.5],        # fractional class: skipped
        [1, 1, 4, 4, 0.9, 500],        # class past the labels: class500
    ])))])
    nan, inf = np.nan, np.inf
    constant_model(os.path.join(out, "e2e_nan.onnx"), [("output0", e2e(np.array([
        [1, 1, 4, 4, nan, 0], [nan, 1, 4, 4, 0.9, 0], [1, 1, inf, 4, 0.9, 0], [1, 1, 4, 4, 0.9, nan],
        [1, 1, 4, 4, inf, 0], [2, 2, 6, 6, 0.8, 1],  # the last is the one good row
    ])))])
    n = sum((32 // s) ** 2 for s in STRIDES)
    v8 = np.zeros((1, 84, n), np.float32)
    v8[0, :4, :] = [[16], [16], [8], [8]]
    v8[0, 4, 0], v8[0, 5, 1], v8[0, 4, 2], v8[0, 0, 2] = nan, 0.9, 0.9, nan
    constant_model(os.path.join(out, "yolov8_nan.onnx"), [("output0", v8)])
    constant_model(os.path.join(out, "two_images.onnx"), [("output0", np.zeros((1, KEEP, 6), np.float32))],
                   inputs=(("left", [1, 3, 32, 32]), ("right", [1, 3, 32, 32])))
    logits = np.full((1, KEEP, 80), -20, np.float32)
    logits[0, 0, :] = nan
    logits[0, 1, 3] = 5
    constant_model(os.path.join(out, "rfdetr_nan.onnx"), [("dets", np.full((1, KEEP, 4), 0.5, np.float32)), ("labels", logits)])
    with open(os.path.join(out, "not_onnx.onnx"), "w") as f:
        f.write("this is not an ONNX model\n")
    with open(os.path.join(out, "three.txt"), "w") as f:
        f.write("# three names for an 80-class model\nperson\nbicycle\ncar\n")


def main(argv):
    if len(argv) == 3 and argv[1] == "--edge":
        os.makedirs(argv[2], exist_ok=True)
        edge(argv[2])
    elif len(argv) == 3:
        os.makedirs(argv[2], exist_ok=True)
        real(argv[1], argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
