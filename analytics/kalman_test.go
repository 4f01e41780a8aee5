package analytics

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// dense8 is ByteTrack's KalmanFilter written as it is there: an 8-state
// mean and a full 8×8 covariance, F = [[I, k·I], [0, I]], H = [I 0],
// with the covariances of its initiate, predict and project (process
// noise times k for a step of k frames, as this package scales it), and
// the update K = P Hᵀ S⁻¹ solved in full. It is the reference that the
// four 2-state filters of kalman.go must equal.
type dense8 struct {
	mean [8]float64
	cov  [8][8]float64
}

func (d *dense8) init(b box) {
	x, y, a, h := xyah(b)
	d.mean = [8]float64{x, y, a, h}
	std := [8]float64{2 * stdWeightPosition * h, 2 * stdWeightPosition * h, 1e-2, 2 * stdWeightPosition * h,
		10 * stdWeightVelocity * h, 10 * stdWeightVelocity * h, 1e-5, 10 * stdWeightVelocity * h}
	d.cov = [8][8]float64{}
	for i := range std {
		d.cov[i][i] = std[i] * std[i]
	}
}

func (d *dense8) predict(k float64, tracked bool) {
	if !tracked {
		d.mean[7] = 0
	}
	h := d.mean[3]
	std := [8]float64{stdWeightPosition * h, stdWeightPosition * h, 1e-2, stdWeightPosition * h,
		stdWeightVelocity * h, stdWeightVelocity * h, 1e-5, stdWeightVelocity * h}
	var F [8][8]float64
	for i := 0; i < 8; i++ {
		F[i][i] = 1
	}
	for i := 0; i < 4; i++ {
		F[i][i+4] = k
	}
	var m [8]float64
	for i := 0; i < 8; i++ {
		for j := 0; j < 8; j++ {
			m[i] += F[i][j] * d.mean[j]
		}
	}
	d.mean = m
	d.cov = mul8(mul8(F, d.cov), transpose8(F))
	for i := range std {
		d.cov[i][i] += k * std[i] * std[i]
	}
}

func (d *dense8) update(b box) {
	x, y, a, h := xyah(b)
	z := [4]float64{x, y, a, h}
	hp := d.mean[3]
	r := [4]float64{stdWeightPosition * hp, stdWeightPosition * hp, 1e-1, stdWeightPosition * hp}
	// S = H P Hᵀ + R (the top-left 4×4 of P plus R), K = P Hᵀ S⁻¹.
	var S [4][4]float64
	for i := 0; i < 4; i++ {
		for j := 0; j < 4; j++ {
			S[i][j] = d.cov[i][j]
		}
		S[i][i] += r[i] * r[i]
	}
	Si := invert4(S)
	var K [8][4]float64
	for i := 0; i < 8; i++ {
		for j := 0; j < 4; j++ {
			for l := 0; l < 4; l++ {
				K[i][j] += d.cov[i][l] * Si[l][j]
			}
		}
	}
	var innov [4]float64
	for i := range innov {
		innov[i] = z[i] - d.mean[i]
	}
	for i := 0; i < 8; i++ {
		for j := 0; j < 4; j++ {
			d.mean[i] += K[i][j] * innov[j]
		}
	}
	// P = P − K S Kᵀ (ByteTrack's form).
	var KS [8][4]float64
	for i := 0; i < 8; i++ {
		for j := 0; j < 4; j++ {
			for l := 0; l < 4; l++ {
				KS[i][j] += K[i][l] * S[l][j]
			}
		}
	}
	for i := 0; i < 8; i++ {
		for j := 0; j < 8; j++ {
			for l := 0; l < 4; l++ {
				d.cov[i][j] -= KS[i][l] * K[j][l]
			}
		}
	}
}

func mul8(a, b [8][8]float64) (c [8][8]float64) {
	for i := 0; i < 8; i++ {
		for j := 0; j < 8; j++ {
			for k := 0; k < 8; k++ {
				c[i][j] += a[i][k] * b[k][j]
			}
		}
	}
	return c
}

func transpose8(a [8][8]float64) (t [8][8]float64) {
	for i := 0; i < 8; i++ {
		for j := 0; j < 8; j++ {
			t[i][j] = a[j][i]
		}
	}
	return t
}

// invert4 inverts a 4×4 matrix by Gauss–Jordan elimination with partial
// pivoting.
func invert4(m [4][4]float64) [4][4]float64 {
	var a [4][8]float64
	for i := 0; i < 4; i++ {
		copy(a[i][:4], m[i][:])
		a[i][4+i] = 1
	}
	for c := 0; c < 4; c++ {
		p := c
		for r := c + 1; r < 4; r++ {
			if math.Abs(a[r][c]) > math.Abs(a[p][c]) {
				p = r
			}
		}
		a[c], a[p] = a[p], a[c]
		pv := a[c][c]
		for j := range a[c] {
			a[c][j] /= pv
		}
		for r := 0; r < 4; r++ {
			if r != c {
				f := a[r][c]
				for j := range a[r] {
					a[r][j] -= f * a[c][j]
				}
			}
		}
	}
	var inv [4][4]float64
	for i := 0; i < 4; i++ {
		copy(inv[i][:], a[i][4:])
	}
	return inv
}

// The four 2-state filters equal ByteTrack's 8-state filter, through
// random steps (of varying length, tracked and lost) and updates.
func TestKalmanEqualsDense8(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := 0; trial < 50; trial++ {
		b := box{100 + rng.Float64()*500, 50 + rng.Float64()*300, 0, 0}
		b.x2, b.y2 = b.x1+20+rng.Float64()*100, b.y1+40+rng.Float64()*200
		var k kalman
		var d dense8
		k.init(b)
		d.init(b)
		for step := 0; step < 40; step++ {
			dt := refFrame * (0.5 + 3*rng.Float64())
			tracked := rng.IntN(4) > 0
			k.predict(dt, tracked)
			d.predict(dt/refFrame, tracked)
			if rng.IntN(3) > 0 {
				vx := 3 * float64(step)
				m := box{b.x1 + vx + rng.NormFloat64()*2, b.y1 + rng.NormFloat64()*2, b.x2 + vx + rng.NormFloat64()*2, b.y2 + rng.NormFloat64()*2}
				k.update(m)
				d.update(m)
			}
			got := [8]float64{k.x.p, k.y.p, k.a.p, k.h.p, k.x.v, k.y.v, k.a.v, k.h.v}
			for i := range got {
				require.InDelta(t, d.mean[i], got[i], 1e-6*math.Max(1, math.Abs(d.mean[i])), "trial %d step %d mean[%d]", trial, step, i)
			}
			blocks := []kf1{k.x, k.y, k.a, k.h}
			for i, f := range blocks {
				tol := 1e-6 * math.Max(1e-9, d.cov[i][i])
				require.InDelta(t, d.cov[i][i], f.p00, tol, "cov[%d][%d]", i, i)
				require.InDelta(t, d.cov[i][i+4], f.p01, 1e-6*math.Max(1e-9, math.Abs(d.cov[i][i+4])), "cov[%d][%d]", i, i+4)
				require.InDelta(t, d.cov[i+4][i+4], f.p11, 1e-6*math.Max(1e-12, d.cov[i+4][i+4]), "cov[%d][%d]", i+4, i+4)
			}
			// Everything outside the four blocks stays zero.
			for i := 0; i < 8; i++ {
				for j := 0; j < 8; j++ {
					if i%4 != j%4 {
						require.Zero(t, d.cov[i][j], "cov[%d][%d]", i, j)
					}
				}
			}
		}
	}
}

// A box moving at constant velocity is predicted across a gap by time:
// after a few observations 1/30 s apart, a 1 s gap moves the prediction
// by about 30 frames' worth of motion.
func TestKalmanPredictsByTime(t *testing.T) {
	var k kalman
	b := box{100, 100, 150, 200}
	k.init(b)
	for i := 1; i <= 30; i++ {
		k.predict(refFrame, true)
		k.update(box{b.x1 + 4*float64(i), b.y1, b.x2 + 4*float64(i), b.y2}) // 4 px per frame = 120 px/s
	}
	k.predict(1, true) // 1 s later: 30 frames of 4 px
	got := k.box()
	want := b.x1 + 4*60
	// A regression guard: the filter converges to the velocity within a
	// few per cent after 30 frames; 10 px is 4 % of the 240 px moved.
	require.InDelta(t, want, got.x1, 10)
	require.InDelta(t, b.y1, got.y1, 1)
}
