// Command magnetar-check re-checks a saved e2e history:
//
//	magnetar-check DIR
//
// reads DIR/history.jsonl, runs check.Check, writes DIR/report.json (the
// Report as indented JSON) and DIR/report.txt (its text summary), and
// prints the summary. It exits 0 when the history passes, 1 when it shows
// a failing anomaly, and 2 on a usage, read or write error.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/magnetar-io/magnetar/e2e/check"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(stderr, "usage: magnetar-check DIR  (reads DIR/history.jsonl, writes DIR/report.json and DIR/report.txt)")
		return 2
	}
	dir := args[0]
	h, err := check.ReadFile(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		fmt.Fprintln(stderr, "magnetar-check:", err)
		return 2
	}
	r := check.Check(h)
	if err := check.WriteReport(dir, r); err != nil {
		fmt.Fprintln(stderr, "magnetar-check:", err)
		return 2
	}
	fmt.Fprint(stdout, r.Text())
	if !r.Pass() {
		return 1
	}
	return 0
}
