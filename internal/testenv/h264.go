package testenv

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// H.264 NAL unit types (ITU-T H.264, table 7-1), for RewriteH264.
const (
	NALIDR = 5 // coded slice of an IDR picture
	NALSPS = 7 // sequence parameter set
	NALPPS = 8 // picture parameter set
)

// annexB splits an H.264 Annex-B stream into NAL units, each with its
// start code.
func annexB(data []byte) [][]byte {
	var starts []int
	for i := 0; i+3 <= len(data); i++ {
		if data[i] == 0 && data[i+1] == 0 && data[i+2] == 1 {
			s := i
			if s > 0 && data[s-1] == 0 {
				s-- // a 4-byte start code
			}
			starts = append(starts, s)
			i += 2
		}
	}
	nals := make([][]byte, len(starts))
	for i, s := range starts {
		end := len(data)
		if i+1 < len(starts) {
			end = starts[i+1]
		}
		nals[i] = data[s:end]
	}
	return nals
}

// nalType is the type of a NAL unit with its start code.
func nalType(nal []byte) int {
	i := bytes.Index(nal, []byte{0, 0, 1})
	return int(nal[i+3] & 0x1f)
}

// RewriteH264 writes into a temporary directory of t, as name, the NAL
// units of the H.264 Annex-B file in that keep accepts (by NAL unit type
// and index among the units of that type), and returns its path: e.g. a
// stream without its first IDR picture (a camera joined mid-GOP) or
// without parameter sets.
func RewriteH264(t testing.TB, in, name string, keep func(typ, nth int) bool) string {
	t.Helper()
	data, err := os.ReadFile(in)
	if err != nil {
		t.Fatalf("RewriteH264: %v", err)
	}
	var out []byte
	seen := map[int]int{}
	for _, nal := range annexB(data) {
		typ := nalType(nal)
		if keep(typ, seen[typ]) {
			out = append(out, nal...)
		}
		seen[typ]++
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, out, 0o644); err != nil {
		t.Fatalf("RewriteH264: %v", err)
	}
	return p
}
