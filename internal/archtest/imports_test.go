// Package archtest checks the shape of the code base: which packages may
// import which. Imports go one way: the SDK never pulls in server code,
// the metastore knows nothing of its users, the ledger client does not
// reach into the bookie server.
package archtest

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/magnetar-io/magnetar"

// imports maps each package of the module (relative path) to the module
// packages its non-test files import.
func imports(t *testing.T, root string) map[string][]string {
	t.Helper()
	graph := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		if _, ok := graph[rel]; !ok {
			graph[rel] = nil
		}
		for _, imp := range f.Imports {
			p := strings.Trim(imp.Path.Value, `"`)
			if p == module || strings.HasPrefix(p, module+"/") {
				graph[rel] = append(graph[rel], strings.TrimPrefix(strings.TrimPrefix(p, module), "/"))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return graph
}

// deps returns every module package pkg imports, directly or not.
func deps(graph map[string][]string, pkg string) []string {
	seen := map[string]bool{}
	var walk func(string)
	walk = func(p string) {
		for _, d := range graph[p] {
			if !seen[d] {
				seen[d] = true
				walk(d)
			}
		}
	}
	walk(pkg)
	var out []string
	for d := range seen {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

func under(pkg, dir string) bool { return pkg == dir || strings.HasPrefix(pkg, dir+"/") }

func TestImportDirection(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found at %s", root)
	}
	graph := imports(t, root)
	rules := []struct {
		from    string
		allowed func(dep string) bool
		why     string
	}{
		{"client", func(d string) bool { return under(d, "proto") || under(d, "client") }, "the SDK depends only on proto"},
		{"proto", func(d string) bool { return under(d, "proto") }, "generated code depends on nothing of ours"},
		{"metastore", func(d string) bool { return under(d, "metastore") || under(d, "internal/tlsutil") },
			"the metastore knows nothing of its users (TLS files are read by the leaf internal/tlsutil)"},
		{"internal/tlsutil", func(d string) bool { return false }, "TLS loading is a leaf, usable by every side"},
		{"internal/bufpool", func(d string) bool { return false }, "gRPC's buffer pool is a leaf, usable by every side"},
		{"internal/latency", func(d string) bool { return false }, "latency summaries are a leaf, usable by the bookie and the ledger client"},
		{"bookie/wire", func(d string) bool { return false }, "wire is shared by both sides of the bookie protocol"},
		{"bookie/ledger", func(d string) bool {
			return under(d, "proto") || under(d, "metastore") || under(d, "bookie/wire") || under(d, "bookie/ledger") || under(d, "internal/tlsutil") || under(d, "internal/latency")
		}, "the ledger client does not reach into the bookie server"},
		{"broker/admin", func(d string) bool { return d != "broker" },
			"the admin API's HTTP layer asks the broker through its own interfaces (the broker imports it)"},
		{"broker/internal/errs", func(d string) bool { return false }, "the shared sentinels are a leaf, usable by the broker and its admin API"},
		{"broker/internal/naming", func(d string) bool { return d == "broker/internal/errs" }, "the name rules know only the shared sentinels"},
		{"bookie/internal", func(d string) bool {
			return under(d, "bookie/wire") || under(d, "bookie/internal")
		}, "storage knows only the wire errors"},
	}
	checked := 0
	for pkg := range graph {
		for _, r := range rules {
			if !under(pkg, r.from) {
				continue
			}
			checked++
			for _, d := range deps(graph, pkg) {
				if !r.allowed(d) {
					t.Errorf("%s imports %s: %s", pkg, d, r.why)
				}
			}
		}
		// Test helpers never reach production code.
		if !under(pkg, "internal/testutil") && !under(pkg, "internal/testcluster") {
			for _, d := range graph[pkg] {
				if under(d, "internal/testutil") || under(d, "internal/testcluster") {
					t.Errorf("%s (not a test) imports the test helper %s", pkg, d)
				}
			}
		}
	}
	if checked < 6 {
		t.Fatalf("only %d packages matched a rule: the walk is broken", checked)
	}
}
