package infer_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/pipeline"
)

func TestCompare(t *testing.T) {
	box := func(x1, y1, x2, y2 float32) pipeline.Box { return pipeline.Box{X1: x1, Y1: y1, X2: x2, Y2: y2} }
	ref := []pipeline.Detection{
		{Label: "person", Score: 0.80, Box: box(0, 0, 100, 100)},
		{Label: "person", Score: 0.60, Box: box(200, 200, 300, 300)},
		{Label: "car", ClassID: 2, Score: 0.90, Box: box(500, 0, 600, 50)},
	}
	same := []pipeline.Detection{ref[2], ref[0], ref[1]}
	c := infer.Compare(ref, same)
	require.Empty(t, c.Bad)
	require.Equal(t, 3, c.Total)
	require.Equal(t, 3, c.Matched())

	moved := []pipeline.Detection{
		{Label: "person", Score: 0.81, Box: box(0, 0, 100, 100)},
		{Label: "person", Score: 0.60, Box: box(220, 200, 320, 300)},       // IoU 0.67
		{Label: "car", ClassID: 0, Score: 0.90, Box: box(500, 0, 600, 50)}, // wrong class
	}
	c = infer.Compare(ref, moved)
	require.Equal(t, 4, c.Total, "3 reference + the unpaired wrong-class one")
	require.Len(t, c.Bad, 3)
	require.InDelta(t, 80.0*100/(120*100), c.WorstIoU, 1e-6)
	require.Contains(t, c.Bad[0], "IoU 0.667")
	require.Contains(t, c.Bad[1], "no counterpart")
	require.Contains(t, c.Bad[2], "only in the candidate")

	scored := []pipeline.Detection{{Label: "person", Score: 0.83, Box: box(0, 0, 100, 100)}}
	c = infer.Compare(ref[:1], scored)
	require.Len(t, c.Bad, 1, "score 0.03 apart")
	require.InDelta(t, 0.03, c.WorstScore, 1e-6)

	var all infer.Comparison
	all.Add(infer.Compare(ref, same))
	all.Add(infer.Compare(ref[:1], scored))
	require.Equal(t, 4, all.Total)
	require.Equal(t, 3, all.Matched())
}

// CompareAt forgives a detection on one side only when it scored within
// MatchScore of the threshold, and counts it as Marginal.
func TestCompareAt(t *testing.T) {
	box := func(x1, y1, x2, y2 float32) pipeline.Box { return pipeline.Box{X1: x1, Y1: y1, X2: x2, Y2: y2} }
	ref := []pipeline.Detection{
		{Label: "person", Score: 0.80, Box: box(0, 0, 100, 100)},
		{Label: "sports ball", ClassID: 32, Score: 0.31, Box: box(200, 200, 220, 220)}, // at the threshold
	}
	cand := []pipeline.Detection{
		{Label: "person", Score: 0.79, Box: box(0, 0, 100, 100)},
		{Label: "dog", ClassID: 16, Score: 0.315, Box: box(400, 400, 450, 450)}, // at the threshold
	}
	c := infer.CompareAt(ref, cand, 0.3)
	require.Empty(t, c.Bad)
	require.Equal(t, 2, c.Marginal)
	require.Equal(t, 3, c.Total)
	c = infer.Compare(ref, cand)
	require.Len(t, c.Bad, 2, "Compare forgives nothing")
	require.Zero(t, c.Marginal)
	cand[1].Score = 0.35 // clear of the threshold: a real difference
	c = infer.CompareAt(ref, cand, 0.3)
	require.Len(t, c.Bad, 1)
	require.Contains(t, c.Bad[0], "dog 0.350")
	require.Equal(t, 1, c.Marginal)
}
