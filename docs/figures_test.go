// Package docs_test checks the documentation's figures against the raw
// outputs they cite (docs/performance.md, "How the figures are checked",
// tells writers the rules):
//
//   - every number in the text of a link to a raw output (a .txt file, such
//     as those under docs/h200-runs) appears in that file, to the precision
//     written: "2,891" matches 2890.9, "89" does not match 84.6;
//   - in a table, a row that links raw outputs has every number of every
//     cell in one of those files, except in columns whose heading says
//     "computed"; once one row of a table links a raw output, every row must;
//   - a link whose whole text is one code span quotes its target verbatim
//     (performance.md quotes the bench's pass rule from its Go source so);
//   - every relative link resolves to a file or folder;
//   - every section of performance.md links a raw output or says "no raw
//     output" (that none was kept).
//
// Numbers in code spans and code blocks, numbers glued to letters (8s,
// 1080p, 2a36c1ed) and commit hashes of digits only are not figures and are
// not checked.
package docs_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// TestFiguresMatchRawOutputs runs the checks over the README, every
// document under docs/ and deploy/README.md.
func TestFiguresMatchRawOutputs(t *testing.T) {
	files, err := filepath.Glob("*.md")
	require.NoError(t, err)
	runs, err := filepath.Glob("h200-runs/*/README.md")
	require.NoError(t, err)
	files = append(append(files, runs...), "../README.md", "../deploy/README.md")
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, p := range check(f, string(b), filepath.Base(f) == "performance.md") {
			t.Error(p)
		}
	}
	if t.Failed() {
		t.Log(`rules: docs/performance.md, "How the figures are checked"`)
	}
}

// TestFigureChecker shows the checker failing on figures that the raw files
// do not hold, among them the one the doc used to give for the batcher
// collapse (89 % refused as late, where 4-nvdec.txt says 84.6 %).
func TestFigureChecker(t *testing.T) {
	const nvdec = "h200-runs/2026-11-30-third/4-nvdec.txt"
	const probe = "h200-runs/2026-11-30-third/1-nvdec-probe.txt"
	for _, tc := range []struct {
		name, doc string
		sections  bool
		problems  int
	}{
		{"the old doc's 89 %", "in batches of 1.0 frame, [89 % refused as late](" + nvdec + ")", false, 1},
		{"the file's 84.6 %", "in batches of 1.0 frame, [84.6 % refused as late](" + nvdec + ")", false, 0},
		{"rounded to the precision written", "[268 of 2,553 fps, 89.6 % dropped](" + nvdec + ")", false, 0},
		{"one decimal more than the file can round to", "[268.5 fps](" + nvdec + ")", false, 1},
		{"a link over two lines", "the survivors' [P99\n34.6 ms](" + nvdec + ")", false, 0},
		{"reference links", "[2,040 fps][probe] and [1.3 ×][probe]\n\n[probe]: " + probe, false, 1},
		{"code spans and identifiers are not figures", "[`--start 104` at 81f24ff, 8s each](" + nvdec + ")", false, 0},
		{"a table row against its link", "| streams | fps |\n| --- | --- |\n| [80](" + nvdec + ") | 268 |\n| [80](" + nvdec + ") | 270 |", false, 1},
		{"computed columns are skipped", "| streams | ratio (computed) |\n|---|---|\n| [80](" + nvdec + ") | 0.105 |", false, 0},
		{"a row without its link", "| streams | fps |\n|---|---|\n| [80](" + nvdec + ") | 268 |\n| 84 | 288 |", false, 1},
		{"a quote of the target", "[`refused as late 84.6%`](" + nvdec + ") and [`refused as late 89%`](" + nvdec + ")", false, 1},
		{"a missing target", "[raw](h200-runs/nowhere.txt)", false, 1},
		{"a minus sign", "[−101 MiB](h200-runs/2026-11-30-fourth/3-soak-mmap256k.txt), not [−100 MiB](h200-runs/2026-11-30-fourth/3-soak-mmap256k.txt)", false, 1},
		{"a section without raw output", "## A\n\n[1](" + nvdec + ")\n\n## B\n\n2 fps\n\n## C\n\nNo raw output was kept: 3 fps.\n", true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := check("test.md", tc.doc, tc.sections)
			require.Len(t, got, tc.problems, "%s", strings.Join(got, "\n"))
		})
	}
}

var (
	fence     = regexp.MustCompile("(?m)^ *```[^\n]*\n(?:[^\n]*\n)*? *```")
	codeSpan  = regexp.MustCompile("`[^`]*`")
	linkRe    = regexp.MustCompile(`\[([^\[\]]*)\](?:\(([^()\s]+)(?:\s+"[^"]*")?\)|\[([^\[\]]+)\])`)
	refDef    = regexp.MustCompile(`(?m)^ {0,3}\[([^\[\]]+)\]:\s*(\S+)`)
	docNum    = regexp.MustCompile(`\d[\d,]*(?:\.\d+)?`)
	fileNum   = regexp.MustCompile(`-?\d+(?:\.\d+)?`)
	heading   = regexp.MustCompile(`(?m)^#{1,6} `)
	thousands = regexp.MustCompile(`^\d{1,3}(?:,\d{3})+(?:\.\d+)?$`)
)

// link is one Markdown link: its text as written, where it sits in the
// document (byte offsets of the whole link), and the file it points to
// (relative to the repository's working directory; "" for URLs and anchors).
type link struct {
	text, target string
	start, end   int
}

// check returns one line per problem in doc, which was read from name
// (links resolve from its directory). sections turns on the rule that each
// section links a raw output or says none was kept.
func check(name, doc string, sections bool) []string {
	dir := filepath.Dir(name)
	masked := mask(doc)
	lineOf := func(off int) int { return 1 + strings.Count(doc[:off], "\n") }
	var problems []string
	bad := func(off int, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("%s:%d: ", name, lineOf(off))+fmt.Sprintf(format, args...))
	}
	links := findLinks(doc, masked, dir)
	// Link destinations, and link texts that name a file, are not figures:
	// blank them for the row rule.
	figures := []byte(masked)
	for _, l := range links {
		from := l.start + 1 + len(l.text) + 1
		if namesFile(l.text) {
			from = l.start
		}
		for i := from; i < l.end; i++ {
			if figures[i] != '\n' {
				figures[i] = ' '
			}
		}
	}
	for _, l := range links {
		if l.target == "" {
			continue
		}
		fi, err := os.Stat(l.target)
		if err != nil {
			bad(l.start, "link to %s: %v", l.target, err)
			continue
		}
		if fi.IsDir() {
			continue
		}
		raw, err := os.ReadFile(l.target)
		if err != nil {
			bad(l.start, "link to %s: %v", l.target, err)
			continue
		}
		text := strings.TrimSpace(l.text)
		if strings.Count(text, "`") == 2 && strings.HasPrefix(text, "`") && strings.HasSuffix(text, "`") {
			if quote := strings.Trim(text, "`"); !strings.Contains(string(raw), quote) {
				bad(l.start, "%q is not in %s", quote, l.target)
			}
			continue
		}
		if !isRaw(l.target) || namesFile(text) {
			continue
		}
		have := numbersIn(string(raw))
		for _, n := range figuresIn(masked[l.start+1 : l.start+1+len(l.text)]) {
			if !n.in(have) {
				bad(l.start, "%q: %s is not in %s (to the precision written)", oneLine(l.text), n.text, l.target)
			}
		}
	}
	checkTables(doc, string(figures), links, bad)
	if sections {
		checkSections(doc, masked, links, bad)
	}
	return problems
}

// mask blanks code blocks and the inside of code spans, keeping offsets and
// newlines, so that neither is read as links, table cells or figures.
func mask(doc string) string {
	b := []byte(doc)
	blank := func(from, to int) {
		for i := from; i < to; i++ {
			if b[i] != '\n' {
				b[i] = ' '
			}
		}
	}
	for _, m := range fence.FindAllStringIndex(doc, -1) {
		blank(m[0], m[1])
	}
	for _, m := range codeSpan.FindAllStringIndex(string(b), -1) {
		blank(m[0]+1, m[1]-1)
	}
	return string(b)
}

// findLinks returns the inline and reference links of doc, found in masked
// (so that links inside code are not links), with targets resolved from dir.
func findLinks(doc, masked, dir string) []link {
	refs := map[string]string{}
	for _, m := range refDef.FindAllStringSubmatch(masked, -1) {
		refs[strings.ToLower(m[1])] = m[2]
	}
	var links []link
	for _, m := range linkRe.FindAllStringSubmatchIndex(masked, -1) {
		l := link{text: doc[m[2]:m[3]], start: m[0], end: m[1]}
		dest := ""
		if m[4] >= 0 {
			dest = masked[m[4]:m[5]]
		} else if d, ok := refs[strings.ToLower(masked[m[6]:m[7]])]; ok {
			dest = d
		} else {
			continue // not a link: "[0, 1][x]" with no definition
		}
		if i := strings.IndexByte(dest, '#'); i >= 0 {
			dest = dest[:i]
		}
		if dest != "" && !strings.Contains(dest, "://") && !strings.HasPrefix(dest, "mailto:") {
			l.target = filepath.Join(dir, dest)
		}
		links = append(links, l)
	}
	return links
}

// namesFile says whether a link's text is a file or folder name
// (8-nice10.txt, h200-runs/2026-11-30-fifth) rather than figures.
func namesFile(text string) bool {
	return strings.ContainsAny(text, "/") || strings.Contains(text, ".txt") || strings.Contains(text, ".md")
}

// isRaw says whether a link target is a raw output: a text file, not a
// document.
func isRaw(target string) bool { return strings.HasSuffix(target, ".txt") }

// checkTables applies the row rule to every table of doc. figures is doc
// masked for code and link destinations.
func checkTables(doc, figures string, links []link, bad func(int, string, ...any)) {
	type row struct {
		off, end int // the line's offsets in doc
		cells    []string
	}
	var tables [][]row
	var cur []row
	off := 0
	for _, line := range strings.SplitAfter(figures, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "|") {
			cur = append(cur, row{off, off + len(strings.TrimRight(line, "\n")), strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")})
		} else if cur != nil {
			tables, cur = append(tables, cur), nil
		}
		off += len(line)
	}
	if cur != nil {
		tables = append(tables, cur)
	}
	rawIn := func(r row) []string {
		var files []string
		for _, l := range links {
			if l.start >= r.off && l.start < r.end && l.target != "" && isRaw(l.target) {
				files = append(files, l.target)
			}
		}
		return files
	}
	for _, tb := range tables {
		if len(tb) < 3 {
			continue
		}
		linked := false
		for _, r := range tb[2:] {
			linked = linked || len(rawIn(r)) > 0
		}
		if !linked {
			continue
		}
		for _, r := range tb[2:] {
			files := rawIn(r)
			if len(files) == 0 {
				bad(r.off, "table row without a link to its raw output: %s", oneLine(doc[r.off:r.end]))
				continue
			}
			var have []float64
			for _, f := range files {
				raw, err := os.ReadFile(f)
				if err == nil {
					have = append(have, numbersIn(string(raw))...)
				}
			}
			for i, c := range r.cells {
				if i < len(tb[0].cells) && strings.Contains(strings.ToLower(tb[0].cells[i]), "computed") {
					continue
				}
				for _, n := range figuresIn(c) {
					if !n.in(have) {
						bad(r.off, "table cell %q: %s is not in %s", strings.TrimSpace(c), n.text, strings.Join(files, " or "))
					}
				}
			}
		}
	}
}

// checkSections applies the section rule: each section under a heading
// links a raw output or says "no raw output". Headings are found in masked,
// so that a shell comment in a code block is not one.
func checkSections(doc, masked string, links []link, bad func(int, string, ...any)) {
	starts := heading.FindAllStringIndex(masked, -1)
	for i, s := range starts {
		end := len(doc)
		if i+1 < len(starts) {
			end = starts[i+1][0]
		}
		if strings.HasPrefix(doc[s[0]:], "# ") {
			continue // the title
		}
		ok := strings.Contains(strings.ToLower(oneLine(doc[s[0]:end])), "no raw output")
		for _, l := range links {
			if l.start >= s[0] && l.start < end && l.target != "" && isRaw(l.target) {
				ok = true
			}
		}
		if !ok {
			title, _, _ := strings.Cut(doc[s[0]:], "\n")
			bad(s[0], "section %q neither links a raw output nor says \"no raw output\"", title)
		}
	}
}

// figure is a number as a document writes it.
type figure struct {
	text     string
	value    float64
	decimals int
}

// in says whether one of have rounds to f at the precision f is written
// with.
func (f figure) in(have []float64) bool {
	tol := 0.5*math.Pow(10, -float64(f.decimals)) + 1e-9
	for _, h := range have {
		if math.Abs(h-f.value) <= tol {
			return true
		}
	}
	return false
}

// figuresIn returns the numbers of a piece of prose: thousands separated
// by commas, a leading minus (- or −) when it stands alone; not those glued
// to letters, digits, '_' or '.' on either side, nor runs of seven or more
// digits without a separator (commit hashes such as 9825566).
func figuresIn(s string) []figure {
	var out []figure
	for _, m := range docNum.FindAllStringIndex(s, -1) {
		i, j := m[0], m[1]
		before, _ := utf8.DecodeLastRuneInString(s[:i])
		if i > 0 && (unicode.IsLetter(before) || unicode.IsDigit(before) || before == '_' || before == '.') {
			continue
		}
		text := strings.TrimRight(s[i:j], ",")
		j = i + len(text)
		if len(text) >= 7 && !strings.ContainsAny(text, ",.") {
			continue // a commit hash of digits only; figures this long have separators
		}
		if after, _ := utf8.DecodeRuneInString(s[j:]); j < len(s) && (unicode.IsLetter(after) || after == '_') {
			continue
		}
		sign := 1.0
		if before == '-' || before == '−' {
			b2, _ := utf8.DecodeLastRuneInString(s[:i-utf8.RuneLen(before)])
			if i-utf8.RuneLen(before) == 0 || !(unicode.IsLetter(b2) || unicode.IsDigit(b2)) {
				sign = -1
			}
		}
		parts := []string{text}
		if strings.Contains(text, ",") && !thousands.MatchString(text) {
			parts = strings.Split(text, ",")
		}
		for _, p := range parts {
			digits := strings.ReplaceAll(p, ",", "")
			v, err := strconv.ParseFloat(digits, 64)
			if err != nil || digits == "" {
				continue
			}
			dec := 0
			if k := strings.IndexByte(digits, '.'); k >= 0 {
				dec = len(digits) - k - 1
			}
			out = append(out, figure{text: p, value: sign * v, decimals: dec})
		}
	}
	return out
}

// numbersIn returns every number of a raw output, glued to letters or not
// (x14, 0.0%, [6528]). A number after '-' counts with and without the sign:
// the '-' of "[-101]" is a minus, the one of "2026-11-30" a hyphen.
func numbersIn(s string) []float64 {
	var out []float64
	for _, m := range fileNum.FindAllString(s, -1) {
		if v, err := strconv.ParseFloat(m, 64); err == nil {
			out = append(out, v, math.Abs(v))
		}
	}
	return out
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
