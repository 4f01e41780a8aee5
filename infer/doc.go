// Package infer runs fixed-shape detection models with ONNX Runtime (the C
// library, 1.30, through github.com/yalue/onnxruntime_go) and owns each
// model's pre- and post-processing.
//
// An Engine holds one ORT session whose input and output tensors are
// allocated once and reused for every frame. Its Adapter says how the model
// wants its input (size, channel order, layout, value range, padding) and
// how to decode its outputs:
//
//   - BlazeFace (MediaPipe face detector): input [1,S,S,3] NHWC RGB in
//     [-1,1], S = 128 or 256; 896 anchors; sigmoid scores; score-weighted
//     merging of overlaps (IoU ≥ 0.3); six keypoints per face.
//   - YOLOX (COCO, 80 classes): input [1,3,S,S] NCHW BGR in 0..255,
//     letterboxed at the top-left on a canvas of 114; output
//     [1,N,85] decoded on strides 8/16/32; class-aware NMS (IoU 0.45).
//
// Resizing and YUV→RGB/BGR conversion are done by a Resizer (decode.Scaler,
// libswscale); the adapter only normalises bytes into the tensor.
// Detections come back in source-frame pixels.
package infer
