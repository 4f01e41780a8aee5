package analytics

// The motion model is ByteTrack's (Zhang et al., "ByteTrack: Multi-Object
// Tracking by Associating Every Detection Box", ECCV 2022; its
// yolox/tracker/kalman_filter.py), which is DeepSORT's (Wojke et al.,
// "Simple Online and Realtime Tracking with a Deep Association Metric",
// ICIP 2017), which extends SORT's (Bewley et al., ICIP 2016): a
// constant-velocity Kalman filter on the box as (x, y, a, h), the centre,
// the aspect ratio width/height and the height, with the velocities of
// the four as the other half of the 8-dimensional state. The noise is
// relative to the box height h: position standard deviation h/20, velocity
// h/160 per frame, 1e-2 and 1e-5 for the aspect ratio and its velocity,
// and 1e-1 for a measured aspect ratio.
//
// Two departures, both for time instead of frame counts:
//   - ByteTrack's transition is one frame. Here it is k = dt/refFrame
//     frames of the 30 fps ByteTrack assumes (its frame_rate default; its
//     lost buffer scales by frame_rate/30), so a prediction over a gap of
//     dt seconds moves the box by velocity × k and adds k times one
//     frame's process noise (the continuous white-noise approximation;
//     k = 1 is ByteTrack's filter exactly). Velocities are in pixels per
//     reference frame.
//   - The filter is run as four independent 2-state filters, one per
//     coordinate with its velocity. That is exact, not an approximation:
//     ByteTrack's initial, process and measurement covariances are all
//     diagonal and its transition only couples a coordinate with its own
//     velocity, so the 8×8 covariance stays block-diagonal in these four
//     2×2 blocks forever. kalman_test.go checks it against the 8×8 form.

// refFrame is the frame interval, in seconds, that ByteTrack's per-frame
// noise and transition are written for: 30 fps.
const refFrame = 1.0 / 30

// Noise weights from ByteTrack/DeepSORT's KalmanFilter.__init__ and its
// initiate, predict and project methods (see the comment above).
const (
	stdWeightPosition = 1.0 / 20
	stdWeightVelocity = 1.0 / 160
	stdAspect         = 1e-2 // initial and process std of a
	stdAspectVel      = 1e-5 // initial and process std of a's velocity
	stdAspectMeasure  = 1e-1 // measurement std of a
)

// kf1 is one coordinate's filter: mean position p and velocity v, and the
// covariance [[p00, p01], [p01, p11]].
type kf1 struct {
	p, v          float64
	p00, p01, p11 float64
}

// predict advances by k reference frames with process noise variances qp
// (position) and qv (velocity) for one frame.
func (f *kf1) predict(k, qp, qv float64) {
	f.p += k * f.v
	f.p00 += 2*k*f.p01 + k*k*f.p11 + k*qp
	f.p01 += k * f.p11
	f.p11 += k * qv
}

// update folds in a measurement z of the position with variance r.
func (f *kf1) update(z, r float64) {
	s := f.p00 + r
	k0, k1 := f.p00/s, f.p01/s
	y := z - f.p
	f.p += k0 * y
	f.v += k1 * y
	p00, p01, p11 := f.p00, f.p01, f.p11
	f.p00 = (1 - k0) * p00
	f.p01 = (1 - k0) * p01
	f.p11 = p11 - k1*p01
}

// kalman is the filter of one track: x, y (centre), a (width/height) and
// h (height), in source pixels.
type kalman struct{ x, y, a, h kf1 }

// xyah converts a box to the filter's measurement.
func xyah(b box) (x, y, a, h float64) {
	w, ht := b.x2-b.x1, b.y2-b.y1
	if ht <= 0 {
		ht = 1e-6 // a degenerate box from a model still gets a finite state
	}
	return (b.x1 + b.x2) / 2, (b.y1 + b.y2) / 2, w / ht, ht
}

func sq(v float64) float64 { return v * v }

// init starts the filter at box b with zero velocity (ByteTrack's
// initiate).
func (k *kalman) init(b box) {
	x, y, a, h := xyah(b)
	pos, vel := sq(2*stdWeightPosition*h), sq(10*stdWeightVelocity*h)
	k.x = kf1{p: x, p00: pos, p11: vel}
	k.y = kf1{p: y, p00: pos, p11: vel}
	k.a = kf1{p: a, p00: sq(stdAspect), p11: sq(stdAspectVel)}
	k.h = kf1{p: h, p00: pos, p11: vel}
}

// predict advances the state by dt seconds. A track that is not being
// tracked (lost) has its height velocity zeroed first, as ByteTrack's
// STrack.predict does, so that a lost box does not shrink or grow away.
func (k *kalman) predict(dt float64, tracked bool) {
	if !tracked {
		k.h.v = 0
	}
	n := dt / refFrame
	h := k.h.p
	qp, qv := sq(stdWeightPosition*h), sq(stdWeightVelocity*h)
	k.x.predict(n, qp, qv)
	k.y.predict(n, qp, qv)
	k.a.predict(n, sq(stdAspect), sq(stdAspectVel))
	k.h.predict(n, qp, qv)
}

// update folds in the measured box b (ByteTrack's update, with the
// measurement noise of its project: h/20 for x, y and h, 1e-1 for a,
// where h is the predicted height).
func (k *kalman) update(b box) {
	x, y, a, h := xyah(b)
	r := sq(stdWeightPosition * k.h.p)
	k.x.update(x, r)
	k.y.update(y, r)
	k.a.update(a, sq(stdAspectMeasure))
	k.h.update(h, r)
}

// box returns the filter's current box.
func (k *kalman) box() box {
	h := k.h.p
	w := k.a.p * h
	return box{k.x.p - w/2, k.y.p - h/2, k.x.p + w/2, k.y.p + h/2}
}

// scale maps the state to a frame scaled by sx horizontally and sy
// vertically (a change of resolution): means, velocities and covariances
// scale with their coordinate.
func (k *kalman) scale(sx, sy float64) {
	k.x.scale(sx)
	k.y.scale(sy)
	k.a.scale(sx / sy)
	k.h.scale(sy)
}

func (f *kf1) scale(s float64) {
	f.p *= s
	f.v *= s
	f.p00 *= s * s
	f.p01 *= s * s
	f.p11 *= s * s
}
