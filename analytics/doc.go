// Package analytics turns a stream's per-frame detections into what
// happened: which object is which from frame to frame (tracking), when it
// entered or left a zone, how long it stayed, which way it crossed a line,
// whether it stopped moving, and how many objects are in each zone now.
// It is pure Go (no cgo), and sits between inference and the sinks.
//
// # Using it
//
// One Stage per stream run, used from the stream's worker goroutine (vigil
// run and vigil detect --analytics do so in internal/app/analytics.go,
// behind pipeline.Analyzer):
//
//	cfg := analytics.Config{ // or decoded from the spec's `analytics:` block
//		Zones: []analytics.Zone{{Name: "door", Polygon: []analytics.XY{{100, 80}, {400, 80}, {400, 300}, {100, 300}},
//			Classes: []string{"person"}, LoiterAfter: analytics.Duration(30 * time.Second)}},
//		Lines: []analytics.Line{{Name: "gate", A: analytics.XY{640, 0}, B: analytics.XY{640, 720}}},
//	}
//	if err := cfg.Validate(); err != nil { ... } // a *FieldError naming e.g. "zones[0].polygon"
//	if err := cfg.CheckClasses(modelLabels); err != nil { ... }
//	st, err := analytics.New(streamID, epoch, cfg) // epoch: the run's pipeline.NewEpoch()
//	for each processed frame {
//		events := st.Observe(frame.PTS, frame.Arrival, width, height, result.Detections)
//		// result.Detections now carry TrackID and Zones: publish them.
//		// Publish each event on <prefix>.<id>.analytics, with the
//		// Nats-Msg-Id "<stream>/<epoch>/e<event.Seq>" (unique for good).
//		if v := st.CountsVersion(); v != lastVersion && time.Since(lastSent) >= time.Second {
//			counts := st.Counts() // publish on <prefix>.<id>.counts, update gauges
//		}
//	}
//	st.Reconfigure(newCfg) // hot reload: tracks and ids are kept
//	events = st.Close(lastPTS, time.Now()) // track_end for every live track
//
// Observe needs only the frames that were processed: frames dropped on
// purpose (deadline, rate limit, degradation) are simply not observed.
// Time is taken from PTS differences, so a gap is a gap in time and the
// tracks' motion is predicted across it; ids do not change.
//
// # Tracking
//
// The tracker is ByteTrack (Zhang et al., ECCV 2022) made time-based and
// class-aware: a constant-velocity Kalman filter on each box (kalman.go:
// SORT/DeepSORT/ByteTrack's model, with the transition and process noise
// scaled by the time since the last frame), and two-stage association by
// IoU: confirmed tracks against the detections scoring above
// Tracker.HighScore first, then the tracks left over against the
// detections scoring between 0.1 and it (what keeps a track through an
// occlusion that lowers its score), then tentative tracks against the
// high-score detections left. A detection never continues a track of
// another label. A detection scoring HighScore + 0.1 or more that matches
// nothing starts a tentative track; it is confirmed after
// Tracker.ConfirmHits frames in a row and dropped at its first miss, so a
// false positive flickering for a frame or two never gets an id, an event
// or a count. A confirmed track without detections is lost, still
// predicted and matched, and ends once it has been missed for
// Tracker.LostAfter seconds of PTS time, counted from the first processed
// frame that missed it. Assignments are solved optimally (assign.go; no Go library could
// be had, see there) on the connected components of the overlap graph
// (match.go), so the cost stays near-linear in the number of objects.
//
// Track ids are "<epoch>-<n>": n counts the stream run's confirmed tracks
// from 1 and is never reused, and the epoch makes ids from another run of
// the stream (a restart, a reconfiguration by the service) distinct.
//
// # Zones, lines and stationary objects
//
// A zone tests one point of the box (bottom centre by default) against
// its polygon; after MinFrames observations in a row inside, the track
// enters (zone_enter), after as many outside it exits (zone_exit), and
// once it has stayed LoiterAfter it loiters (one loiter event per stay).
// A track that ends while inside exits first. Occupancy counts the
// confirmed tracks inside, lost ones included until they end.
//
// A line counts a crossing when the anchor's path between two
// observations of a confirmed track, one on each side, crosses the
// segment A–B: a crossing during a detection gap counts when the track
// reappears on the other side, and one made while the track was still
// tentative counts when it is confirmed. The side is the sign of
// cross(B − A, p − A) in image coordinates; "in" is from negative to
// positive. A side is taken only beyond a margin of a tenth of the box's
// size across the line, and a track counts at most once per direction
// within the line's Debounce, so a box jittering on the line counts at
// most once each way, and a slow crossing once.
//
// A confirmed track whose box edges stay within Tracker.StationaryMove of
// its size for Tracker.StationaryAfter becomes stationary: one stationary
// event, and its zone membership is frozen until it moves again, so a
// parked car whose box jitters over a zone's edge never re-enters it.
//
// Geometry is in source pixels of the frame it was drawn on
// (Config.FrameSize, or the first frame). When the frames' size changes,
// the geometry is rescaled in proportion, the tracks too (ids survive),
// and a warning event with reason resolution_changed says so.
//
// # Messages
//
// Event is the wire form of one event (SchemaVersion, SchemaJSON); Counts
// the wire form of the counts (CountsSchemaVersion, CountsSchemaJSON).
// Both are plain JSON; the tests validate every event they see against
// the schemas.
package analytics
