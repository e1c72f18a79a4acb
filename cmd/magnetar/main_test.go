package main

import (
	"bufio"
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

// run executes the CLI in-process.
func run(ctx context.Context, stdout io.Writer, args ...string) error {
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(io.Discard)
	return root.ExecuteContext(ctx)
}

func TestVersion(t *testing.T) {
	var out strings.Builder
	if err := run(context.Background(), &out, "version"); err != nil || !strings.HasPrefix(out.String(), "magnetar ") {
		t.Fatalf("version: %q %v", out.String(), err)
	}
}

func TestBadConfigurationIsAClearError(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bookie"}, "no metastore"},
		{[]string{"bookie", "--metastore", "127.0.0.1:1", "--max-entry-size", "0"}, "max entry size"},
		{[]string{"bookie", "--metastore", "127.0.0.1:1", "--log-level", "loud"}, "log level"},
		{[]string{"standalone", "--bookies", "0"}, "bookies 0"},
		{[]string{"standalone", "--config", "/nonexistent.yaml"}, "config file"},
		{[]string{"standalone", "extra-arg"}, "unknown command"},
	} {
		err := run(context.Background(), io.Discard, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error about %q", tc.args, err, tc.want)
		}
	}
}

// `magnetar standalone` starts, says where it listens, and stops cleanly
// when interrupted.
func TestStandaloneCommand(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, pw, "standalone", "--data-dir", t.TempDir(), "--bookies", "2",
			"--metastore-listen", "127.0.0.1:0", "--bookie-listen", "127.0.0.1:0",
			"--broker-listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--log-level", "warn")
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	var lines []string
	timeout := time.AfterFunc(time.Minute, func() { pw.CloseWithError(io.ErrUnexpectedEOF) })
	defer timeout.Stop()
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if strings.HasPrefix(sc.Text(), "Press Ctrl-C") {
			break
		}
	}
	out := strings.Join(lines, "\n")
	if !strings.Contains(out, "clients           magnetar://127.0.0.1:") || !strings.Contains(out, "admin (HTTP)      http://127.0.0.1:") ||
		!strings.Contains(out, "metastore (etcd)  127.0.0.1:") || strings.Count(out, "bookie            127.0.0.1:") != 2 {
		t.Fatalf("standalone printed:\n%s", out)
	}
	cancel()
	go io.Copy(io.Discard, pr)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("standalone exited with %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("standalone did not stop")
	}
}
