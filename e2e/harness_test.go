// Package e2e runs Magnetar as real processes (the magnetar binary, built
// once per run) and injects faults such as kill -9. These tests are part of
// `make test`; they bind only 127.0.0.1 and end only the processes they
// started.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/magnetar-io/magnetar/internal/testutil"
	"github.com/magnetar-io/magnetar/metastore"
)

// binary is the magnetar binary built by TestMain; etcdBinary is an etcd
// server built from the etcd module this repository pins.
var binary, etcdBinary string

func TestMain(m *testing.M) {
	// The magnetar processes started inherit it.
	testutil.PoisonReleased()
	dir, err := os.MkdirTemp("", "magnetar-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "magnetar")
	etcdBinary = filepath.Join(dir, "etcd")
	for _, b := range [][2]string{{binary, "../cmd/magnetar"}, {etcdBinary, "go.etcd.io/etcd/server/v3"}} {
		build := exec.Command("go", "build", "-o", b[0], b[1])
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build", b[1]+":", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		// The processes are gone; nothing of the tests' own may be left.
		// toxiproxy (the fault suite's link proxies, a library) leaves the
		// goroutines of a link blocked when its proxy stops with bytes in
		// flight: those are its own, not ours. pulsar-client-go v0.19.0
		// leaves the reconnection loop of a producer its topic's
		// termination closed (doClose does not cancel the producer's
		// context, and Close then returns early): one goroutine per such
		// producer, the library's.
		ignores := append(testutil.GoleakIgnores(),
			goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionProducer).runEventsLoop.func1"),
			goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).Run"),
			goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicLink).read"),
			goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicLink).write"))
		if err := goleak.Find(ignores...); err != nil {
			fmt.Fprintln(os.Stderr, "leaked goroutines:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// proc is a process started by a test: magnetar, or etcd.
type proc struct {
	t    *testing.T
	name string
	bin  string
	args []string
	log  string // file with its output

	mu  sync.Mutex
	cmd *exec.Cmd
}

// startProc runs `magnetar args...`; the process is killed when the test
// ends, and its output is shown if the test failed.
func startProc(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	return startBinary(t, binary, name, args...)
}

// startBinary is startProc for another program.
func startBinary(t *testing.T, bin, name string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, bin: bin, args: args, log: filepath.Join(t.TempDir(), name+".log")}
	p.start()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			out, _ := os.ReadFile(p.log)
			t.Logf("--- output of %s:\n%s", name, tail(out, 200000))
		}
	})
	return p
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func (p *proc) start() {
	p.t.Helper()
	if err := p.startErr(); err != nil {
		p.t.Fatal(err)
	}
}

// startErr starts the process; safe from any goroutine.
func (p *proc) startErr() error {
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Killed with the test binary too (a timeout, a ^C): nothing outlives
	// the test that started it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	p.mu.Lock()
	p.cmd = cmd
	p.mu.Unlock()
	return nil
}

// kill sends SIGKILL to the process, if it runs, and reaps it.
func (p *proc) kill() {
	p.mu.Lock()
	cmd := p.cmd
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
}

// dump makes a Go process print its goroutines (SIGQUIT) into its log, for
// a failing test's output; the process exits.
func (p *proc) dump() {
	p.mu.Lock()
	cmd := p.cmd
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGQUIT)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (p *proc) stop() error {
	p.mu.Lock()
	cmd := p.cmd
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
		return fmt.Errorf("%s did not stop within 30s", p.name)
	}
}

// cluster is an in-test etcd (not a fault target here) and bookie
// processes.
type cluster struct {
	t       *testing.T
	etcd    *metastore.Embedded
	store   *metastore.Store
	bookies []*proc
}

func newCluster(t *testing.T, bookies int) *cluster {
	e := testutil.StartEtcd(t)
	c := &cluster{t: t, etcd: e, store: testutil.OpenStore(t, e.Endpoints(), "/magnetar")}
	for i := 0; i < bookies; i++ {
		id := fmt.Sprintf("bookie-%d", i)
		p := startProc(t, id, "bookie",
			"--id", id,
			"--listen", "127.0.0.1:0",
			"--data-dir", filepath.Join(t.TempDir(), id),
			"--metastore", e.Endpoints()[0],
			"--session-ttl", "3s",
			"--registration-interval", "500ms",
			"--log-level", "warn")
		c.bookies = append(c.bookies, p)
		c.waitRegistered(id, 0)
	}
	return c
}

// registration returns the lease of the bookie's registration, 0 if none.
func (c *cluster) registration(id string) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	kv, err := c.store.Get(ctx, metastore.BookieAvailableKey(id))
	if err != nil {
		return 0
	}
	return kv.Lease
}

// waitRegistered waits until the bookie registers on a lease other than
// notLease (a previous incarnation's).
func (c *cluster) waitRegistered(id string, notLease int64) {
	c.t.Helper()
	testutil.Eventually(c.t, time.Minute, "bookie "+id+" to register", func() bool {
		l := c.registration(id)
		return l != 0 && l != notLease
	})
}

func (c *cluster) bookie(id string) *proc {
	for _, b := range c.bookies {
		if b.name == id {
			return b
		}
	}
	c.t.Fatalf("no bookie %s", id)
	return nil
}

// restart starts a killed bookie again on its data directory.
func (c *cluster) restart(b *proc) {
	c.t.Helper()
	old := c.registration(b.name)
	b.start()
	c.waitRegistered(b.name, old)
}

func payloadOf(n int64) []byte {
	return append([]byte(fmt.Sprintf("value-%08d-", n)), bytes.Repeat([]byte{'x'}, int(n%100))...)
}
