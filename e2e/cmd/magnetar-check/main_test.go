package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/magnetar-io/magnetar/e2e/check"
)

func TestRun(t *testing.T) {
	id := &check.MsgID{Partition: 0, Ledger: 1, Entry: 1}
	tests := []struct {
		name  string
		recvs []check.Event // none: the ok send is lost
		code  int
	}{
		{"pass", []check.Event{{Sub: "s", SubType: check.SubExclusive, Consumer: "c", Value: "v", ID: id}}, 0},
		{"lost", nil, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			f, err := os.Create(filepath.Join(dir, "history.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			w, err := check.NewWriter(f, check.Meta{Scenario: tc.name, Partitions: 1, Subscriptions: []string{"s"}})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Send(check.Event{Producer: "p", Seq: 1, Result: check.ResultOK, Value: "v", ID: id}); err != nil {
				t.Fatal(err)
			}
			for _, e := range tc.recvs {
				if err := w.Recv(e); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			f.Close()

			var stdout, stderr bytes.Buffer
			if code := run([]string{dir}, &stdout, &stderr); code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %s", code, tc.code, stderr.String())
			}
			txt, err := os.ReadFile(filepath.Join(dir, "report.txt"))
			if err != nil || string(txt) != stdout.String() {
				t.Errorf("report.txt differs from stdout (%v)", err)
			}
			js, err := os.ReadFile(filepath.Join(dir, "report.json"))
			if err != nil {
				t.Fatal(err)
			}
			var r check.Report
			if err := json.Unmarshal(js, &r); err != nil {
				t.Fatal(err)
			}
			if r.Pass() != (tc.code == 0) {
				t.Errorf("report.json Pass() = %v", r.Pass())
			}
		})
	}
}

func TestRunErrors(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(nil, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "usage") {
		t.Errorf("no args: exit %d, stderr %q", code, stderr.String())
	}
	stderr.Reset()
	if code := run([]string{t.TempDir()}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "history.jsonl") {
		t.Errorf("missing history: exit %d, stderr %q", code, stderr.String())
	}
}
