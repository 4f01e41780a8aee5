package infer_test

import (
	"fmt"

	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/pipeline"
)

// A model block with format auto binds an Ultralytics YOLOv8 export by
// its shapes and says why; its input follows the format's convention
// unless the block says otherwise.
func ExampleNewAdapter() {
	a, err := infer.NewAdapter(infer.Spec{Classes: []string{"person"}})
	if err != nil {
		panic(err)
	}
	b, err := a.Bind(
		[]infer.TensorInfo{{Name: "images", Shape: []int64{1, 3, 640, 640}}},
		[]infer.TensorInfo{{Name: "output0", Shape: []int64{1, 84, 8400}}})
	if err != nil {
		panic(err)
	}
	f := a.Format()
	fmt.Println(b.Chosen)
	fmt.Println(b.InW, b.InH, f.NCHW, f.Order == pipeline.RGB, f.Scale*255)
	// Output:
	// yolov8 (auto: output "output0" [1 84 8400]: [B 4+C N], cx,cy,w,h and 80 class scores per anchor)
	// 640 640 true true 1
}
