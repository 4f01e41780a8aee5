package analytics

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// The issue's example block, as the spec (YAML) and the API (JSON) carry
// it, decodes strictly into Config and validates.
const issueYAML = `
tracker: {high_score: 0.5, match_iou: 0.2, confirm_hits: 3, lost_after: 2s}
zones:
  - name: door
    polygon: [[100, 80], [400, 80], [400, 300], [100, 300]]   # source pixels
    classes: [person]          # empty: every class
    anchor: bottom_center      # the point of the box tested: bottom_center (default) | center
    min_frames: 3              # inertia: frames inside before "enter", outside before "exit"
    loiter_after: 30s          # a loiter event once a track has stayed this long (0: never)
lines:
  - name: gate
    a: [640, 0]
    b: [640, 720]
    classes: [person, car]
`

func decodeYAML(t *testing.T, s string) (Config, error) {
	t.Helper()
	var c Config
	dec := yaml.NewDecoder(strings.NewReader(s))
	dec.KnownFields(true)
	err := dec.Decode(&c)
	return c, err
}

func TestConfigDecoding(t *testing.T) {
	c, err := decodeYAML(t, issueYAML)
	require.NoError(t, err)
	require.NoError(t, c.Validate())
	want := Config{
		Tracker: Tracker{HighScore: 0.5, MatchIoU: 0.2, ConfirmHits: 3, LostAfter: Duration(2 * time.Second)},
		Zones: []Zone{{Name: "door", Polygon: []XY{{100, 80}, {400, 80}, {400, 300}, {100, 300}}, Classes: []string{"person"},
			Anchor: AnchorBottomCenter, MinFrames: 3, LoiterAfter: Duration(30 * time.Second)}},
		Lines: []Line{{Name: "gate", A: XY{640, 0}, B: XY{640, 720}, Classes: []string{"person", "car"}}},
	}
	require.Equal(t, want, c)

	// JSON, as the registry stores it and the API takes it: the same
	// value after a round trip, durations as strings.
	b, err := json.Marshal(c)
	require.NoError(t, err)
	require.Contains(t, string(b), `"lost_after":"2s"`)
	require.Contains(t, string(b), `"polygon":[[100,80],[400,80],[400,300],[100,300]]`)
	var j Config
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&j))
	require.Equal(t, c, j)
	// YAML round trip.
	y, err := yaml.Marshal(c)
	require.NoError(t, err)
	back, err := decodeYAML(t, string(y))
	require.NoError(t, err)
	require.Equal(t, c, back)
	// An empty config writes as {} and means: track with the defaults.
	b, err = json.Marshal(Config{})
	require.NoError(t, err)
	require.JSONEq(t, `{}`, string(b))

	// "0" is a duration; a number or a word is not; unknown keys are
	// errors.
	c, err = decodeYAML(t, "zones: [{name: z, polygon: [[0,0],[1,0],[0,1]], loiter_after: 0}]")
	require.NoError(t, err)
	require.Zero(t, c.Zones[0].LoiterAfter)
	_, err = decodeYAML(t, "tracker: {lost_after: soon}")
	require.ErrorContains(t, err, "not a duration")
	_, err = decodeYAML(t, "tracker: {lost_afterr: 2s}")
	require.ErrorContains(t, err, "lost_afterr")
	dec = json.NewDecoder(strings.NewReader(`{"tracker": {"lost_after": 2}}`))
	require.Error(t, dec.Decode(&j))
}

// The defaults are the published ByteTrack and Frigate values the
// comments name.
func TestDefaults(t *testing.T) {
	s := Tracker{}.settings()
	require.Equal(t, settings{highScore: 0.5, newScore: 0.6, matchIoU: 0.2, confirmHits: 3, lostAfter: 2,
		stationaryAfter: 10, stationaryMove: 0.1}, s)
	z := newZone(Zone{Name: "z", Polygon: []XY{{0, 0}, {1, 0}, {0, 1}}})
	require.Equal(t, 3, z.minFrames)
	require.Zero(t, z.loiterAfter)
	l := newLine(Line{Name: "l", A: XY{0, 0}, B: XY{1, 1}})
	require.Equal(t, 5.0, l.debounce)
}
