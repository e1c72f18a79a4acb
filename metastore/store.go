package metastore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Revision expectations for conditional writes.
const (
	// AnyVersion: write whatever the key's current revision.
	AnyVersion int64 = -1
	// MustNotExist: the key must be absent.
	MustNotExist int64 = 0
)

// DefaultRoot is the root prefix used when Config.Root is empty.
const DefaultRoot = "/magnetar"

// Config says how to reach etcd.
type Config struct {
	// Endpoints of the etcd cluster, host:port or URLs.
	Endpoints []string `mapstructure:"endpoints" yaml:"endpoints"`
	// Root prefix of every key; several clusters can share one etcd under
	// different roots. Default "/magnetar".
	Root string `mapstructure:"root" yaml:"root"`
	// DialTimeout bounds the first connection. Default 5s.
	DialTimeout time.Duration `mapstructure:"dial-timeout" yaml:"dial-timeout"`
	// Credentials: etcd's TLS and authentication. Default none.
	Credentials
}

// Validate checks the configuration and fills defaults.
func (c *Config) Validate() error {
	if len(c.Endpoints) == 0 {
		return errors.New("metastore: no etcd endpoints given")
	}
	for _, e := range c.Endpoints {
		if strings.TrimSpace(e) == "" {
			return errors.New("metastore: empty etcd endpoint")
		}
	}
	if err := c.Credentials.validate(); err != nil {
		return err
	}
	if c.Root == "" {
		c.Root = DefaultRoot
	}
	if !strings.HasPrefix(c.Root, "/") {
		return fmt.Errorf("metastore: root %q must start with /", c.Root)
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 5 * time.Second
	}
	if c.DialTimeout < 0 {
		return fmt.Errorf("metastore: negative dial timeout %v", c.DialTimeout)
	}
	return nil
}

// KV is one key with its value and revisions. Key is relative to the root.
type KV struct {
	Key            string
	Value          []byte
	CreateRevision int64
	ModRevision    int64
	Version        int64
	Lease          int64
}

// Store is a typed client of etcd under one root prefix. It is safe for
// concurrent use.
type Store struct {
	cli        *clientv3.Client
	root       string // with a trailing "/"
	ownsClient bool
}

// Open connects to etcd and checks that it answers.
func Open(ctx context.Context, cfg Config, log *zap.Logger) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	ccfg := clientv3.Config{
		Endpoints:   cfg.Endpoints,
		DialTimeout: cfg.DialTimeout,
		Logger:      log.Named("etcd-client").WithOptions(zap.IncreaseLevel(zap.WarnLevel)),
		// Keep the connection alive so that a dead etcd is noticed.
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
	}
	if err := cfg.Credentials.apply(&ccfg, log); err != nil {
		return nil, err
	}
	hint := ""
	if ccfg.TLS != nil {
		hint = " over TLS (is etcd's certificate from the authorities of --metastore-tls-trust-certs-file, and does etcd accept the client certificate?)"
	}
	cli, err := clientv3.New(ccfg)
	if err != nil {
		return nil, fmt.Errorf("metastore: connect to %v%s: %w", cfg.Endpoints, hint, err)
	}
	s := NewWithClient(cli, cfg.Root)
	s.ownsClient = true
	// A cheap linearizable read proves etcd is reachable and has a leader.
	pctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	if _, err := cli.Get(pctx, s.root+"ping", clientv3.WithCountOnly()); err != nil {
		cli.Close()
		return nil, fmt.Errorf("metastore: etcd at %v does not answer%s: %w", cfg.Endpoints, hint, err)
	}
	return s, nil
}

// NewWithClient wraps an existing etcd client; Close does not close it.
func NewWithClient(cli *clientv3.Client, root string) *Store {
	if root == "" {
		root = DefaultRoot
	}
	return &Store{cli: cli, root: strings.TrimSuffix(root, "/") + "/"}
}

// Client returns the underlying etcd client.
func (s *Store) Client() *clientv3.Client { return s.cli }

// Root returns the root prefix, with a trailing slash.
func (s *Store) Root() string { return s.root }

// Close closes the etcd client if the store opened it.
func (s *Store) Close() error {
	if s.ownsClient {
		return s.cli.Close()
	}
	return nil
}

func (s *Store) full(key string) string { return s.root + key }

func (s *Store) kv(k *mvccpb.KeyValue) KV {
	return KV{
		Key:            strings.TrimPrefix(string(k.Key), s.root),
		Value:          k.Value,
		CreateRevision: k.CreateRevision,
		ModRevision:    k.ModRevision,
		Version:        k.Version,
		Lease:          k.Lease,
	}
}

// Get returns a key, or ErrNotFound.
func (s *Store) Get(ctx context.Context, key string) (KV, error) {
	resp, err := s.cli.Get(ctx, s.full(key))
	if err != nil {
		return KV{}, fmt.Errorf("metastore: get %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return KV{}, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return s.kv(resp.Kvs[0]), nil
}

// PutOption modifies a put.
type PutOption func(*putOptions)

type putOptions struct{ lease clientv3.LeaseID }

// WithLease binds the key to a lease (a Session's): the key disappears when
// the lease does.
func WithLease(lease clientv3.LeaseID) PutOption {
	return func(o *putOptions) { o.lease = lease }
}

// Put writes a key unconditionally and returns the new revision.
func (s *Store) Put(ctx context.Context, key string, value []byte, opts ...PutOption) (int64, error) {
	return s.Commit(ctx, nil, PutOp(key, value, AnyVersion, opts...))
}

// Create writes a key that must not exist yet; ErrBadVersion if it does.
func (s *Store) Create(ctx context.Context, key string, value []byte, opts ...PutOption) (int64, error) {
	return s.Commit(ctx, nil, PutOp(key, value, MustNotExist, opts...))
}

// CompareAndSwap writes a key whose mod revision must be modRev
// (MustNotExist: the key must be absent); ErrBadVersion otherwise.
func (s *Store) CompareAndSwap(ctx context.Context, key string, value []byte, modRev int64, opts ...PutOption) (int64, error) {
	return s.Commit(ctx, nil, PutOp(key, value, modRev, opts...))
}

// Delete removes a key; deleting an absent key is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	_, err := s.Commit(ctx, nil, DeleteOp(key, AnyVersion))
	return err
}

// CompareAndDelete removes a key whose mod revision must be modRev.
func (s *Store) CompareAndDelete(ctx context.Context, key string, modRev int64) error {
	_, err := s.Commit(ctx, nil, DeleteOp(key, modRev))
	return err
}

// NextID returns a cluster-wide unique id, greater than every id NextID
// returned before under any name: the etcd revision of a write to
// idgen/<name>. Ids are not dense.
func (s *Store) NextID(ctx context.Context, name string) (int64, error) {
	resp, err := s.cli.Put(ctx, s.full(idgenPrefix+name), "")
	if err != nil {
		return 0, fmt.Errorf("metastore: next id %s: %w", name, err)
	}
	return resp.Header.Revision, nil
}

// ListOptions page a List.
type ListOptions struct {
	// StartAfter lists keys strictly after this one (relative key); empty
	// starts at the beginning of the prefix.
	StartAfter string
	// Limit is the page size; 0 means 1000.
	Limit int
	// KeysOnly leaves values out.
	KeysOnly bool
}

// List returns up to Limit keys under prefix in key order, and whether more
// follow (continue with StartAfter set to the last key returned).
func (s *Store) List(ctx context.Context, prefix string, opt ListOptions) ([]KV, bool, error) {
	limit := opt.Limit
	if limit <= 0 {
		limit = 1000
	}
	full := s.full(prefix)
	start := full
	if opt.StartAfter != "" {
		if !strings.HasPrefix(opt.StartAfter, prefix) {
			return nil, false, fmt.Errorf("metastore: list %s: start key %q outside the prefix", prefix, opt.StartAfter)
		}
		start = s.full(opt.StartAfter) + "\x00"
	}
	ops := []clientv3.OpOption{
		clientv3.WithRange(clientv3.GetPrefixRangeEnd(full)),
		clientv3.WithLimit(int64(limit)),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend),
	}
	if opt.KeysOnly {
		ops = append(ops, clientv3.WithKeysOnly())
	}
	resp, err := s.cli.Get(ctx, start, ops...)
	if err != nil {
		return nil, false, fmt.Errorf("metastore: list %s: %w", prefix, err)
	}
	out := make([]KV, 0, len(resp.Kvs))
	for _, k := range resp.Kvs {
		out = append(out, s.kv(k))
	}
	return out, resp.More, nil
}

// ListAll calls fn for every key under prefix in key order, a page at a
// time, and stops at fn's first error.
func (s *Store) ListAll(ctx context.Context, prefix string, opt ListOptions, fn func(KV) error) error {
	for {
		page, more, err := s.List(ctx, prefix, opt)
		if err != nil {
			return err
		}
		for _, kv := range page {
			if err := fn(kv); err != nil {
				return err
			}
		}
		if !more || len(page) == 0 {
			return nil
		}
		opt.StartAfter = page[len(page)-1].Key
	}
}

// Op is one write of a transaction made by PutOp or DeleteOp.
type Op struct {
	key       string
	value     []byte
	delete    bool
	check     bool // compare only
	expectRev int64
	lease     clientv3.LeaseID
}

// PutOp writes key if its mod revision is expectRev (AnyVersion: always;
// MustNotExist: only if absent).
func PutOp(key string, value []byte, expectRev int64, opts ...PutOption) Op {
	var po putOptions
	for _, o := range opts {
		o(&po)
	}
	return Op{key: key, value: value, expectRev: expectRev, lease: po.lease}
}

// CheckOp writes nothing: the transaction applies only if key's mod
// revision is expectRev (MustNotExist: key absent).
func CheckOp(key string, expectRev int64) Op {
	return Op{key: key, check: true, expectRev: expectRev}
}

// DeleteOp deletes key if its mod revision is expectRev (AnyVersion: always).
func DeleteOp(key string, expectRev int64) Op {
	return Op{key: key, delete: true, expectRev: expectRev}
}

// Guard is an ownership token: the create revision of an owner key, which
// changes whenever the key is deleted and created again. A transaction
// guarded by it applies only while the owner key still has that create
// revision.
type Guard struct {
	Key   string
	Token int64
}

// Commit applies all ops atomically, or none of them. When guard is not nil
// the owner key's create revision must equal the token. It returns the
// revision of the transaction; on failure ErrNotOwner (the guard failed,
// checked first) or ErrBadVersion naming the first key whose revision was
// not the expected one.
func (s *Store) Commit(ctx context.Context, guard *Guard, ops ...Op) (int64, error) {
	var cmps []clientv3.Cmp
	if guard != nil {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(s.full(guard.Key)), "=", guard.Token))
	}
	thens := make([]clientv3.Op, 0, len(ops))
	for _, op := range ops {
		if op.expectRev != AnyVersion {
			if op.expectRev < 0 {
				return 0, fmt.Errorf("metastore: invalid expected revision %d for %s", op.expectRev, op.key)
			}
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.full(op.key)), "=", op.expectRev))
		}
		if op.check {
			continue
		}
		if op.delete {
			thens = append(thens, clientv3.OpDelete(s.full(op.key)))
		} else {
			var po []clientv3.OpOption
			if op.lease != clientv3.NoLease {
				po = append(po, clientv3.WithLease(op.lease))
			}
			thens = append(thens, clientv3.OpPut(s.full(op.key), string(op.value), po...))
		}
	}
	if len(cmps) == 0 {
		// Unconditional: no need to diagnose a failure.
		resp, err := s.cli.Txn(ctx).Then(thens...).Commit()
		if err != nil {
			return 0, fmt.Errorf("metastore: commit: %w", err)
		}
		return resp.Header.Revision, nil
	}
	// On failure read back what the compares looked at, in the same
	// transaction, to say which one failed.
	var elses []clientv3.Op
	if guard != nil {
		elses = append(elses, clientv3.OpGet(s.full(guard.Key), clientv3.WithKeysOnly()))
	}
	for _, op := range ops {
		if op.expectRev != AnyVersion {
			elses = append(elses, clientv3.OpGet(s.full(op.key), clientv3.WithKeysOnly()))
		}
	}
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(thens...).Else(elses...).Commit()
	if err != nil {
		return 0, fmt.Errorf("metastore: commit: %w", err)
	}
	if resp.Succeeded {
		return resp.Header.Revision, nil
	}
	i := 0
	if guard != nil {
		got := resp.Responses[0].GetResponseRange().GetKvs()
		if len(got) == 0 || got[0].CreateRevision != guard.Token {
			return 0, fmt.Errorf("%w: owner key %s (token %d)", ErrNotOwner, guard.Key, guard.Token)
		}
		i = 1
	}
	for _, op := range ops {
		if op.expectRev == AnyVersion {
			continue
		}
		var rev int64
		if kvs := resp.Responses[i].GetResponseRange().GetKvs(); len(kvs) > 0 {
			rev = kvs[0].ModRevision
		}
		i++
		if rev != op.expectRev {
			if op.expectRev == MustNotExist {
				return 0, fmt.Errorf("%w: %s already exists", ErrBadVersion, op.key)
			}
			if rev == 0 {
				return 0, fmt.Errorf("%w: %s does not exist (expected revision %d)", ErrBadVersion, op.key, op.expectRev)
			}
			return 0, fmt.Errorf("%w: %s is at revision %d, expected %d", ErrBadVersion, op.key, rev, op.expectRev)
		}
	}
	// Every compare held when read back, which one transaction cannot
	// produce; report a failure rather than pretend success.
	return 0, fmt.Errorf("%w: transaction failed", ErrBadVersion)
}

// EventType says what happened to a watched key.
type EventType int

const (
	EventPut EventType = iota + 1
	EventDelete
)

// Event is one change seen by a watch.
type Event struct {
	Type EventType
	KV   KV // for deletes, only Key and ModRevision are set
}

// WatchBatch is what a watch delivers: the events of one or more
// revisions, or a terminal error (after which the channel is closed).
type WatchBatch struct {
	Events   []Event
	Revision int64
	Err      error
}

// Watch streams changes under prefix from revision fromRev (0: from now).
// The channel is closed when ctx ends or after a batch carrying Err (for
// example when fromRev was compacted away: restart from a fresh List).
func (s *Store) Watch(ctx context.Context, prefix string, fromRev int64) <-chan WatchBatch {
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if fromRev > 0 {
		opts = append(opts, clientv3.WithRev(fromRev))
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	in := s.cli.Watch(wctx, s.full(prefix), opts...)
	out := make(chan WatchBatch)
	go func() {
		defer close(out)
		defer cancel()
		for resp := range in {
			b := WatchBatch{Revision: resp.Header.Revision}
			if err := resp.Err(); err != nil {
				b.Err = fmt.Errorf("metastore: watch %s: %w", prefix, err)
			}
			for _, ev := range resp.Events {
				e := Event{Type: EventPut, KV: s.kv(ev.Kv)}
				if ev.Type == mvccpb.DELETE {
					e.Type = EventDelete
				}
				b.Events = append(b.Events, e)
			}
			select {
			case out <- b:
			case <-ctx.Done():
				return
			}
			if b.Err != nil {
				return
			}
		}
	}()
	return out
}
