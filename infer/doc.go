// Package infer runs fixed-shape detection models with ONNX Runtime (the C
// library, 1.30, through github.com/yalue/onnxruntime_go) and owns each
// model's pre- and post-processing.
//
// An Engine holds one ORT session whose input and output tensors are
// allocated once and reused for every frame. Its Adapter, made from the
// model block (Spec), says how the model wants its input (size, channel
// order, layout, element type, value range or mean/std, letterbox or
// stretch, padding) and decodes its outputs in one of these formats:
//
//   - BlazeFace (MediaPipe face detector): input [1,S,S,3] NHWC RGB in
//     [-1,1], S = 128 or 256; 896 anchors; sigmoid scores; score-weighted
//     merging of overlaps (IoU ≥ 0.3); six keypoints per face.
//   - YOLOX (COCO, 80 classes): input [1,3,S,S] NCHW BGR in 0..255,
//     letterboxed at the top-left on a canvas of 114; output
//     [1,N,85] decoded on strides 8/16/32; class-aware NMS (IoU 0.45).
//   - YOLOv8/v9/YOLO11: [1,4+C,N] or [1,N,4+C]; class-aware NMS by vigil.
//   - YOLOv10/YOLO26, end to end: [1,K,6], no NMS.
//   - RT-DETR/D-FINE: labels, boxes, scores; orig_target_sizes fed the
//     input size.
//   - RF-DETR: dets (normalised cx,cy,w,h) and class logits.
//   - SSD (TensorFlow's detection API): detection_boxes, _classes,
//     _scores, num_detections.
//
// Format auto (Spec.Format "" or "auto") binds the one format whose
// decoder accepts the model's inputs and outputs (Binding.Chosen says
// which and why) and otherwise fails with ErrModelMismatch, listing them.
//
// Resizing and YUV→RGB/BGR conversion are done by a Resizer (decode.Scaler,
// libswscale); the adapter only normalises bytes into the tensor.
// Detections come back in source-frame pixels.
package infer
