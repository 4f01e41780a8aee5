package analytics_test

import (
	"fmt"
	"time"

	"github.com/vigil-video/vigil/analytics"
	"github.com/vigil-video/vigil/pipeline"
)

// A person walks right across a gate line and through a zone; the stage
// gives the track an id once it is confirmed, writes it into the
// detections, and reports the events and counts.
func Example() {
	cfg := analytics.Config{
		Zones: []analytics.Zone{{Name: "lobby", Polygon: []analytics.XY{{700, 0}, {1280, 0}, {1280, 720}, {700, 720}}}},
		Lines: []analytics.Line{{Name: "gate", A: analytics.XY{640, 0}, B: analytics.XY{640, 720}, Classes: []string{"person"}}},
	}
	if err := cfg.Validate(); err != nil {
		fmt.Println(err)
		return
	}
	st, err := analytics.New("cam1", "0123456789ab", cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var pts float64
	for i := 0; i < 50; i++ {
		pts = float64(i) / 10 // 10 fps
		x := float32(500 + 10*i)
		dets := []pipeline.Detection{{Label: "person", Score: 0.9, Box: pipeline.Box{X1: x - 25, Y1: 280, X2: x + 25, Y2: 400}}}
		for _, e := range st.Observe(pts, start.Add(time.Duration(pts*float64(time.Second))), 1280, 720, dets) {
			show(e)
		}
		if i == 30 {
			fmt.Println("detection:", dets[0].TrackID, dets[0].Zones)
		}
	}
	c := st.Counts()
	fmt.Println("lobby:", c.Zones[0].Occupancy, "gate out:", c.Lines[0].Out)
	for _, e := range st.Close(pts, start.Add(5*time.Second)) {
		show(e)
	}
	// Output:
	// 0.2s track_start 0123456789ab-1
	// 1.5s line_cross 0123456789ab-1 gate out
	// 2.2s zone_enter 0123456789ab-1 lobby
	// detection: 0123456789ab-1 [lobby]
	// lobby: map[person:1] gate out: map[person:1]
	// 4.9s zone_exit 0123456789ab-1 lobby
	// 4.9s track_end 0123456789ab-1 zones [lobby] lines [gate]
}

func show(e analytics.Event) {
	fmt.Printf("%.1fs %s %s", e.PTS, e.Type, e.TrackID)
	switch e.Type {
	case analytics.EventZoneEnter, analytics.EventZoneExit, analytics.EventLoiter:
		fmt.Printf(" %s", e.Zone)
	case analytics.EventLineCross:
		fmt.Printf(" %s %s", e.Line, e.Direction)
	case analytics.EventTrackEnd:
		fmt.Printf(" zones %v lines %v", e.Zones, e.Lines)
	}
	fmt.Println()
}
