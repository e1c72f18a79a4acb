// Command mutate checks that the tests catch a broken invariant: for each
// mutation of a curated list, it changes one line of the code that
// enforces an invariant, runs the tests that should notice, and reports
// the mutations they did not catch (exit status 1).
//
// The list (mutations.tsv beside this file) is data: one mutation per
// line, so that a new invariant means a new line. Columns, separated by
// one tab:
//
//	id  invariant  file  before  after  packages  [run]
//
// before is the whole line as it is in file, without its indentation; it
// must occur exactly once there. after replaces it (the indentation is
// kept). packages are the `go test` patterns (space-separated) whose tests
// should catch it, run an optional -run expression to restrict them to.
// Lines starting with # are comments.
//
// The source tree is never written: each mutated file is given to the go
// command as an overlay (-overlay), so an interrupted run leaves nothing
// behind and runs may go side by side. Tests that build binaries of
// their own (e2e) do not see overlays: list package tests. Before the
// mutations, the same tests run unmutated (the baseline): a mutation is
// only counted caught if its tests passed without it.
//
// `make mutate` runs the whole list and records the result in
// docs/testing.md. It is slow (minutes per package on 2 cores) and so is
// not part of `make test`.
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Mutation is one line of the list.
type Mutation struct {
	ID        string
	Invariant string
	File      string // relative to the module root
	Before    string // the line, trimmed
	After     string // its replacement, trimmed
	Packages  []string
	Run       string // go test -run; empty: every test
	Line      int    // line in the list
}

// Outcome of one mutation.
type Outcome string

const (
	Caught      Outcome = "caught"
	Survived    Outcome = "SURVIVED"
	NotFound    Outcome = "line not found" // the list is stale
	NoCompile   Outcome = "does not build" // the mutation is not valid Go
	BaseFails   Outcome = "baseline fails" // its tests fail without it
	HungCaught  Outcome = "caught (hung)"  // a test hung until -timeout
	Interrupted Outcome = "not run"        // the run was stopped
	RunError    Outcome = "go test failed" // could not run the tests
)

// ok says whether the outcome is a pass of the check.
func (o Outcome) ok() bool { return o == Caught || o == HungCaught }

// Result is what happened to one mutation.
type Result struct {
	M       Mutation
	Outcome Outcome
	By      []string // failing tests (package.Test), first ones
	Took    time.Duration
	Detail  string
}

// parseList reads the list.
func parseList(r io.Reader) ([]Mutation, error) {
	var ms []Mutation
	seen := map[string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 6 && len(f) != 7 {
			return nil, fmt.Errorf("line %d: %d tab-separated columns, want 6 or 7 (id, invariant, file, before, after, packages, [run]); were tabs turned into spaces?", n, len(f))
		}
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		m := Mutation{ID: f[0], Invariant: f[1], File: f[2], Before: f[3], After: f[4], Packages: strings.Fields(f[5]), Line: n}
		if len(f) == 7 {
			m.Run = f[6]
		}
		switch {
		case m.ID == "" || m.Invariant == "" || m.File == "" || m.Before == "" || m.After == "" || len(m.Packages) == 0:
			return nil, fmt.Errorf("line %d: an empty column", n)
		case m.Before == m.After:
			return nil, fmt.Errorf("line %d (%s): after is the same as before", n, m.ID)
		case filepath.IsAbs(m.File) || strings.HasPrefix(filepath.Clean(m.File), ".."):
			return nil, fmt.Errorf("line %d (%s): file %q is not inside the module", n, m.ID, m.File)
		case strings.HasSuffix(m.File, "_test.go"):
			return nil, fmt.Errorf("line %d (%s): %s is a test file: mutate the code, not its tests", n, m.ID, m.File)
		}
		if prev, dup := seen[m.ID]; dup {
			return nil, fmt.Errorf("line %d: id %q already on line %d", n, m.ID, prev)
		}
		seen[m.ID] = n
		ms = append(ms, m)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return ms, nil
}

// errNotFound: the line to mutate is not in the file exactly once.
var errNotFound = errors.New("line not found")

// apply replaces the one line of src whose trimmed text is before with
// after, keeping the line's indentation.
func apply(src []byte, before, after string) ([]byte, error) {
	lines := strings.SplitAfter(string(src), "\n")
	at := -1
	for i, l := range lines {
		if strings.TrimSpace(l) != before {
			continue
		}
		if at >= 0 {
			return nil, fmt.Errorf("%w: %q is on lines %d and %d; make it unique", errNotFound, before, at+1, i+1)
		}
		at = i
	}
	if at < 0 {
		return nil, fmt.Errorf("%w: %q", errNotFound, before)
	}
	l := lines[at]
	indent := l[:len(l)-len(strings.TrimLeft(l, " \t"))]
	eol := l[len(strings.TrimRight(l, " \t\r\n")):]
	lines[at] = indent + after + strings.TrimLeft(eol, " \t")
	return []byte(strings.Join(lines, "")), nil
}

// testEvent is a line of `go test -json`: a test event or a build event.
type testEvent struct {
	Action      string
	Package     string
	Test        string
	Output      string
	FailedBuild string
	ImportPath  string
}

// testRun is what one `go test` said.
type testRun struct {
	failed     []string // package.Test that failed, in order
	ran        int      // tests started
	pkgFailed  bool     // a package failed (a test, or its binary)
	buildFail  bool
	hung       bool   // a test binary hit -timeout
	output     string // the last maxOutput bytes
	exitStatus int
}

// maxOutput is how much of a run's output is kept (for the report).
const maxOutput = 64 << 10

// runner runs `go test` in a module.
type runner struct {
	gocmd   string        // the go command
	dir     string        // module root
	timeout time.Duration // go test -timeout
	env     []string
	stderr  io.Writer // progress
}

func (r *runner) goTest(ctx context.Context, overlay string, pkgs []string, run string) (testRun, error) {
	args := []string{"test", "-json", "-count=1", "-failfast", "-timeout", r.timeout.String()}
	if overlay != "" {
		args = append(args, "-overlay", overlay)
	}
	if run != "" {
		args = append(args, "-run", run)
	}
	args = append(args, pkgs...)
	cmd := exec.CommandContext(ctx, cmp.Or(r.gocmd, "go"), args...)
	cmd.Dir = r.dir
	cmd.Env = append(os.Environ(), r.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout = &out
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		return testRun{}, ctx.Err()
	}
	tr := testRun{output: stderr.String()}
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		tr.exitStatus = exitErr.ExitCode()
	case err != nil:
		return testRun{}, err
	}
	var text tailBuffer
	text.WriteString(stderr.String())
	sc := bufio.NewScanner(&out)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	for sc.Scan() {
		var ev testEvent
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			text.WriteString(sc.Text() + "\n")
			continue
		}
		switch ev.Action {
		case "run":
			tr.ran++
		case "build-fail":
			tr.buildFail = true
		case "build-output", "output":
			text.WriteString(ev.Output)
			if strings.Contains(ev.Output, "panic: test timed out after") {
				tr.hung = true
			}
		case "fail":
			if ev.FailedBuild != "" {
				tr.buildFail = true
			}
			if ev.Test != "" {
				tr.failed = append(tr.failed, ev.Package+"."+ev.Test)
			} else {
				tr.pkgFailed = true
			}
		}
	}
	if err := sc.Err(); err != nil {
		return testRun{}, fmt.Errorf("reading go test -json: %w", err)
	}
	tr.output = text.String()
	return tr, nil
}

// tailBuffer keeps the last maxOutput bytes written to it.
type tailBuffer struct{ b []byte }

func (t *tailBuffer) WriteString(s string) {
	t.b = append(t.b, s...)
	if n := len(t.b); n > 2*maxOutput {
		t.b = append(t.b[:0], t.b[n-maxOutput:]...)
	}
}

func (t *tailBuffer) String() string { return string(t.b[max(0, len(t.b)-maxOutput):]) }

// baselineKey names a set of tests (packages and -run).
func baselineKey(m Mutation) string { return strings.Join(m.Packages, " ") + "\x00" + m.Run }

// check runs every mutation and returns the results in list order.
func (r *runner) check(ctx context.Context, ms []Mutation, parallel int, tmp string) []Result {
	results := make([]Result, len(ms))
	for i, m := range ms {
		results[i] = Result{M: m, Outcome: Interrupted}
	}
	// Each mutated file, before any test runs: a line that is no longer
	// there is reported, and its tests are not run.
	overlays := make([]string, len(ms))
	for i, m := range ms {
		path := filepath.Join(r.dir, m.File)
		src, err := os.ReadFile(path)
		if err == nil {
			src, err = apply(src, m.Before, m.After)
		}
		if err != nil {
			results[i].Outcome, results[i].Detail = NotFound, err.Error()
			continue
		}
		mutated := filepath.Join(tmp, fmt.Sprintf("%03d-%s.go", i, m.ID))
		overlay := filepath.Join(tmp, fmt.Sprintf("%03d-%s.json", i, m.ID))
		abs, _ := filepath.Abs(path)
		raw, _ := json.Marshal(map[string]map[string]string{"Replace": {abs: mutated}})
		if err := os.WriteFile(mutated, src, 0o644); err != nil {
			results[i].Outcome, results[i].Detail = RunError, err.Error()
			continue
		}
		if err := os.WriteFile(overlay, raw, 0o644); err != nil {
			results[i].Outcome, results[i].Detail = RunError, err.Error()
			continue
		}
		overlays[i] = overlay
	}

	type job func()
	jobs := make(chan job)
	var wg sync.WaitGroup
	for range max(parallel, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				j()
			}
		}()
	}
	submit := func(j job) bool {
		select {
		case jobs <- j:
			return true
		case <-ctx.Done():
			return false
		}
	}

	// Baselines: each set of tests once, unmutated.
	var mu sync.Mutex
	base := map[string]error{}
	var keys []string
	for i, m := range ms {
		if overlays[i] == "" {
			continue
		}
		if _, ok := base[baselineKey(m)]; !ok {
			base[baselineKey(m)] = nil
			keys = append(keys, baselineKey(m))
		}
	}
	var bwg sync.WaitGroup
	for _, k := range keys {
		pkgs, run, _ := strings.Cut(k, "\x00")
		bwg.Add(1)
		if !submit(func() {
			defer bwg.Done()
			start := time.Now()
			tr, err := r.goTest(ctx, "", strings.Fields(pkgs), run)
			switch {
			case err == nil && (tr.exitStatus != 0 || tr.buildFail):
				err = fmt.Errorf("tests fail without a mutation: %s", firstOf(tr.failed, tail(tr.output, 400)))
			case err == nil && tr.ran == 0:
				err = fmt.Errorf("no test ran: -run %q matches none in %s", run, pkgs)
			}
			fmt.Fprintf(r.stderr, "baseline %s -run %q: %v (%v)\n", pkgs, run, errOr(err, "pass"), time.Since(start).Round(time.Second))
			mu.Lock()
			base[k] = err
			mu.Unlock()
		}) {
			bwg.Done()
		}
	}
	bwg.Wait()

	for i, m := range ms {
		if overlays[i] == "" || ctx.Err() != nil {
			continue
		}
		if err := base[baselineKey(m)]; err != nil {
			results[i].Outcome, results[i].Detail = BaseFails, err.Error()
			continue
		}
		if !submit(func() {
			start := time.Now()
			tr, err := r.goTest(ctx, overlays[i], m.Packages, m.Run)
			res := Result{M: m, Took: time.Since(start)}
			switch {
			case err != nil && ctx.Err() != nil:
				res.Outcome = Interrupted
			case err != nil:
				res.Outcome, res.Detail = RunError, err.Error()
			case tr.buildFail:
				res.Outcome, res.Detail = NoCompile, tail(tr.output, 600)
			case tr.ran == 0:
				res.Outcome, res.Detail = RunError, "no test ran"
			case tr.exitStatus == 0:
				res.Outcome = Survived
			case tr.hung:
				res.Outcome, res.By = HungCaught, first(tr.failed, 3)
			case len(tr.failed) > 0 || tr.pkgFailed:
				res.Outcome, res.By = Caught, first(tr.failed, 3)
			default:
				res.Outcome, res.Detail = RunError, tail(tr.output, 600)
			}
			fmt.Fprintf(r.stderr, "%-32s %-14s %6v %s\n", m.ID, res.Outcome, res.Took.Round(time.Second), strings.Join(res.By, ", "))
			mu.Lock()
			results[i] = res
			mu.Unlock()
		}) {
			break
		}
	}
	close(jobs)
	wg.Wait()
	return results
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }

func firstOf(s []string, otherwise string) string {
	if len(s) > 0 {
		return s[0]
	}
	return otherwise
}

func errOr(err error, ok string) string {
	if err != nil {
		return err.Error()
	}
	return ok
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}

// report renders the results as Markdown.
func report(w io.Writer, results []Result, header string) {
	ok := 0
	for _, r := range results {
		if r.Outcome.ok() {
			ok++
		}
	}
	fmt.Fprintf(w, "%s\n\n%d of %d mutations caught.\n\n", header, ok, len(results))
	fmt.Fprintln(w, "| id | invariant | file | result | time | caught by |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, r := range results {
		by := strings.Join(r.By, ", ")
		if by == "" && r.Detail != "" && !r.Outcome.ok() {
			by = strings.ReplaceAll(strings.ReplaceAll(tail(r.Detail, 160), "|", `\|`), "\n", " ")
		}
		took := ""
		if r.Took > 0 {
			took = r.Took.Round(time.Second).String()
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", r.M.ID, r.M.Invariant, r.M.File, r.Outcome, took, by)
	}
}

// Markers of the section of the report file that a run replaces.
const (
	beginMark = "<!-- mutate:begin -->"
	endMark   = "<!-- mutate:end -->"
)

// replaceSection puts body between the markers of doc.
func replaceSection(doc []byte, body string) ([]byte, error) {
	s := string(doc)
	b, e := strings.Index(s, beginMark), strings.Index(s, endMark)
	if b < 0 || e < b {
		return nil, fmt.Errorf("no %s ... %s section", beginMark, endMark)
	}
	return []byte(s[:b+len(beginMark)] + "\n" + body + s[e:]), nil
}

func gitDescribe(dir string) string {
	cmd := exec.Command("git", "describe", "--always", "--dirty")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "unknown commit"
	}
	return strings.TrimSpace(string(out))
}

func main() {
	list := flag.String("list", "tools/mutate/mutations.tsv", "the list of mutations")
	gocmd := flag.String("go", "go", "the go command")
	dir := flag.String("dir", ".", "the module root")
	only := flag.String("only", "", "comma-separated ids or invariants to run (default: all)")
	timeout := flag.Duration("timeout", 10*time.Minute, "go test -timeout of each run (a hung test then counts as caught, flagged)")
	parallel := flag.Int("p", 1, "mutations tested side by side")
	reportFile := flag.String("report", "", "a Markdown file whose "+beginMark+" section gets the result (of a whole run: not with -only)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "mutate: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	f, err := os.Open(*list)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(2)
	}
	ms, err := parseList(f)
	f.Close()
	if err != nil {
		fmt.Fprintf(os.Stderr, "mutate: %s: %v\n", *list, err)
		os.Exit(2)
	}
	if *only != "" {
		want := strings.Split(*only, ",")
		for _, w := range want {
			if !slices.ContainsFunc(ms, func(m Mutation) bool { return m.ID == w || m.Invariant == w }) {
				fmt.Fprintf(os.Stderr, "mutate: -only: no mutation has id or invariant %q\n", w)
				os.Exit(2)
			}
		}
		ms = slices.DeleteFunc(ms, func(m Mutation) bool {
			return !slices.Contains(want, m.ID) && !slices.Contains(want, m.Invariant)
		})
		if *reportFile != "" {
			fmt.Fprintf(os.Stderr, "mutate: -only: a partial run; %s is left as it is\n", *reportFile)
			*reportFile = ""
		}
	}
	tmp, err := os.MkdirTemp("", "mutate-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(2)
	}
	defer os.RemoveAll(tmp)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	start := time.Now()
	r := &runner{gocmd: *gocmd, dir: *dir, timeout: *timeout, env: []string{"CGO_ENABLED=0"}, stderr: os.Stderr}
	fmt.Fprintf(os.Stderr, "mutate: %d mutations, %d at a time\n", len(ms), *parallel)
	results := r.check(ctx, ms, *parallel, tmp)
	header := fmt.Sprintf("Last run: %s, commit %s, %s, %d CPUs, %v in all (`make mutate`).",
		time.Now().UTC().Format("2006-01-02"), gitDescribe(*dir), runtime.Version(), runtime.NumCPU(), time.Since(start).Round(time.Second))
	var buf bytes.Buffer
	report(&buf, results, header)
	os.Stdout.Write(buf.Bytes())
	if *reportFile != "" && ctx.Err() == nil {
		doc, err := os.ReadFile(*reportFile)
		if err == nil {
			doc, err = replaceSection(doc, buf.String())
		}
		if err == nil {
			err = os.WriteFile(*reportFile, doc, 0o644)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "mutate: report %s: %v\n", *reportFile, err)
			os.Exit(2)
		}
	}
	for _, res := range results {
		if !res.Outcome.ok() {
			os.Exit(1)
		}
	}
}
