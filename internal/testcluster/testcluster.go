// Package testcluster runs a Magnetar storage cluster inside a test: an
// embedded etcd and bookies on 127.0.0.1, each bookie behind a TCP proxy
// (its advertised address) so that tests can kill it, cut it off or slow
// it down.
package testcluster

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/internal/testutil"
	"github.com/magnetar-io/magnetar/metastore"
)

// Cluster is an etcd and a set of bookies.
type Cluster struct {
	t     testing.TB
	Etcd  *metastore.Embedded
	Store *metastore.Store

	mu      sync.Mutex
	bookies []*Bookie
}

// Bookie is one bookie and the proxy in front of it.
type Bookie struct {
	ID    string // the advertised (proxy) address
	Dir   string
	Proxy *testutil.Proxy
	cfg   bookie.Config
	opts  []bookie.Option

	mu     sync.Mutex
	server *bookie.Server // nil while stopped
}

// Options tune a cluster.
type Options struct {
	// Configure changes each bookie's config before it starts.
	Configure func(*bookie.Config)
	// BookieOptions are passed to every bookie's Start (after the store
	// and the logger), such as bookie.WithDiskUsage.
	BookieOptions []bookie.Option
}

// Start runs etcd and n bookies, all stopped when the test ends.
func Start(t testing.TB, n int, opts Options) *Cluster {
	t.Helper()
	e := testutil.StartEtcd(t)
	c := &Cluster{t: t, Etcd: e, Store: testutil.OpenStore(t, e.Endpoints(), "/magnetar")}
	for i := 0; i < n; i++ {
		c.AddBookie(opts)
	}
	return c
}

// AddBookie starts one more bookie.
func (c *Cluster) AddBookie(opts Options) *Bookie {
	c.t.Helper()
	p := testutil.StartProxy(c.t, "")
	cfg := bookie.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.AdvertisedAddress = p.Addr()
	cfg.DataDir = c.t.TempDir()
	cfg.Metastore = c.Etcd.Endpoints()
	cfg.RegistrationInterval = 200 * time.Millisecond
	cfg.SessionTTL = 3 * time.Second
	if opts.Configure != nil {
		opts.Configure(&cfg)
	}
	b := &Bookie{ID: p.Addr(), Dir: cfg.DataDir, Proxy: p, cfg: cfg, opts: opts.BookieOptions}
	if err := b.start(c); err != nil {
		c.t.Fatalf("start bookie: %v", err)
	}
	c.t.Cleanup(func() { b.Stop() })
	c.mu.Lock()
	c.bookies = append(c.bookies, b)
	c.mu.Unlock()
	return b
}

func (b *Bookie) start(c *Cluster) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := append([]bookie.Option{bookie.WithStore(c.Store), bookie.WithLogger(zaptest.NewLogger(c.t).Named(b.ID))}, b.opts...)
	s, err := bookie.Start(ctx, b.cfg, opts...)
	if err != nil {
		return err
	}
	b.Proxy.SetTarget(s.Addr())
	b.mu.Lock()
	b.server = s
	b.mu.Unlock()
	return nil
}

// Config is the bookie's configuration.
func (b *Bookie) Config() bookie.Config { return b.cfg }

// Server is the running bookie, nil while it is stopped.
func (b *Bookie) Server() *bookie.Server {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.server
}

// Restart starts a stopped bookie again on its data directory.
func (c *Cluster) Restart(b *Bookie) {
	c.t.Helper()
	if err := b.start(c); err != nil {
		c.t.Fatalf("restart bookie %s: %v", b.ID, err)
	}
	b.Proxy.Resume()
}

// Kill cuts every connection to the bookie and stops it: to clients it
// looks like a crashed process. Its registration goes too.
func (b *Bookie) Kill() {
	b.Proxy.Pause()
	b.Proxy.CutAll()
	b.Stop()
}

// Stop stops the bookie process (cleanly).
func (b *Bookie) Stop() {
	b.mu.Lock()
	s := b.server
	b.server = nil
	b.mu.Unlock()
	if s != nil {
		s.Close()
	}
}

// Bookies returns the bookies started so far.
func (c *Cluster) Bookies() []*Bookie {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Bookie(nil), c.bookies...)
}

// Bookie returns the bookie with the given id.
func (c *Cluster) Bookie(id string) *Bookie {
	for _, b := range c.Bookies() {
		if b.ID == id {
			return b
		}
	}
	panic(fmt.Sprintf("no bookie %s", id))
}

// LocalBookies is a ledger.Config.LocalBookies over the cluster's
// bookies: the running one with that id, nil while it is stopped (or for
// an id it does not know). Adds then reach the bookies by function calls,
// around their proxies.
func (c *Cluster) LocalBookies(id string) ledger.LocalBookie {
	for _, b := range c.Bookies() {
		if b.ID == id {
			if s := b.Server(); s != nil {
				return s
			}
		}
	}
	return nil
}

// Client returns a ledger client on the cluster, closed when the test ends.
func (c *Cluster) Client(cfg ledger.Config) *ledger.Client {
	c.t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = zaptest.NewLogger(c.t).Named("ledger")
	}
	cl, err := ledger.New(c.Store, cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cl.Close() })
	return cl
}
