package videotest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/analytics"
)

// megamindZone is the left of the table, where the woman sits: the centre
// of her face is at x 280–345 in both her shots (frames 1–97, 156–195),
// the man's is at x 484–509 in his first shot and 398–429 in his
// close-up (frames 196–269). configs/demo-faces.yaml has the same zone.
var megamindZone = analytics.Zone{Name: "left_seat", Polygon: []analytics.XY{{180, 120}, {380, 120}, {380, 400}, {180, 400}},
	Classes: []string{"face"}, Anchor: analytics.AnchorCenter}

// BlazeFace on Megamind.avi (a film clip: four shots, one face each)
// through decode, infer and analytics.Stage. Shots, counted by watching
// every 10th frame: the woman (frames 1–97), the man (100–153), the woman
// (156–195), the man in close-up (196–269). Each shot's face keeps one id.
// A cut is not what a tracker is made for: across the cut at frame 196 the
// man's close-up box covers where the woman's face was (IoU above
// match_iou), so his face continues her track; the test logs it. It logs
// the stage's share of the frame time too.
func TestMegamindBlazeFaceTracking(t *testing.T) {
	model, video := blazefaceModel(t), megamindClip(t)
	cfg := analytics.Config{Zones: []analytics.Zone{megamindZone}}
	r := runClip(t, model, "blazeface", video, cfg)
	for _, s := range r.tracks() {
		t.Logf("track %s %s frames %d–%d (%d observed)", s.id, s.label, s.first, s.last, s.observed)
	}
	var prev []string
	for _, sh := range []struct{ from, to int }{{1, 97}, {100, 153}, {156, 195}, {196, 269}} {
		seen := map[string]bool{}
		for i := sh.from; i <= sh.to; i++ {
			for _, d := range r.frames[i].Dets {
				if d.TrackID != "" {
					seen[d.TrackID] = true
				}
			}
		}
		ids := keys(seen)
		require.Len(t, ids, 1, "frames %d–%d: one face, one id; got %v", sh.from, sh.to, ids)
		if len(prev) == 1 && prev[0] == ids[0] {
			t.Logf("frames %d–%d: the id %s of the shot before carries over the cut", sh.from, sh.to, ids[0])
		}
		prev = ids
	}
	var enters, exits int
	for _, e := range r.events {
		switch e.Type {
		case analytics.EventZoneEnter:
			enters++
		case analytics.EventZoneExit:
			exits++
		}
	}
	t.Logf("zone %s: %d zone_enter, %d zone_exit", megamindZone.Name, enters, exits)
	logShare(t, "Megamind.avi, BlazeFace", r)
}
