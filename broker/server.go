package broker

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"

	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/broker/internal/mledger"
	"github.com/magnetar-io/magnetar/internal/auth"
	"github.com/magnetar-io/magnetar/internal/bufpool"
	"github.com/magnetar-io/magnetar/internal/bytesize"
	"github.com/magnetar-io/magnetar/internal/connmux"
	"github.com/magnetar-io/magnetar/internal/health"
	"github.com/magnetar-io/magnetar/internal/ops"
	"github.com/magnetar-io/magnetar/internal/tlsutil"
	"github.com/magnetar-io/magnetar/internal/wirecodec"
	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/brokerpb"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// Option changes how Start builds a broker.
type Option func(*options)

type options struct {
	store   *metastore.Store
	logger  *zap.Logger
	health  health.Checks
	metrics prometheus.Gatherers
	local   func(id string) ledger.LocalBookie
}

// WithMetrics adds g to what the broker's /metrics serves (a standalone
// process adds its bookies').
func WithMetrics(g prometheus.Gatherer) Option {
	return func(o *options) { o.metrics = append(o.metrics, g) }
}

// WithHealthChecks adds checks to the broker's /healthz and /readyz (a
// standalone process adds its bookies').
func WithHealthChecks(c health.Checks) Option {
	return func(o *options) {
		o.health.Live = append(o.health.Live, c.Live...)
		o.health.Ready = append(o.health.Ready, c.Ready...)
	}
}

// WithLocalBookies hands the adds to the bookies of this process (a
// standalone's) by function calls instead of gRPC: local returns the one
// with an id, or nil (ledger.Config.LocalBookies).
func WithLocalBookies(local func(id string) ledger.LocalBookie) Option {
	return func(o *options) { o.local = local }
}

// WithStore shares an open metastore (standalone mode, tests).
func WithStore(s *metastore.Store) Option { return func(o *options) { o.store = s } }

// WithLogger sets the logger.
func WithLogger(l *zap.Logger) Option { return func(o *options) { o.logger = l } }

// Server is a running broker.
type Server struct {
	cfg    Config
	log    *zap.Logger
	health health.Checks // extra checks (WithHealthChecks)
	// reg holds the broker's metrics; gather serves them with the Go
	// runtime's and those added by WithMetrics.
	// auth checks clients' credentials; nil with authentication off.
	auth *auth.Verifier
	// authz decides what an authenticated role may do (authz.go).
	authz authorizer
	// tls serves the client and admin ports (nil: plaintext); peerHTTP
	// calls other brokers' admin API.
	tls       *tlsutil.Server
	peerHTTP  *http.Client
	reg       *prometheus.Registry
	gather    prometheus.Gatherers
	metrics   *brokerMetrics
	store     *metastore.Store
	ownsStore bool
	ledgers   *ledger.Client
	md        *metadata
	cache     *mledger.Cache
	// storageReads counts entries read from the bookies (cache misses).
	storageReads atomic.Int64
	// traffic counts messages in and out of every topic; load turns it
	// into the rates of the registration.
	traffic traffic
	load    loadMeter
	// balanceSeen: each partition's message count at the previous
	// balancing round (owned by balanceLoop).
	balanceSeen map[*topic]int64
	// session is the broker's etcd session: its registration and every
	// owner key live under its lease. Replaced by sessionLoop when lost.
	session  atomic.Pointer[metastore.Session]
	id       string // advertised address
	instance string // random per process: tells our previous incarnation apart

	ln net.Listener
	// mux shares ln between gRPC and Pulsar's binary protocol (nil with
	// TLS on: the port then speaks only gRPC over TLS).
	mux  *connmux.Mux
	grpc *grpc.Server
	// pulsarLn is the port of its own for Pulsar's protocol (nil without
	// Config.PulsarListen), TLS when the broker has it.
	pulsarLn net.Listener
	// pulsar tracks the connections of Pulsar's protocol (pulsar.go).
	pulsar struct {
		sync.Mutex
		conns  map[*pulsarConn]struct{}
		closed bool
		wg     sync.WaitGroup
	}
	httpLn net.Listener
	http   *http.Server
	stop   chan struct{}
	// ctx is cancelled when Close starts: the background loops' work and
	// topic loads in flight stop. hardCtx is cancelled when Close's time
	// is up: what still runs for it (unloads, closes) stops.
	ctx        context.Context
	cancel     context.CancelFunc
	hardCtx    context.Context
	hardCancel context.CancelFunc
	wg         sync.WaitGroup // the background loops and the servers
	closeMu    sync.Mutex
	closed     bool
	// persisting and retaining: the topics whose background work of that
	// kind is running (see eachTopic).
	persisting, retaining busySet

	// bg tracks short-lived background work started by events (a fenced
	// partition's unload); Close stops new work, then waits for it.
	bg struct {
		sync.Mutex
		wg     sync.WaitGroup
		closed bool
	}

	mu struct {
		sync.Mutex
		topics  map[string]*topic
		loading map[string]*loadCall
		// movedAway holds the partitions (by path) this broker unloaded
		// to balance the load, until when its lookups place them on
		// another broker: the registered counts lag, and a moved
		// partition placed back here would undo the move.
		movedAway map[string]time.Time
	}
}

type loadCall struct {
	create bool // the load may create the topic
	done   chan struct{}
	t      *topic
	err    error
}

// Start connects to the metastore, registers the broker and serves the
// client protocol and the admin API.
func Start(ctx context.Context, cfg Config, opts ...Option) (_ *Server, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.logger == nil {
		o.logger = zap.NewNop()
	}
	var inst [8]byte
	rand.Read(inst[:])
	s := &Server{cfg: cfg, log: o.logger, stop: make(chan struct{}), instance: hex.EncodeToString(inst[:]), cache: mledger.NewCache(cfg.CacheSize), health: o.health}
	if cfg.TLSCertFile != "" {
		files := tlsutil.Files{Cert: cfg.TLSCertFile, Key: cfg.TLSKeyFile, Trust: cfg.TLSTrustCertsFile}
		if s.tls, err = tlsutil.NewServer(files, cfg.TLSRequireTrustedClientCert); err != nil {
			return nil, fmt.Errorf("broker: %w", err)
		}
		// Other brokers' admin API: their certificates are signed by the
		// trusted authorities; this broker presents its own.
		tc, err := tlsutil.NewClient(files, false)
		if err != nil {
			return nil, fmt.Errorf("broker: %w", err)
		}
		s.peerHTTP = &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	}
	if s.auth, err = cfg.NewVerifier(); err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	if cfg.AuthenticationEnabled {
		if cfg.ClientAuthTokenFile == "" && cfg.TLSCertFile == "" {
			s.log.Warn("authentication is on but this broker has no credentials for other brokers' admin API (--client-auth-token-file): " +
				"requests they must answer (partitioned stats, remote unloads) will fail")
		}
	}
	s.reg = prometheus.NewRegistry()
	s.metrics = newBrokerMetrics(s.reg, cfg.ClusterName)
	s.reg.MustRegister(topicMetrics{s})
	s.gather = append(prometheus.Gatherers{s.reg, ops.RuntimeMetrics()}, o.metrics...)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.hardCtx, s.hardCancel = context.WithCancel(context.Background())
	s.persisting.m, s.retaining.m = map[*topic]bool{}, map[*topic]bool{}
	s.mu.topics = map[string]*topic{}
	s.mu.loading = map[string]*loadCall{}
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
			s.cancel()
			s.hardCancel()
		}
	}()
	s.store = o.store
	if s.store == nil {
		st, err := metastore.Open(ctx, metastore.Config{Endpoints: cfg.Metastore, Root: cfg.MetastoreRoot, Credentials: cfg.Credentials}, s.log)
		if err != nil {
			return nil, err
		}
		s.store, s.ownsStore = st, true
		undo = append(undo, func() { st.Close() })
	}
	s.md = &metadata{store: s.store, cfg: &s.cfg}
	s.authz = authorizer{on: cfg.AuthorizationEnabled, superusers: cfg.SuperuserRoles, md: s.md}
	if err := s.md.ensureDefaults(ctx); err != nil {
		return nil, fmt.Errorf("broker: create the default namespace: %w", err)
	}
	// An entry is one message (or batch) with its metadata: at most
	// MaxMessageSize, which the bookies' max-entry-size must allow.
	bookieDial, err := auth.Peer{TLS: cfg.BookieTLSEnabled, TokenFile: cfg.ClientAuthTokenFile,
		Files: tlsutil.Files{Cert: cfg.TLSCertFile, Key: cfg.TLSKeyFile, Trust: cfg.TLSTrustCertsFile}}.DialOptions()
	if err != nil {
		return nil, fmt.Errorf("broker: bookie connections: %w", err)
	}
	s.ledgers, err = ledger.New(s.store, ledger.Config{MaxEntrySize: cfg.MaxMessageSize, AddressOverrides: cfg.BookieAddresses, Logger: s.log.Named("ledger"),
		DialOptions: bookieDial, LocalBookies: o.local,
		// Ledgers record the session that writes them: when it is gone
		// (and with it the ownership of their topics), autorecovery may
		// close them to repair their last segment.
		WriterLease: func() int64 {
			if sess := s.session.Load(); sess != nil {
				return int64(sess.Lease())
			}
			return 0
		}})
	if err != nil {
		return nil, err
	}
	undo = append(undo, func() { s.ledgers.Close() })
	// The adds' and reads' latency per bookie, as this broker sees it.
	prometheus.WrapRegistererWith(prometheus.Labels{"cluster": cfg.ClusterName}, s.reg).MustRegister(s.ledgers.Metrics())

	s.ln, err = net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("broker: listen on %s: %w", cfg.Listen, err)
	}
	undo = append(undo, func() { s.ln.Close() })
	s.id = cfg.AdvertisedAddress
	if s.id == "" {
		s.id = s.ln.Addr().String()
	}
	s.log = s.log.With(zap.String("broker", s.id))
	if cfg.HTTPListen != "" {
		s.httpLn, err = net.Listen("tcp", cfg.HTTPListen)
		if err != nil {
			return nil, fmt.Errorf("broker: listen on %s: %w", cfg.HTTPListen, err)
		}
		undo = append(undo, func() { s.httpLn.Close() })
	}

	if cfg.PulsarListen != "" {
		ln, err := net.Listen("tcp", cfg.PulsarListen)
		if err != nil {
			return nil, fmt.Errorf("broker: listen on %s: %w", cfg.PulsarListen, err)
		}
		undo = append(undo, func() { ln.Close() })
		if s.tls != nil {
			ln = tls.NewListener(ln, s.tls.Config)
		}
		s.pulsarLn = ln
	}

	sess, err := s.store.NewSession(ctx, cfg.SessionTTL)
	if err != nil {
		return nil, err
	}
	s.session.Store(sess)
	undo = append(undo, func() { sess.Close() })
	if err := s.register(ctx); err != nil {
		return nil, fmt.Errorf("broker: register: %w", err)
	}

	maxMsg := cfg.MaxMessageSize + 1<<20
	gopts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxMsg), grpc.MaxSendMsgSize(maxMsg),
		grpc.ConnectionTimeout(5 * time.Second),
		grpc.WaitForHandlers(true),
		// Servers take gRPC's default pool when the grpc package
		// initializes, before bufpool.Install can run: named here.
		experimental.BufferPool(bufpool.Shared()),
		// Payloads of sends decoded into pooled buffers, handed back once
		// publish has encoded the entry (service.Produce).
		grpc.ForceServerCodecV2(wirecodec.Codec()),
		grpc.ChainUnaryInterceptor(unaryErrors, recoverUnary(s.log), s.auth.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(streamErrors, recoverStream(s.log), s.auth.StreamInterceptor()),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}
	if s.tls != nil {
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(s.tls.Config)))
	}
	s.grpc = grpc.NewServer(gopts...)
	brokerpb.RegisterBrokerServer(s.grpc, &service{s: s})
	grpcLn := s.ln
	s.pulsar.conns = map[*pulsarConn]struct{}{}
	if s.tls == nil {
		s.mux = connmux.New(s.ln, 10*time.Second)
		grpcLn = s.mux.Primary()
		s.wg.Add(2)
		go func() {
			defer s.wg.Done()
			s.mux.Serve()
		}()
		go func() {
			defer s.wg.Done()
			s.servePulsar(s.mux.Pulsar())
		}()
	}
	if s.pulsarLn != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.servePulsar(s.pulsarLn)
		}()
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.grpc.Serve(grpcLn)
	}()
	if s.httpLn != nil {
		s.http = &http.Server{Handler: s.adminHandler(), ReadHeaderTimeout: 10 * time.Second}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if s.tls != nil {
				s.http.TLSConfig = s.tls.Config
				s.http.ServeTLS(s.httpLn, "", "")
				return
			}
			s.http.Serve(s.httpLn)
		}()
	}
	s.wg.Add(7)
	go s.statsLoop()
	go s.persistLoop()
	go s.retentionLoop()
	go s.sweepLoop()
	go s.registerLoop()
	go s.sessionLoop()
	go s.balanceLoop()
	s.log.Info("broker started", zap.String("listen", s.ln.Addr().String()), zap.String("http", s.HTTPAddr()),
		zap.Stringer("cache-size", bytesize.Size(s.cfg.CacheSize)))
	return s, nil
}

// Addr is the client address the broker is bound to.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// HTTPAddr is the admin address, empty if none.
func (s *Server) HTTPAddr() string {
	if s.httpLn == nil {
		return ""
	}
	return s.httpLn.Addr().String()
}

// ID is the broker's advertised address.
func (s *Server) ID() string { return s.id }

// Config returns the configuration the server runs with.
func (s *Server) Config() Config { return s.cfg }

// Close unloads every topic (closing its ledgers cleanly, persisting its
// cursors), stops serving and releases the broker's session, in at most
// ShutdownTimeout whatever is unreachable: what is not done by then is
// abandoned (the next owners recover it) and every connection closed.
func (s *Server) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	close(s.stop)
	s.cancel()
	defer s.hardCancel()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.shutdown(ctx) }()
	select {
	case err := <-done:
		s.log.Info("broker stopped")
		return err
	case <-ctx.Done():
	}
	// Something waits on a bookie or etcd that does not answer: cut every
	// connection, which fails whatever still waits.
	s.log.Warn("shutdown did not finish in time; closing every connection", zap.Duration("shutdown-timeout", s.cfg.ShutdownTimeout))
	s.hardCancel()
	s.grpc.Stop()
	s.closePulsarConns()
	s.ledgers.Close()
	if s.ownsStore {
		s.store.Close()
	}
	err := <-done
	s.log.Info("broker stopped")
	return errors.Join(fmt.Errorf("broker: shutdown took longer than %v", s.cfg.ShutdownTimeout), err)
}

// shutdown is Close's work, bounded by ctx. Each step has a share of the
// time, so that an unreachable etcd does not leave the later steps none:
// unregistering a tenth, unloading until seven tenths, the rest for
// draining clients and releasing the session.
func (s *Server) shutdown(ctx context.Context) error {
	start, total := time.Now(), s.cfg.ShutdownTimeout
	// Unregistered first: lookups stop sending partitions here while they
	// are handed over.
	uctx, ucancel := context.WithTimeout(ctx, total/10)
	if err := s.store.Delete(uctx, metastore.BrokerAvailableKey(s.id)); err != nil {
		s.log.Warn("unregistering failed", zap.Error(err))
	}
	ucancel()
	if s.http != nil {
		s.http.Shutdown(ctx)
	}
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	sem := make(chan struct{}, closeWorkers)
	tctx, tcancel := context.WithDeadline(ctx, start.Add(total*7/10))
	defer tcancel()
	for _, t := range s.loadedTopics() {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := t.close(tctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	// Loads in flight see the broker stopping and close what they loaded.
	s.bg.Lock()
	s.bg.closed = true
	s.bg.Unlock()
	s.bg.wg.Wait()
	// Pulsar's clients were told to close their producers with the
	// topics; their connections go now.
	s.closePulsarConns()
	stopped := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
		s.grpc.Stop()
		<-stopped
	}
	s.wg.Wait()
	errs = append(errs, s.ledgers.Close(), s.session.Load().CloseContext(ctx))
	if s.ownsStore {
		errs = append(errs, s.store.Close())
	}
	return errors.Join(errs...)
}

// closeWorkers bounds the topics closed at once when the broker stops.
const closeWorkers = 32

// goBackground runs fn in a goroutine that Close waits for, unless the
// broker is closing (then fn is not run and false is returned).
func (s *Server) goBackground(fn func()) bool {
	s.bg.Lock()
	defer s.bg.Unlock()
	if s.bg.closed {
		return false
	}
	s.bg.wg.Add(1)
	go func() {
		defer s.bg.wg.Done()
		fn()
	}()
	return true
}

func (s *Server) loadedTopics() []*topic {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*topic, 0, len(s.mu.topics))
	for _, t := range s.mu.topics {
		out = append(out, t)
	}
	return out
}

// getTopic returns a loaded topic partition, loading it (once, however
// many ask at the same time) if needed. create allows creating it. The
// load runs on its own (bounded by topicLoadTimeout), not on the context
// of the caller that started it: a caller that gives up (a client's lookup
// attempt timing out) does not fail the others, and the load goes on for
// the next attempt to find.
func (s *Server) getTopic(ctx context.Context, n topicname.Name, create bool) (*topic, error) {
	path := topicPath(n)
	for {
		s.mu.Lock()
		if t := s.mu.topics[path]; t != nil && !t.isClosed() {
			s.mu.Unlock()
			return t, nil
		}
		call := s.mu.loading[path]
		if call == nil {
			if s.stopping() {
				s.mu.Unlock()
				return nil, errorf(ErrServiceNotReady, "broker is stopping")
			}
			call = &loadCall{create: create, done: make(chan struct{})}
			s.mu.loading[path] = call
			if !s.goBackground(func() { s.loadCalled(call, n) }) {
				delete(s.mu.loading, path)
				s.mu.Unlock()
				return nil, errorf(ErrServiceNotReady, "broker is stopping")
			}
		}
		s.mu.Unlock()
		select {
		case <-call.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		switch {
		case call.err == nil:
			return call.t, nil
		case create && !call.create:
			continue // that load could not create the topic: this one can
		}
		return nil, call.err
	}
}

// topicLoadTimeout bounds loading a topic partition (claiming it,
// recovering its last ledger, loading its cursors).
const topicLoadTimeout = time.Minute

// loadCalled loads a topic partition for getTopic.
func (s *Server) loadCalled(call *loadCall, n topicname.Name) {
	path := topicPath(n)
	ctx, cancel := context.WithTimeout(s.ctx, topicLoadTimeout)
	defer cancel()
	if h := testHookLoad.Load(); h != nil {
		(*h)(n)
	}
	var t *topic
	err := s.refuseMovedAway(ctx, n)
	if err == nil {
		t, err = s.loadTopic(ctx, n, call.create)
	}
	s.mu.Lock()
	delete(s.mu.loading, path)
	stopping := err == nil && s.stopping()
	if err == nil && !stopping {
		s.mu.topics[path] = t
	}
	s.mu.Unlock()
	if err == nil && !stopping {
		s.metrics.ownership.WithLabelValues("acquired").Inc()
	}
	if stopping {
		// Close has taken its list of topics: this one is closed here.
		cctx, ccancel := context.WithTimeout(s.hardCtx, s.cfg.ShutdownTimeout)
		t.close(cctx)
		ccancel()
		t, err = nil, errorf(ErrServiceNotReady, "broker is stopping")
	}
	call.t, call.err = t, err
	close(call.done)
}

// testHookLoad, when set by a test, runs at the start of every topic load.
var testHookLoad atomic.Pointer[func(topicname.Name)]

// lookupTopic returns a loaded topic without loading it.
func (s *Server) lookupTopic(n topicname.Name) *topic {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.topics[topicPath(n)]
}

// unloadTopic closes a loaded topic.
func (s *Server) unloadTopic(ctx context.Context, n topicname.Name) error {
	s.mu.Lock()
	t := s.mu.topics[topicPath(n)]
	delete(s.mu.topics, topicPath(n))
	s.mu.Unlock()
	if t == nil {
		return nil
	}
	s.metrics.ownership.WithLabelValues("released").Inc()
	return t.close(ctx)
}

func (s *Server) ownerValue() string { return s.id + "\n" + s.instance }

// claim takes ownership of a topic partition: the owner key, under the
// broker's session. A key left by this broker's previous incarnation (same
// id, another instance) is taken over: that process is gone. Safety does
// not rest on this: the ledger fencing and guarded writes stop a zombie.
func (s *Server) claim(ctx context.Context, path string) (*metastore.Guard, error) {
	key := metastore.OwnerKey(path)
	for attempt := 0; attempt < 5; attempt++ {
		rev, err := s.store.Create(ctx, key, []byte(s.ownerValue()), metastore.WithLease(s.session.Load().Lease()))
		if err == nil {
			return &metastore.Guard{Key: key, Token: rev}, nil
		}
		if !errors.Is(err, metastore.ErrBadVersion) {
			return nil, err
		}
		kv, err := s.store.Get(ctx, key)
		if errors.Is(err, metastore.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		owner, instance, _ := strings.Cut(string(kv.Value), "\n")
		if owner != s.id || instance == s.instance {
			return nil, errorf(ErrNotOwner, "%s is owned by broker %s", path, owner)
		}
		s.log.Info("taking over topics of this broker's previous run", zap.String("topic", path))
		if _, err := s.store.Client().Revoke(ctx, clientv3.LeaseID(kv.Lease)); err != nil {
			if err := s.store.CompareAndDelete(ctx, key, kv.ModRevision); err != nil && !errors.Is(err, metastore.ErrBadVersion) {
				return nil, err
			}
		}
	}
	return nil, errorf(ErrNotOwner, "could not claim %s", path)
}

// release gives up ownership of a topic partition.
func (s *Server) release(ctx context.Context, path string, g *metastore.Guard) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s.store.Commit(ctx, g, metastore.DeleteOp(g.Key, metastore.AnyVersion))
}

// backgroundWorkers bounds the topics whose background work (persisting,
// retention) runs at once.
const backgroundWorkers = 16

// Per-topic deadlines of background work.
const (
	persistTimeout = 30 * time.Second
	retainTimeout  = time.Minute
)

// busySet is the set of topics with a background task of one kind running.
type busySet struct {
	mu sync.Mutex
	m  map[*topic]bool
}

// take marks t busy; false if it already was.
func (b *busySet) take(t *topic) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m[t] {
		return false
	}
	b.m[t] = true
	return true
}

func (b *busySet) drop(t *topic) {
	b.mu.Lock()
	delete(b.m, t)
	b.mu.Unlock()
}

// eachTopic runs fn for every loaded topic on at most backgroundWorkers
// goroutines, each call under its own deadline. A topic whose previous
// call of this kind still runs (its bookies are sick, say) is skipped, so
// it holds one worker until its deadline and never delays the others'
// turn. It returns once every call has been started; the calls run on.
func (s *Server) eachTopic(busy *busySet, sem chan struct{}, deadline time.Duration, fn func(*topic, context.Context)) {
	for _, t := range s.loadedTopics() {
		if !busy.take(t) {
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-s.ctx.Done():
			busy.drop(t)
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-sem; busy.drop(t) }()
			ctx, cancel := context.WithTimeout(s.ctx, deadline)
			defer cancel()
			fn(t, ctx)
		}()
	}
}

// persistLoop persists acknowledgements and deduplication state.
func (s *Server) persistLoop() {
	defer s.wg.Done()
	tick := time.NewTicker(s.cfg.CursorPersistInterval)
	defer tick.Stop()
	sem := make(chan struct{}, backgroundWorkers)
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		s.eachTopic(&s.persisting, sem, persistTimeout, (*topic).persist)
	}
}

// retentionLoop expires messages past their TTL and trims consumed
// ledgers.
func (s *Server) retentionLoop() {
	defer s.wg.Done()
	tick := time.NewTicker(s.cfg.RetentionCheckInterval)
	defer tick.Stop()
	sem := make(chan struct{}, backgroundWorkers)
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		s.eachTopic(&s.retaining, sem, retainTimeout, (*topic).retain)
	}
}

// peerDo sends an admin request to another broker, with this broker's
// token (--client-auth-token-file) when it has one.
func (s *Server) peerDo(req *http.Request) (*http.Response, error) {
	if f := s.cfg.ClientAuthTokenFile; f != "" {
		tok, err := readToken(f)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if s.peerHTTP != nil {
		req.URL.Scheme = "https"
		return s.peerHTTP.Do(req)
	}
	return http.DefaultClient.Do(req)
}

// httpScheme is the admin API's: https with TLS.
func (s *Server) httpScheme() string {
	if s.tls != nil {
		return "https"
	}
	return "http"
}

// readToken reads a token file (surrounding space dropped).
func readToken(path string) (string, error) {
	b, err := auth.ReadKey(path)
	if err != nil {
		return "", fmt.Errorf("client token: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}
