package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseList(t *testing.T) {
	good := "# a comment\n\n" +
		"a\tinv\tx/y.go\tif a <= b {\tif a < b {\t./x\n" +
		"b\tinv\tx/y.go\treturn n\treturn n + 1\t./x ./z\tTestY|TestZ\n"
	ms, err := parseList(strings.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].Before != "if a <= b {" || ms[0].After != "if a < b {" || ms[0].Run != "" || ms[0].Line != 3 ||
		len(ms[1].Packages) != 2 || ms[1].Packages[1] != "./z" || ms[1].Run != "TestY|TestZ" {
		t.Fatalf("parsed %+v", ms)
	}
	for _, tc := range []struct{ name, list, want string }{
		{"spaces for tabs", "a inv x/y.go if a {  if b { ./x\n", "columns"},
		{"too many columns", "a\tinv\tx.go\tb\tc\t./x\trun\textra\n", "columns"},
		{"empty column", "a\tinv\tx.go\t\tc\t./x\n", "empty column"},
		{"no change", "a\tinv\tx.go\tb\tb\t./x\n", "same as before"},
		{"duplicate id", "a\tinv\tx.go\tb\tc\t./x\na\tinv\tx.go\td\te\t./x\n", "already on line 1"},
		{"outside the module", "a\tinv\t../x.go\tb\tc\t./x\n", "not inside the module"},
		{"a test file", "a\tinv\tx_test.go\tb\tc\t./x\n", "test file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseList(strings.NewReader(tc.list))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want one saying %q", err, tc.want)
			}
		})
	}
}

func TestApply(t *testing.T) {
	src := "func f() {\n\t\tif a <= b {  \r\n\t\treturn\n\t}\n}\n"
	got, err := apply([]byte(src), "if a <= b {", "if a < b {")
	if err != nil {
		t.Fatal(err)
	}
	if want := "func f() {\n\t\tif a < b {\r\n\t\treturn\n\t}\n}\n"; string(got) != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if _, err := apply([]byte(src), "if a < b {", "x"); !errors.Is(err, errNotFound) {
		t.Fatalf("a missing line: %v", err)
	}
	if _, err := apply([]byte("return\nreturn\n"), "return", "x"); !errors.Is(err, errNotFound) || !strings.Contains(err.Error(), "lines 1 and 2") {
		t.Fatalf("a line twice: %v", err)
	}
}

func TestReplaceSection(t *testing.T) {
	doc := "# T\n\n" + beginMark + "\nold\n" + endMark + "\nafter\n"
	got, err := replaceSection([]byte(doc), "new\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := "# T\n\n" + beginMark + "\nnew\n" + endMark + "\nafter\n"; string(got) != want {
		t.Fatalf("got %q", got)
	}
	if _, err := replaceSection([]byte("no markers"), "x"); err == nil {
		t.Fatal("a document without the section was accepted")
	}
}

// The runner on a module of its own: one mutation the tests catch, one
// they miss, one whose line is gone, one that does not build, one whose
// tests fail anyway, one that makes a test hang, and one whose -run
// matches no test. The module's files are unchanged afterwards.
func TestCheckOutcomes(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/m\n\ngo 1.21\n",
		"m.go": `package m

func Max(a, b int) int {
	if a > b {
		return a
	}
	return b
}

func Clamp(x int) int {
	if x > 10 {
		return 10
	}
	return x
}

func Loop(n int) int {
	for i := 0; i < n; i++ {
	}
	return n
}
`,
		"m_test.go": `package m

import "testing"

func TestMax(t *testing.T) {
	if Max(2, 1) != 2 || Max(1, 2) != 2 {
		t.Fatal("max")
	}
}

func TestLoop(t *testing.T) {
	if Loop(3) != 3 {
		t.Fatal("loop")
	}
}
`,
		"bad/bad.go":      "package bad\n\nfunc One() int { return 2 }\n",
		"bad/bad_test.go": "package bad\n\nimport \"testing\"\n\nfunc TestOne(t *testing.T) {\n\tif One() != 1 {\n\t\tt.Fatal(\"not one\")\n\t}\n}\n",
	}
	for name, body := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	list := "caught\tmax\tm.go\tif a > b {\tif a < b {\t.\tTestMax\n" +
		"survived\tclamp\tm.go\tif x > 10 {\tif x > 11 {\t.\n" +
		"stale\tmax\tm.go\tif a >= b {\tif a < b {\t.\n" +
		"broken\tmax\tm.go\treturn b\treturn c\t.\n" +
		"baseline\tbad\tbad/bad.go\tfunc One() int { return 2 }\tfunc One() int { return 3 }\t./bad\n" +
		"hangs\tloop\tm.go\tfor i := 0; i < n; i++ {\tfor i := 0; i < n; i += 0 {\t.\tTestLoop\n" +
		"norun\tmax\tm.go\treturn a\treturn a + 0\t.\tTestNope\n"
	ms, err := parseList(strings.NewReader(list))
	if err != nil {
		t.Fatal(err)
	}
	r := &runner{dir: dir, timeout: 5 * time.Second, env: []string{"GOWORK=off", "GOFLAGS=-mod=mod", "CGO_ENABLED=0"}, stderr: io.Discard}
	results := r.check(context.Background(), ms, 2, t.TempDir())
	want := map[string]Outcome{"caught": Caught, "survived": Survived, "stale": NotFound, "broken": NoCompile, "baseline": BaseFails, "hangs": HungCaught, "norun": BaseFails}
	for _, res := range results {
		if res.Outcome != want[res.M.ID] {
			t.Errorf("%s: %s (%s); want %s", res.M.ID, res.Outcome, res.Detail, want[res.M.ID])
		}
	}
	if got := results[0].By; len(got) != 1 || got[0] != "example.com/m.TestMax" {
		t.Errorf("caught by %v; want example.com/m.TestMax", got)
	}
	if src, _ := os.ReadFile(filepath.Join(dir, "m.go")); string(src) != files["m.go"] {
		t.Error("the module's source was changed")
	}
	var sb strings.Builder
	report(&sb, results, "header")
	if out := sb.String(); !strings.Contains(out, "2 of 7 mutations caught") || !strings.Contains(out, "| survived | clamp | m.go | SURVIVED |") {
		t.Errorf("report:\n%s", out)
	}
}

// Every mutation of the project's list still applies: its line is in its
// file once (code moved or rewritten leaves an entry that no longer
// tests anything, found here rather than by a full run).
func TestProjectListApplies(t *testing.T) {
	root := filepath.Join("..", "..")
	f, err := os.Open(filepath.Join(root, "tools", "mutate", "mutations.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ms, err := parseList(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 {
		t.Fatal("the list is empty")
	}
	for _, m := range ms {
		src, err := os.ReadFile(filepath.Join(root, m.File))
		if err != nil {
			t.Errorf("%s (line %d): %v", m.ID, m.Line, err)
			continue
		}
		if _, err := apply(src, m.Before, m.After); err != nil {
			t.Errorf("%s (line %d): %v", m.ID, m.Line, err)
		}
	}
}
