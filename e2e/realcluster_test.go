package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/collectors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/magnetar-io/magnetar/internal/testutil"
	"github.com/magnetar-io/magnetar/metastore"
)

// realCluster is the fault suite's cluster: 3 etcd members, 4 bookies and 3
// brokers, each a process on its own 127.0.0.x address (etcd on .11-.13,
// brokers on .21-.23, bookies on .31-.34). Every link from a broker to an
// etcd member and to a bookie goes through its own toxiproxy, so that a
// chosen pair can be cut, slowed or reset. Ledgers are written with
// ensemble 3, write quorum 3 and ack quorum 2; deduplication is on.
type realCluster struct {
	t       *testing.T
	opts    clusterOptions
	ttl     time.Duration // broker and bookie session TTL
	etcd    []*etcdMember
	bookies []*bookieNode
	brokers []*brokerNode
	store   *metastore.Store // the test's own, direct view of etcd
	proxies *toxiproxy.ApiServer
	sec     *security // nil unless opts.secure
}

type etcdMember struct {
	name      string
	clientURL string
	p         *proc
}

type bookieNode struct {
	id, addr string
	dataDir  string
	memFS    bool // runs with --simulate-power-loss
	p        *proc
}

type brokerNode struct {
	name, addr, http string
	p                *proc
	etcdLinks        []*toxiproxy.Proxy // one per etcd member
	bookieLinks      []*toxiproxy.Proxy // one per bookie
}

// clusterOptions vary the cluster per scenario.
type clusterOptions struct {
	// powerLossBookies run on the simulated power-loss filesystem: they
	// must be ended by powerLoss or stop, never by kill (that would lose
	// their whole data directory).
	powerLossBookies int
	// bookies, brokers and etcd members to start (default 4, 3, 3).
	bookies, brokers, etcdMembers int
	// bookieArgs are added to every bookie's command line; brokerArgs to
	// every broker's (after the defaults: a flag given twice takes the
	// later value).
	bookieArgs, brokerArgs []string
	// bookieDataDir, if set, gives the data directory of the i-th bookie
	// started with the cluster.
	bookieDataDir func(i int) string
	// direct: brokers dial etcd and the bookies at their own addresses,
	// without a toxiproxy on each link (no network faults, less CPU).
	direct bool
	// secure: authentication, authorization and TLS on every broker and
	// bookie port (secure_test.go).
	secure bool
}

// freePortOn returns a port free on ip at the time of the call.
func freePortOn(t *testing.T, ip string) string {
	t.Helper()
	addr, err := testutil.FreePortOn(ip)
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

func newRealCluster(t *testing.T, opts clusterOptions) *realCluster {
	if opts.bookies == 0 {
		opts.bookies = 4
	}
	if opts.brokers == 0 {
		opts.brokers = 3
	}
	if opts.etcdMembers == 0 {
		opts.etcdMembers = 3
	}
	c := &realCluster{t: t, opts: opts, ttl: 3 * time.Second}
	if opts.secure {
		c.sec = newSecurity(t)
	}
	c.startEtcd()
	c.store = testutil.OpenStore(t, c.etcdEndpoints(), "/magnetar")
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	srv.Metrics.ProxyMetrics = collectors.NewProxyMetricCollectors()
	c.proxies = srv
	for i := 0; i < opts.bookies; i++ {
		c.startBookie(i, i < opts.powerLossBookies)
	}
	for i := 0; i < opts.brokers; i++ {
		c.startBroker(i)
	}
	for _, b := range c.brokers {
		c.waitBrokerUp(b)
	}
	if c.sec != nil {
		c.grantApp()
	}
	return c
}

func (c *realCluster) etcdEndpoints() []string {
	var out []string
	for _, m := range c.etcd {
		out = append(out, m.clientURL)
	}
	return out
}

// startEtcd runs a 3-member etcd cluster and waits until it has a leader.
func (c *realCluster) startEtcd() {
	type member struct{ name, client, peer string }
	var ms []member
	var initial []string
	for i := 0; i < c.opts.etcdMembers; i++ {
		ip := fmt.Sprintf("127.0.0.%d", 11+i)
		m := member{fmt.Sprintf("etcd-%d", i), "http://" + freePortOn(c.t, ip), "http://" + freePortOn(c.t, ip)}
		ms = append(ms, m)
		initial = append(initial, m.name+"="+m.peer)
	}
	for _, m := range ms {
		p := startBinary(c.t, etcdBinary, m.name,
			"--name", m.name,
			"--data-dir", filepath.Join(c.t.TempDir(), m.name),
			"--listen-client-urls", m.client, "--advertise-client-urls", m.client,
			"--listen-peer-urls", m.peer, "--initial-advertise-peer-urls", m.peer,
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-state", "new", "--initial-cluster-token", "magnetar-e2e",
			"--heartbeat-interval", "100", "--election-timeout", "1000",
			"--log-level", "warn")
		c.etcd = append(c.etcd, &etcdMember{name: m.name, clientURL: m.client, p: p})
	}
	for _, m := range c.etcd {
		c.waitEtcdMember(m)
	}
}

// waitEtcdMember waits until the member answers a status request and
// knows a leader.
func (c *realCluster) waitEtcdMember(m *etcdMember) {
	c.t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.clientURL}, DialTimeout: 2 * time.Second})
	if err != nil {
		c.t.Fatal(err)
	}
	defer cli.Close()
	testutil.Eventually(c.t, time.Minute, m.name+" to be healthy", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		st, err := cli.Status(ctx, m.clientURL)
		return err == nil && st.Leader != 0
	})
}

// proxy starts a toxiproxy in front of upstream.
func (c *realCluster) proxy(name, upstream string) *toxiproxy.Proxy {
	c.t.Helper()
	p := toxiproxy.NewProxy(c.proxies, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(p.Stop)
	return p
}

func (c *realCluster) startBookie(i int, powerLoss bool, extra ...string) *bookieNode {
	dir := ""
	if c.opts.bookieDataDir != nil {
		dir = c.opts.bookieDataDir(i)
	}
	return c.startBookieIn(i, dir, powerLoss, extra...)
}

// startBookieIn starts the i-th bookie on dataDir ("": a new temporary
// directory).
func (c *realCluster) startBookieIn(i int, dataDir string, powerLoss bool, extra ...string) *bookieNode {
	b := &bookieNode{id: fmt.Sprintf("bookie-%d", i), addr: freePortOn(c.t, fmt.Sprintf("127.0.0.%d", 31+i)), memFS: powerLoss, dataDir: dataDir}
	if b.dataDir == "" {
		b.dataDir = filepath.Join(c.t.TempDir(), b.id)
	}
	args := []string{"bookie",
		"--id", b.id,
		"--listen", b.addr,
		"--data-dir", b.dataDir,
		"--metastore", strings.Join(c.etcdEndpoints(), ","),
		"--session-ttl", c.ttl.String(),
		"--registration-interval", "500ms",
		"--log-level", "warn"}
	if powerLoss {
		args = append(args, "--simulate-power-loss")
	}
	if c.sec != nil {
		args = append(args, c.sec.bookieArgs(b.id, b.addr)...)
	}
	args = append(append(args, c.opts.bookieArgs...), extra...)
	b.p = startProc(c.t, b.id, args...)
	c.bookies = append(c.bookies, b)
	c.waitBookie(b, 0)
	return b
}

// addBookie starts a fresh bookie (a new id and an empty data directory)
// and waits for its registration.
func (c *realCluster) addBookie(extra ...string) *bookieNode {
	c.t.Helper()
	return c.startBookie(len(c.bookies), false, extra...)
}

// bookieLease is the lease of the bookie's registration, 0 if none.
func (c *realCluster) bookieLease(b *bookieNode) int64 {
	return c.lease(metastore.BookieAvailableKey(b.id))
}

// lease is the lease a key is bound to, 0 if the key does not exist.
func (c *realCluster) lease(key string) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	kv, err := c.store.Get(ctx, key)
	if err != nil {
		return 0
	}
	return kv.Lease
}

// waitBookie waits until the bookie registers on a lease other than
// notLease.
func (c *realCluster) waitBookie(b *bookieNode, notLease int64) {
	c.t.Helper()
	testutil.Eventually(c.t, time.Minute, b.id+" to register", func() bool {
		l := c.bookieLease(b)
		return l != 0 && l != notLease
	})
}

func (c *realCluster) startBroker(i int) {
	ip := fmt.Sprintf("127.0.0.%d", 21+i)
	b := &brokerNode{name: fmt.Sprintf("broker-%d", i), addr: freePortOn(c.t, ip), http: freePortOn(c.t, ip)}
	var etcd, bookies []string
	if c.opts.direct {
		etcd = c.etcdEndpoints()
	} else {
		for _, m := range c.etcd {
			p := c.proxy(b.name+"->"+m.name, strings.TrimPrefix(m.clientURL, "http://"))
			b.etcdLinks = append(b.etcdLinks, p)
			etcd = append(etcd, p.Listen)
		}
		for _, bk := range c.bookies {
			p := c.proxy(b.name+"->"+bk.id, bk.addr)
			b.bookieLinks = append(b.bookieLinks, p)
			bookies = append(bookies, bk.id+"="+p.Listen)
		}
	}
	args := []string{"broker",
		"--listen", b.addr, "--http", b.http,
		"--metastore", strings.Join(etcd, ","),
		"--session-ttl", c.ttl.String(),
		"--ensemble", "3", "--write-quorum", "3", "--ack-quorum", "2",
		"--deduplication",
		"--log-level", "warn"}
	if len(bookies) > 0 {
		args = append(args, "--bookie-addresses", strings.Join(bookies, ","))
	}
	if c.sec != nil {
		args = append(args, c.sec.brokerArgs(b.name, b.addr)...)
	}
	b.p = startProc(c.t, b.name, append(args, c.opts.brokerArgs...)...)
	c.brokers = append(c.brokers, b)
}

// brokerLease is the lease of the broker's registration, 0 if none.
func (c *realCluster) brokerLease(b *brokerNode) int64 {
	return c.lease(metastore.BrokerAvailableKey(b.addr))
}

// waitBrokerUp waits until the broker's registration is there and its
// admin API answers.
func (c *realCluster) waitBrokerUp(b *brokerNode) {
	c.t.Helper()
	testutil.Eventually(c.t, time.Minute, b.name+" to register", func() bool {
		if c.brokerLease(b) == 0 {
			return false
		}
		resp, err := c.adminDo("GET", b.http, "/admin/v2/brokers", nil)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

func (c *realCluster) brokerURL() string {
	var addrs []string
	for _, b := range c.brokers {
		addrs = append(addrs, b.addr)
	}
	if c.sec != nil {
		return "magnetar+ssl://" + strings.Join(addrs, ",")
	}
	return "magnetar://" + strings.Join(addrs, ",")
}

// createPartitionedTopic creates topic with n partitions through the admin
// API of the first broker.
func (c *realCluster) createPartitionedTopic(topic string, n int) {
	c.t.Helper()
	resp, err := c.adminDo(http.MethodPut, c.brokers[0].http, "/admin/v2/persistent/"+topic+"/partitions", bytes.NewBufferString(fmt.Sprint(n)))
	if err != nil {
		c.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		c.t.Fatalf("create %s with %d partitions: %s", topic, n, resp.Status)
	}
}

// createPartitionedTopic creates topic with n partitions through the admin
// API at adminAddr.
func createPartitionedTopic(t *testing.T, adminAddr, topic string, n int) {
	t.Helper()
	adminOK(t, adminAddr, http.MethodPut, "/admin/v2/persistent/"+topic+"/partitions", fmt.Sprint(n))
}

// Network faults on one link. A cut holds everything both ways until it
// heals, connections left open: a partition as TCP sees it (segments are
// retransmitted until they get through, nothing in a stream is lost; a
// toxic that dropped bytes would corrupt the streams instead). It is an
// hour of latency, which toxiproxy lets through at once when removed.
// Resets close every connection at once; latency delays each chunk.
func cut(p *toxiproxy.Proxy) error {
	return slow(p, time.Hour, 0)
}

func resetPeers(p *toxiproxy.Proxy) error {
	return addToxics(p, `"type":"reset_peer","attributes":{"timeout":0}`)
}

func slow(p *toxiproxy.Proxy, latency, jitter time.Duration) error {
	return addToxics(p, fmt.Sprintf(`"type":"latency","attributes":{"latency":%d,"jitter":%d}`, latency.Milliseconds(), jitter.Milliseconds()))
}

func addToxics(p *toxiproxy.Proxy, spec string) error {
	for _, dir := range []string{"upstream", "downstream"} {
		body := fmt.Sprintf(`{"name":"%s-%d","stream":"%s","toxicity":1,%s}`, dir, time.Now().UnixNano(), dir, spec)
		if _, err := p.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
			return fmt.Errorf("toxic on %s: %w", p.Name, err)
		}
	}
	return nil
}

// heal removes every toxic of the links.
func heal(links ...*toxiproxy.Proxy) {
	for _, p := range links {
		p.Toxics.ResetToxics(context.Background())
	}
}

// powerLoss makes a --simulate-power-loss bookie lose its unsynced writes
// and exit.
func (b *bookieNode) powerLoss() {
	b.p.mu.Lock()
	cmd := b.p.cmd
	b.p.cmd = nil
	b.p.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGUSR1)
	cmd.Wait()
}
