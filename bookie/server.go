package bookie

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/bookie/autorecovery"
	"github.com/magnetar-io/magnetar/bookie/internal/storage"
	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/bookie/wire"
	"github.com/magnetar-io/magnetar/internal/bufpool"
	"github.com/magnetar-io/magnetar/internal/health"
	"github.com/magnetar-io/magnetar/internal/ops"
	"github.com/magnetar-io/magnetar/internal/tlsutil"
	"github.com/magnetar-io/magnetar/internal/wirecodec"
	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/bookiepb"
	"github.com/magnetar-io/magnetar/proto/metapb"
)

// gRPC transport sizes, on the bookie and in bookie/ledger.
const (
	transportBuffer = 512 << 10
	transportWindow = 8 << 20
)

// Version is reported in the bookie's registration.
var Version = "dev"

// Option changes how Start builds a server.
type Option func(*options)

type options struct {
	store        *metastore.Store
	logger       *zap.Logger
	fs           vfs.FS
	diskUsage    DiskUsageFunc
	metricLabels prometheus.Labels
}

// WithMetricLabels adds labels to every metric of the bookie (a
// standalone process tells its bookies apart by them).
func WithMetricLabels(l prometheus.Labels) Option { return func(o *options) { o.metricLabels = l } }

// WithStore shares an open metastore (standalone mode, tests); the server
// does not close it.
func WithStore(s *metastore.Store) Option { return func(o *options) { o.store = s } }

// WithLogger sets the logger.
func WithLogger(l *zap.Logger) Option { return func(o *options) { o.logger = l } }

// WithFS runs the storage on another filesystem, such as Pebble's
// crash-simulating in-memory one in tests.
func WithFS(fs vfs.FS) Option { return func(o *options) { o.fs = fs } }

// Server is a running bookie.
type Server struct {
	cfg        Config
	log        *zap.Logger
	store      *metastore.Store
	ownsStore  bool
	db         *storage.DB
	ln         net.Listener
	grpc       *grpc.Server
	httpLn     net.Listener    // nil without --http
	tls        *tlsutil.Server // nil without TLS
	http       *http.Server
	id         string // name in ledger metadata
	addr       string // advertised address
	instanceID string

	budget    *semaphore.Weighted // payload bytes of adds in progress
	diskUsage DiskUsageFunc
	lastUsage atomic.Pointer[DiskUsage]         // the disk check's last measure, for the registration
	session   atomic.Pointer[metastore.Session] // the registration's; nil while unregistered (set by the registration loop)
	republish chan struct{}                     // (1) wakes the registration loop to publish at once
	stop      chan struct{}                     // closed by Close: background loops and add streams end
	ctx       context.Context                   // cancelled by Close: background work in progress ends
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	served    chan error // the gRPC server's exit
	closeMu   sync.Mutex
	closed    bool
	closeErr  error

	// local counts the open local add streams (OpenAdds), whose goroutines
	// Close waits for; closed: Close has begun, no new one opens.
	local struct {
		sync.Mutex
		closed bool
		wg     sync.WaitGroup
	}

	// reg holds the bookie's metrics (served with the Go runtime's on
	// the HTTP port); metricsReg registers on it with WithMetricLabels'.
	reg        *prometheus.Registry
	metricsReg prometheus.Registerer
	metrics    *metrics

	ledgers  *ledger.Client        // autorecovery's; nil when it is off
	recovery *autorecovery.Service // nil when off

	gcMovedFrom int64 // the last ledger collectMoved examined; owned by gcLoop

	// ro is the read-only state (readonly.go).
	ro struct {
		sync.Mutex
		reasons []string // sorted, distinct; empty: writable
		// refusal is what normal adds get (nil: writable). Written under
		// the mutex, read without it on the add path.
		refusal atomic.Pointer[error]
	}
}

// Start opens the storage, checks the cookie, binds the listener,
// registers the bookie in the metastore and serves.
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
	if o.diskUsage == nil {
		o.diskUsage = StatfsDiskUsage
	}
	s := &Server{
		cfg: cfg, log: o.logger, diskUsage: o.diskUsage,
		stop: make(chan struct{}), served: make(chan error, 1), republish: make(chan struct{}, 1),
		budget: semaphore.NewWeighted(cfg.MaxInflightBytes),
	}
	s.reg = prometheus.NewRegistry()
	s.metricsReg = prometheus.WrapRegistererWith(o.metricLabels, s.reg)
	s.metrics = newMetrics(s.metricsReg, s)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	// Undo what was started if a later step fails.
	undo := []func(){s.cancel}
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
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

	fs := o.fs
	if fs == nil {
		fs = vfs.Default
		if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
			return nil, fmt.Errorf("bookie: data directory: %w", err)
		}
	}
	so := cfg.storageOptions()
	so.FS, so.Logger, so.OnSync = fs, s.log.Named("storage"), s.metrics.synced
	so.OnWriteStall = func(reason string, took time.Duration) {
		s.metrics.stalled(reason, took)
		if took >= time.Second { // short ones are counted, not logged: they can come every second
			s.log.Warn("storage write stall", zap.String("reason", reason), zap.Duration("took", took))
		}
	}
	db, err := storage.Open(so)
	if err != nil {
		return nil, err
	}
	s.db = db
	undo = append(undo, func() { db.Close() })
	registerQueueMetrics(s.metricsReg, db)

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("bookie: listen on %s: %w", cfg.Listen, err)
	}
	s.ln = ln
	undo = append(undo, func() { ln.Close() })
	if cfg.HTTPListen != "" {
		s.httpLn, err = net.Listen("tcp", cfg.HTTPListen)
		if err != nil {
			return nil, fmt.Errorf("bookie: listen on %s: %w", cfg.HTTPListen, err)
		}
		undo = append(undo, func() { s.httpLn.Close() })
	}
	s.addr = cfg.AdvertisedAddress
	if s.addr == "" {
		s.addr = ln.Addr().String()
	}
	s.id = cfg.ID
	if s.id == "" {
		s.id = s.addr
	}
	s.log = s.log.With(zap.String("bookie", s.id))

	if err := s.checkCookie(ctx); err != nil {
		return nil, err
	}
	// A bookie starting on a full disk registers read-only from the start.
	s.checkDisk()

	// An entry of the maximum size, or a batch of smaller ones (clients cap
	// batches at 1 MiB of payload), plus framing.
	maxMsg := cfg.MaxEntrySize + 1<<20
	verifier, err := cfg.NewVerifier()
	if err != nil {
		return nil, fmt.Errorf("bookie: %w", err)
	}
	authUnary, authStream := s.authInterceptors(verifier)
	var creds []grpc.ServerOption
	if cfg.TLSCertFile != "" {
		tc, err := tlsutil.NewServer(tlsutil.Files{Cert: cfg.TLSCertFile, Key: cfg.TLSKeyFile, Trust: cfg.TLSTrustCertsFile}, cfg.TLSRequireTrustedClientCert)
		if err != nil {
			return nil, fmt.Errorf("bookie: %w", err)
		}
		s.tls = tc
		creds = append(creds, grpc.Creds(credentials.NewTLS(tc.Config)))
	}
	s.grpc = grpc.NewServer(append(creds,
		grpc.MaxRecvMsgSize(maxMsg),
		grpc.MaxSendMsgSize(maxMsg),
		// A connection that sends no HTTP/2 preface is dropped after this,
		// instead of holding a server goroutine (and Close) for 120s.
		grpc.ConnectionTimeout(5*time.Second),
		// Batched adds make large messages: bigger buffers and windows mean
		// far fewer write syscalls and no flow-control stalls (measured:
		// docs/benchmarks.md).
		grpc.WriteBufferSize(transportBuffer),
		grpc.ReadBufferSize(transportBuffer),
		// Servers take gRPC's default pool when the grpc package
		// initializes, before bufpool.Install can run: named here.
		experimental.BufferPool(bufpool.Shared()),
		// Payloads of adds decoded into pooled buffers, handed back
		// when the storage has answered (receiveAdds).
		grpc.ForceServerCodecV2(wirecodec.Codec()),
		grpc.InitialWindowSize(transportWindow),
		grpc.InitialConnWindowSize(transportWindow),
		grpc.ChainUnaryInterceptor(append([]grpc.UnaryServerInterceptor{errorInterceptor, recoverInterceptor(s.log)}, authUnary...)...),
		grpc.ChainStreamInterceptor(authStream...),
		// Stop waits for handlers to return, so storage is never closed
		// under one.
		grpc.WaitForHandlers(true),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	)...)
	bookiepb.RegisterBookieServer(s.grpc, &service{s: s})
	go func() { s.served <- s.grpc.Serve(ln) }()

	if err := s.drainState(ctx); err != nil {
		s.grpc.Stop()
		return nil, err
	}
	reg, err := s.register(ctx)
	if err != nil {
		s.grpc.Stop()
		return nil, err
	}
	s.wg.Add(3)
	go s.registrationLoop(reg)
	go s.gcLoop()
	s.wg.Add(1)
	go s.drainLoop()
	go s.diskLoop()
	if cfg.Autorecovery {
		if err := s.startAutorecovery(); err != nil {
			close(s.stop)
			s.cancel()
			s.wg.Wait() // unregisters
			s.grpc.Stop()
			return nil, err
		}
	}
	if s.httpLn != nil {
		s.http = &http.Server{Handler: ops.Handler(ops.Options{Health: s.HealthChecks(), Metrics: s.Metrics(true), Pprof: cfg.Pprof}),
			ReadHeaderTimeout: 10 * time.Second}
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
	s.log.Info("bookie started", zap.String("data-dir", cfg.DataDir), zap.String("instance", s.instanceID), zap.String("http", s.HTTPAddr()),
		zap.Stringer("memory", cfg.Memory()))
	return s, nil
}

// HTTPAddr is the address the HTTP port (health endpoints) is bound to,
// "" without one.
func (s *Server) HTTPAddr() string {
	if s.httpLn == nil {
		return ""
	}
	return s.httpLn.Addr().String()
}

// HealthChecks are the bookie's: live while the storage has not failed (only a restart
// after fixing the disk helps then); ready while registered under a live
// session and not stopping. Writable, read-only and draining bookies are
// all ready: each serves reads, and the body tells which it is.
func (s *Server) HealthChecks() health.Checks {
	return health.Checks{
		Live: []health.Check{{Name: "storage", Fn: func(context.Context) error {
			select {
			case <-s.db.Failed():
				return fmt.Errorf("storage failed: %v", s.db.Err())
			default:
				return nil
			}
		}}},
		Ready: []health.Check{
			{Name: "serving", Fn: func(context.Context) error {
				select {
				case <-s.stop:
					return errors.New("the bookie is stopping")
				default:
					return nil
				}
			}},
			{Name: "registered", Fn: func(ctx context.Context) error {
				return s.store.CheckHeld(ctx, metastore.BookieAvailableKey(s.id), s.session.Load())
			}},
		},
		Info: func() map[string]any {
			state, reasons := s.state()
			return map[string]any{"id": s.id, "state": state, "readOnlyReasons": reasons}
		},
	}
}

// startAutorecovery runs the bookie's autorecovery instance.
func (s *Server) startAutorecovery() error {
	dial, err := s.cfg.peer().DialOptions()
	if err != nil {
		return err
	}
	lc, err := ledger.New(s.store, ledger.Config{MaxEntrySize: s.cfg.MaxEntrySize, DialOptions: dial, Logger: s.log.Named("autorecovery")})
	if err != nil {
		return err
	}
	check := s.cfg.AutorecoveryCheckInterval
	if check == 0 {
		check = -1
	}
	rs, err := autorecovery.Start(s.store, lc, autorecovery.Config{
		ID:                s.id,
		LostBookieDelay:   s.cfg.LostBookieRecoveryDelay,
		CheckInterval:     check,
		SessionTTL:        s.cfg.SessionTTL,
		MaxBytesPerSec:    s.cfg.RereplicationMaxBytesPerSec,
		AutoRebalance:     s.cfg.AutoRebalance,
		RebalanceInterval: s.cfg.RebalanceInterval,
		RebalanceSpread:   s.cfg.RebalanceTargetSpread,
		Logger:            s.log.Named("autorecovery"),
	})
	if err != nil {
		lc.Close()
		return err
	}
	s.ledgers, s.recovery = lc, rs
	s.metricsReg.MustRegister(rs.Collector())
	return nil
}

// Metrics gathers the bookie's metrics, and with runtime the Go runtime's
// and the process's (a standalone process serves those once).
func (s *Server) Metrics(runtime bool) prometheus.Gatherer {
	if runtime {
		return prometheus.Gatherers{s.reg, ops.RuntimeMetrics()}
	}
	return s.reg
}

// Autorecovery is the bookie's autorecovery instance, nil when off.
func (s *Server) Autorecovery() *autorecovery.Service { return s.recovery }

// ID is the bookie's id in ledger metadata.
func (s *Server) ID() string { return s.id }

// Config returns the configuration the server runs with.
func (s *Server) Config() Config { return s.cfg }

// AdvertisedAddress is the address the bookie registers for clients.
func (s *Server) AdvertisedAddress() string { return s.addr }

// Addr is the address the gRPC server is bound to.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close unregisters the bookie, lets in-flight requests finish (up to a few
// seconds; the adds that local streams took, however long the disk
// takes), and closes the storage.
func (s *Server) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return s.closeErr
	}
	s.closed = true
	if s.http != nil {
		s.http.Close() // probes see the bookie gone at once
	}
	if s.recovery != nil {
		s.recovery.Close() // gives up the auditor role and ledger locks at once
		s.ledgers.Close()
	}
	close(s.stop)
	s.cancel()
	s.wg.Wait() // the registration loop closes the session: unregistered
	s.closeLocal()

	done := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		s.grpc.Stop()
		<-done
	}
	var errs []error
	if err := <-s.served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		errs = append(errs, err)
	}
	errs = append(errs, s.db.Close())
	if s.ownsStore {
		errs = append(errs, s.store.Close())
	}
	s.closeErr = errors.Join(errs...)
	s.log.Info("bookie stopped")
	return s.closeErr
}

const cookieName = "cookie"

// checkCookie ties the bookie id to its data directory. A bookie whose
// directory was wiped (or that was pointed at another bookie's directory)
// must not serve: it would answer "no such entry" for entries it
// acknowledged, and ledger recovery would trust that.
func (s *Server) checkCookie(ctx context.Context) error {
	local, haveLocal, err := s.db.GetSystem(cookieName)
	if err != nil {
		return err
	}
	var lc metapb.Cookie
	if haveLocal {
		if err := proto.Unmarshal(local, &lc); err != nil {
			return fmt.Errorf("bookie: cookie in %s is corrupt: %w", s.cfg.DataDir, err)
		}
		if lc.BookieId != s.id {
			return fmt.Errorf("bookie: data directory %s belongs to bookie %s, not %s: start it with --id %s", s.cfg.DataDir, lc.BookieId, s.id, lc.BookieId)
		}
	}
	key := metastore.BookieCookieKey(s.id)
	kv, err := s.store.Get(ctx, key)
	haveRemote := err == nil
	if err != nil && !errors.Is(err, metastore.ErrNotFound) {
		return fmt.Errorf("bookie: read cookie: %w", err)
	}
	var rc metapb.Cookie
	if haveRemote {
		if err := proto.Unmarshal(kv.Value, &rc); err != nil {
			return fmt.Errorf("bookie: cookie in the metastore at %s is corrupt: %w", key, err)
		}
	}
	switch {
	case haveLocal && haveRemote:
		if lc.InstanceId != rc.InstanceId {
			return fmt.Errorf("bookie: data directory %s holds instance %s but bookie %s is registered as instance %s: wrong directory, or a second bookie with the same id", s.cfg.DataDir, lc.InstanceId, s.id, rc.InstanceId)
		}
		s.instanceID = lc.InstanceId
		return nil
	case !haveLocal && haveRemote:
		return fmt.Errorf("bookie: %s was registered as instance %s but data directory %s holds no data: its data is lost or this is the wrong directory; "+
			"if the disk was replaced on purpose, delete the metastore key %s%s after its ledgers were re-replicated",
			s.id, rc.InstanceId, s.cfg.DataDir, s.store.Root(), key)
	}
	c := &lc
	if !haveLocal {
		var b [16]byte
		rand.Read(b[:])
		c = &metapb.Cookie{BookieId: s.id, InstanceId: hex.EncodeToString(b[:]), CreatedAtUnixMs: time.Now().UnixMilli()}
		raw, _ := proto.Marshal(c)
		// Local first: if we crash before the metastore write, the next
		// start finds a local cookie and writes the remote one.
		if err := s.db.PutSystem(ctx, cookieName, raw); err != nil {
			return err
		}
	}
	raw, _ := proto.Marshal(c)
	if _, err := s.store.Create(ctx, key, raw); err != nil {
		return fmt.Errorf("bookie: write cookie: %w", err)
	}
	s.instanceID = c.InstanceId
	return nil
}

func recoverInterceptor(log *zap.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				log.Error("panic in handler", zap.String("method", info.FullMethod), zap.Any("panic", p), zap.Stack("stack"))
				err = fmt.Errorf("internal error in %s", info.FullMethod)
			}
		}()
		return handler(ctx, req)
	}
}

// errorInterceptor is the one place where errors become gRPC statuses.
func errorInterceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	return resp, wire.ToStatus(err)
}
