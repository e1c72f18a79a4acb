package ledger

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/bookie/wire"
	"github.com/magnetar-io/magnetar/internal/latency"
	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/bookiepb"
	"github.com/magnetar-io/magnetar/proto/metapb"
)

// Config tunes a Client. Zero values take the defaults noted.
type Config struct {
	// AddTimeout: a bookie that does not acknowledge an add within it is
	// replaced. Default 5s.
	AddTimeout time.Duration
	// ReadTimeout bounds one read from one bookie. Default 5s.
	ReadTimeout time.Duration
	// SpeculativeReadTimeout: when a bookie has not answered a read by
	// then, the next replica is asked too. Default 200ms.
	SpeculativeReadTimeout time.Duration
	// ExplicitLACInterval: an idle writer sends its last add confirmed to
	// the ensemble this often, so that readers see the last entries.
	// Default 1s; negative disables.
	ExplicitLACInterval time.Duration
	// EnsembleChangeTimeout: how long a writer keeps looking for
	// replacement bookies before failing its pending appends. Default 30s.
	EnsembleChangeTimeout time.Duration
	// CloseAnswerWait: how long Close waits, once every entry completed
	// (with Qa acks), for the answers the other bookies of the ensemble
	// still owe. One that fails an entry, or has not answered by then, is
	// marked under-replicated in the close: it may lack entries. Default
	// 1s, or AddTimeout if that is shorter.
	CloseAnswerWait time.Duration
	// MaxEntrySize caps one entry. Default 5 MiB (the bookies' default).
	MaxEntrySize int
	// MaxPendingBytes and MaxPendingEntries bound what a writer has in
	// flight; appends wait for room. Defaults 64 MiB and 4096 entries.
	MaxPendingBytes   int64
	MaxPendingEntries int
	// AddressOverrides maps bookie ids to addresses dialed instead of the
	// registered ones: a bookie seen through a NAT or a proxy (the e2e
	// suite puts fault-injecting proxies there).
	AddressOverrides map[string]string
	// WriterLease returns the etcd lease of the writing process's session;
	// it is recorded in each ledger this client creates, so that
	// autorecovery can tell a live writer from a gone one. Nil or 0:
	// unknown (autorecovery then leaves an open ledger's last segment to
	// its writer until the ledger is closed).
	WriterLease func() int64
	// DialOptions are added to the bookie connections' own: TLS and
	// credentials (internal/auth.Peer). Default plaintext, none. They must
	// not force another codec: the add streams send messages only the
	// client's own codec encodes (addBatch).
	DialOptions []grpc.DialOption
	// LocalBookies returns the bookie of this process with the given id,
	// or nil: adds to it are handed over by a function call, not gRPC
	// (LocalBookie). Nil: every bookie is reached over gRPC.
	LocalBookies func(id string) LocalBookie
	// Logger; nil discards.
	Logger *zap.Logger
}

func (c *Config) fill() error {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.AddTimeout, 5*time.Second)
	def(&c.ReadTimeout, 5*time.Second)
	def(&c.SpeculativeReadTimeout, 200*time.Millisecond)
	def(&c.ExplicitLACInterval, time.Second)
	def(&c.EnsembleChangeTimeout, 30*time.Second)
	def(&c.CloseAnswerWait, min(time.Second, c.AddTimeout))
	if c.MaxEntrySize == 0 {
		c.MaxEntrySize = 5 << 20
	}
	if c.MaxPendingBytes == 0 {
		c.MaxPendingBytes = 64 << 20
	}
	if c.MaxPendingEntries == 0 {
		c.MaxPendingEntries = 4096
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.AddTimeout < 0 || c.ReadTimeout < 0 || c.SpeculativeReadTimeout < 0 || c.EnsembleChangeTimeout < 0 || c.MaxEntrySize < 0 || c.MaxPendingBytes < int64(c.MaxEntrySize) || c.MaxPendingEntries < 1 {
		return fmt.Errorf("%w: negative timeout or size in ledger client config (or pending bytes below the entry size)", ErrInvalidArgument)
	}
	return nil
}

// Client creates, writes, reads, recovers and deletes ledgers. It is safe
// for concurrent use; one per process is enough.
type Client struct {
	cfg   Config
	store *metastore.Store
	log   *zap.Logger
	// adds: each add's latency per bookie, from its taking by the
	// bookie's stream to its answer, timeout or the stream's failure;
	// reads: each read's, from its call to its answer (Metrics).
	adds, reads *latency.Vec

	mu struct {
		sync.Mutex
		conns   map[string]*grpc.ClientConn // by address
		addrs   map[string]string           // bookie id -> address
		streams map[string]*addStream       // by bookie id
		rng     *mrand.Rand
		closed  bool
	}

	// retired caches the bookies being decommissioned (or done) and those
	// autorecovery declared lost, for every writer of the client: read
	// from the metastore at most once per retiredTTL, by one caller at a
	// time; the others use the last set meanwhile (never waiting: a
	// writer closing while etcd is gone must not queue behind a read).
	retired struct {
		sync.Mutex
		at         time.Time
		set        map[string]bool // shared: never modified once stored
		refreshing bool
	}
}

// retiredTTL: how long the retired bookies read are used.
const retiredTTL = time.Second

// retiredBookies returns the bookies with a decommission record
// (bookies/drain/) or declared lost (bookies/lost/). The map is shared:
// callers must not modify it.
func (c *Client) retiredBookies(ctx context.Context) (map[string]bool, error) {
	c.retired.Lock()
	if c.retired.refreshing || (c.retired.set != nil && time.Since(c.retired.at) < retiredTTL) {
		set := c.retired.set
		c.retired.Unlock()
		return set, nil
	}
	c.retired.refreshing = true
	c.retired.Unlock()
	set := map[string]bool{}
	var err error
	for _, prefix := range []string{metastore.BookieDrainPrefix, metastore.BookieLostPrefix} {
		if err = c.store.ListAll(ctx, prefix, metastore.ListOptions{KeysOnly: true}, func(kv metastore.KV) error {
			set[strings.TrimPrefix(kv.Key, prefix)] = true
			return nil
		}); err != nil {
			break
		}
	}
	c.retired.Lock()
	defer c.retired.Unlock()
	c.retired.refreshing = false
	if err != nil {
		return nil, err
	}
	c.retired.set, c.retired.at = set, time.Now()
	return set, nil
}

// New returns a client using store for metadata and the bookie registry.
func New(store *metastore.Store, cfg Config) (*Client, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, store: store, log: cfg.Logger,
		adds: latency.NewVec(time.Now, "bookkeeper_client_per_channel_bookie_client_ADD_ENTRY",
			"Adds to each bookie, from the writer's send to the bookie's answer (or the add's timeout, or its stream's failure), milliseconds.", "bookie"),
		reads: latency.NewVec(time.Now, "bookkeeper_client_per_channel_bookie_client_READ_ENTRY",
			"Reads of one entry from each bookie, from the call to the answer (or its timeout), milliseconds; a read still out when another replica answered is a failure, timed until then.", "bookie")}
	c.mu.conns = make(map[string]*grpc.ClientConn)
	c.mu.addrs = make(map[string]string)
	c.mu.streams = make(map[string]*addStream)
	c.mu.rng = mrand.New(mrand.NewPCG(mrand.Uint64(), mrand.Uint64()))
	return c, nil
}

// Metrics returns the client's Prometheus collector: summaries of the
// latency of its adds and reads per bookie, under BookKeeper's
// per-channel names (labels bookie and success), in milliseconds:
//
//   - bookkeeper_client_per_channel_bookie_client_ADD_ENTRY: from an add's
//     send by a writer (its queueing on the bookie's stream included) to
//     the bookie's answer; a failed one (success="false") to its refusal,
//     its timeout or its stream's failure. Adds failed by the client's
//     closing are not counted.
//   - bookkeeper_client_per_channel_bookie_client_READ_ENTRY: from a read's
//     call to the bookie's answer; a failed one to its error, its timeout
//     (ReadTimeout) or an answer that fails verification (entry id,
//     checksum); a read still out when another replica answered
//     (speculative reads) to then: a failure, with a lower bound of its
//     latency. An answer of no such entry counts as failed, as on the
//     bookie (recovery reads past the end meet it). A read its caller
//     gave up otherwise, or the client's closing ended, is not counted.
//     The time includes finding the bookie's address in the registry
//     when the client has forgotten it (after a broken stream).
//
// Where one bookie's latency is above the others', that bookie is the
// slow one; the bookie's own bookkeeper_server_*_REQUEST leave out the
// network and both sides' queues. A bookie's series stay for the
// client's life: one per bookie it wrote to or read from.
func (c *Client) Metrics() prometheus.Collector { return clientMetrics{c} }

// clientMetrics collects a client's latency summaries.
type clientMetrics struct{ c *Client }

func (m clientMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.c.adds.Describe(ch)
	m.c.reads.Describe(ch)
}

func (m clientMetrics) Collect(ch chan<- prometheus.Metric) {
	m.c.adds.Collect(ch)
	m.c.reads.Collect(ch)
}

// isClosed reports whether Close was called.
func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.closed
}

// Close closes the connections to bookies. Writers and readers made by the
// client stop working.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return nil
	}
	c.mu.closed = true
	streams, conns := c.mu.streams, c.mu.conns
	c.mu.Unlock()
	for _, s := range streams {
		s.close() // fails pending adds with ErrClosed
	}
	var errs []error
	for _, conn := range conns {
		errs = append(errs, conn.Close())
	}
	return errors.Join(errs...)
}

// bookie returns a gRPC client for the bookie with the given id. Its
// address comes from the registry (and is cached until a transport failure
// makes the caller forget it); connections are dialed lazily and shared.
func (c *Client) bookie(ctx context.Context, id string) (bookiepb.BookieClient, error) {
	cli, _, err := c.resolve(ctx, id)
	return cli, err
}

// resolve is bookie, also returning the address used.
func (c *Client) resolve(ctx context.Context, id string) (bookiepb.BookieClient, string, error) {
	c.mu.Lock()
	closed := c.mu.closed
	addr, ok := c.mu.addrs[id]
	c.mu.Unlock()
	if closed {
		return nil, "", ErrClosed
	}
	if !ok {
		kv, err := c.store.Get(ctx, metastore.BookieAvailableKey(id))
		if errors.Is(err, metastore.ErrNotFound) {
			return nil, "", fmt.Errorf("%w: bookie %s is not registered", wire.ErrUnavailable, id)
		}
		if err != nil {
			return nil, "", fmt.Errorf("%w: look up bookie %s: %v", wire.ErrUnavailable, id, err)
		}
		var info metapb.BookieInfo
		if err := proto.Unmarshal(kv.Value, &info); err != nil {
			return nil, "", fmt.Errorf("%w: registration of bookie %s is corrupt: %v", wire.ErrUnavailable, id, err)
		}
		addr = c.addressOf(id, info.Address)
		c.mu.Lock()
		c.mu.addrs[id] = addr
		c.mu.Unlock()
	}
	cli, err := c.conn(addr)
	return cli, addr, err
}

// addressOf is the address to dial bookie id at, given the one it
// registered: its override if it has one.
func (c *Client) addressOf(id, registered string) string {
	if o, ok := c.cfg.AddressOverrides[id]; ok {
		return o
	}
	if registered == "" {
		return id
	}
	return registered
}

// forget drops a bookie's cached address after it failed to answer: it may
// have restarted elsewhere.
func (c *Client) forget(id string) {
	c.mu.Lock()
	delete(c.mu.addrs, id)
	c.mu.Unlock()
}

// conn returns the shared connection to an address.
func (c *Client) conn(addr string) (bookiepb.BookieClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return nil, ErrClosed
	}
	conn := c.mu.conns[addr]
	if conn == nil {
		maxMsg := c.cfg.MaxEntrySize + 1<<20 // as the bookie: room for a batch's framing
		var err error
		opts := append([]grpc.DialOption{
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsg), grpc.MaxCallSendMsgSize(maxMsg),
				// Adds are encoded around their payloads, not copied.
				grpc.ForceCodecV2(addCodec())),
			grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}),
			// As on the bookie: batched adds make large messages.
			grpc.WithWriteBufferSize(512 << 10),
			grpc.WithReadBufferSize(512 << 10),
			grpc.WithInitialWindowSize(8 << 20),
			grpc.WithInitialConnWindowSize(8 << 20),
		}, c.cfg.DialOptions...)
		conn, err = grpc.NewClient(addr, opts...)
		if err != nil {
			return nil, fmt.Errorf("%w: dial bookie at %s: %v", wire.ErrUnavailable, addr, err)
		}
		c.mu.conns[addr] = conn
	}
	return bookiepb.NewBookieClient(conn), nil
}

// call runs one RPC to a bookie, translating its status. When the bookie
// cannot be reached its cached address is dropped, and if the registry
// then names another address (the bookie restarted elsewhere) the call is
// made once more there.
func call[T any](ctx context.Context, c *Client, id string, timeout time.Duration, fn func(context.Context, bookiepb.BookieClient) (T, error)) (T, error) {
	var zero T
	var tried string
	for attempt := 0; ; attempt++ {
		cli, addr, err := c.resolve(ctx, id)
		if err != nil {
			return zero, err
		}
		if attempt > 0 && addr == tried {
			return zero, fmt.Errorf("%w: bookie %s at %s", wire.ErrUnavailable, id, addr)
		}
		tried = addr
		cctx, cancel := context.WithTimeout(ctx, timeout)
		resp, err := fn(cctx, cli)
		cancel()
		if err == nil {
			return resp, nil
		}
		err = wire.FromStatus(err)
		if !errors.Is(err, wire.ErrUnavailable) || attempt > 0 || ctx.Err() != nil {
			return zero, err
		}
		c.forget(id)
	}
}

// CreateOptions choose a new ledger's replication.
type CreateOptions struct {
	// Ensemble (E) bookies share the ledger; each entry goes to
	// WriteQuorum (Qw) of them and is acknowledged once AckQuorum (Qa)
	// have it durably. E >= Qw >= Qa >= 1.
	Ensemble, WriteQuorum, AckQuorum int
	// Custom metadata stored with the ledger (the broker records the
	// topic here).
	Custom map[string][]byte
}

// Create makes a new ledger on E live bookies and returns its writer.
func (c *Client) Create(ctx context.Context, opts CreateOptions) (*Writer, error) {
	if err := checkQuorums(opts.Ensemble, opts.WriteQuorum, opts.AckQuorum); err != nil {
		return nil, err
	}
	bookies, err := c.pick(ctx, make([]string, opts.Ensemble), opts.WriteQuorum, nil)
	if err != nil {
		return nil, err
	}
	id, err := c.store.NextID(ctx, "ledger")
	if err != nil {
		return nil, err
	}
	key := make([]byte, 16)
	rand.Read(key)
	m := &Metadata{
		ID:          id,
		Ensemble:    opts.Ensemble,
		WriteQuorum: opts.WriteQuorum,
		AckQuorum:   opts.AckQuorum,
		State:       StateOpen,
		LastEntry:   -1,
		Segments:    []Segment{{First: 0, Bookies: bookies}},
		MasterKey:   key,
		CreatedAt:   time.Now(),
		Custom:      opts.Custom,
	}
	if c.cfg.WriterLease != nil {
		m.WriterLease = c.cfg.WriterLease()
	}
	if err := writeMetadata(ctx, c.store, m); err != nil {
		return nil, fmt.Errorf("ledger: create metadata of %d: %w", id, err)
	}
	c.log.Debug("ledger created", zap.Int64("ledger", id), zap.Strings("ensemble", bookies))
	return newWriter(c, m), nil
}

// pick fills the empty positions of ensemble with live, writable bookies
// outside exclude, following the placement rules (see pickBookies), and
// returns the whole ensemble.
func (c *Client) pick(ctx context.Context, ensemble []string, writeQuorum int, exclude []string) ([]string, error) {
	live, err := liveBookies(ctx, c.store)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range live {
		if b.Info.Address != "" {
			c.mu.addrs[b.ID] = c.addressOf(b.ID, b.Info.Address)
		}
	}
	return pickBookies(live, ensemble, writeQuorum, exclude, c.mu.rng)
}

// Bookies lists the live bookies.
func (c *Client) Bookies(ctx context.Context) ([]BookieInfo, error) {
	return liveBookies(ctx, c.store)
}

// Metadata reads a ledger's metadata.
func (c *Client) Metadata(ctx context.Context, id int64) (*Metadata, error) {
	return readMetadata(ctx, c.store, id)
}

// Delete removes a ledger's metadata (and its keys in the bookie ->
// ledgers index); bookies delete its entries in their next garbage
// collection. Deleting a missing ledger is not an error.
func (c *Client) Delete(ctx context.Context, id int64) error {
	for {
		m, err := readMetadata(ctx, c.store, id)
		if errors.Is(err, ErrNoSuchLedger) {
			return nil
		}
		if err != nil {
			if !errors.Is(err, errCorruptMetadata) {
				return fmt.Errorf("ledger: delete %d: %w", id, err)
			}
			// Corrupt metadata: delete the key alone (the periodic check
			// drops index keys of ledgers that do not exist).
			if err := c.store.Delete(ctx, metastore.LedgerKey(id)); err != nil {
				return fmt.Errorf("ledger: delete %d: %w", id, err)
			}
			return nil
		}
		ops := append([]metastore.Op{metastore.DeleteOp(metastore.LedgerKey(id), m.modRev)}, indexOps(id, m.indexed, nil)...)
		_, err = c.store.Commit(ctx, nil, ops...)
		if errors.Is(err, metastore.ErrBadVersion) {
			continue // changed meanwhile (a re-replication): read it again
		}
		if err != nil {
			return fmt.Errorf("ledger: delete %d: %w", id, err)
		}
		return nil
	}
}

// List calls fn with the id of every ledger, in increasing order.
func (c *Client) List(ctx context.Context, fn func(id int64) error) error {
	return c.store.ListAll(ctx, metastore.LedgersPrefix, metastore.ListOptions{KeysOnly: true}, func(kv metastore.KV) error {
		id, err := metastore.ParseLedgerKey(kv.Key)
		if err != nil {
			return nil
		}
		return fn(id)
	})
}

// DrainingReason is the read-only reason of a bookie being
// decommissioned (bookie.ReadOnlyDraining).
const DrainingReason = "draining"
