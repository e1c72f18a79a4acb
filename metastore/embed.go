package metastore

import (
	"context"
	"errors"
	"fmt"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// EmbeddedConfig configures an etcd server run inside the process.
type EmbeddedConfig struct {
	// Dir holds etcd's data (created if needed).
	Dir string
	// ClientAddr is where clients connect, host:port. Default
	// 127.0.0.1:2379; use 127.0.0.1:0 for a free port.
	ClientAddr string
	// PeerAddr is the raft peer address; a single member never dials it.
	// Default 127.0.0.1:0.
	PeerAddr string
	// Name of the member. Default "magnetar".
	Name string
	// Logger receives etcd's logs (warnings and above). Default: none.
	Logger *zap.Logger
	// StartTimeout bounds the wait for the server to be ready. Default 60s.
	StartTimeout time.Duration
	// TLS, if set, serves clients over TLS with these PEM files; with
	// ClientCertAuth, only clients presenting a certificate from
	// TrustFile's authorities.
	TLS *EmbeddedTLS
}

// EmbeddedTLS is the TLS of an embedded etcd's client port.
type EmbeddedTLS struct {
	CertFile, KeyFile, TrustFile string
	ClientCertAuth               bool
}

// Embedded is a single-member etcd server running in this process.
type Embedded struct {
	etcd      *embed.Etcd
	endpoints []string
	closing   *atomic.Bool
	closeOnce sync.Once
}

// StartEmbedded starts etcd in cfg.Dir and waits until it serves clients.
func StartEmbedded(ctx context.Context, cfg EmbeddedConfig) (*Embedded, error) {
	if cfg.Dir == "" {
		return nil, errors.New("metastore: embedded etcd needs a data directory")
	}
	if cfg.ClientAddr == "" {
		cfg.ClientAddr = "127.0.0.1:2379"
	}
	if cfg.PeerAddr == "" {
		cfg.PeerAddr = "127.0.0.1:0"
	}
	if cfg.Name == "" {
		cfg.Name = "magnetar"
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 60 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	scheme := "http://"
	if cfg.TLS != nil {
		scheme = "https://"
	}
	curl, err := url.Parse(scheme + cfg.ClientAddr)
	if err != nil {
		return nil, fmt.Errorf("metastore: embedded etcd client address %q: %w", cfg.ClientAddr, err)
	}
	purl, err := url.Parse("http://" + cfg.PeerAddr)
	if err != nil {
		return nil, fmt.Errorf("metastore: embedded etcd peer address %q: %w", cfg.PeerAddr, err)
	}
	ec := embed.NewConfig()
	ec.Name = cfg.Name
	ec.Dir = cfg.Dir
	ec.ListenClientUrls = []url.URL{*curl}
	ec.AdvertiseClientUrls = []url.URL{*curl}
	ec.ListenPeerUrls = []url.URL{*purl}
	ec.AdvertisePeerUrls = []url.URL{*purl}
	ec.InitialCluster = ec.InitialClusterFromName(cfg.Name)
	if cfg.TLS != nil {
		ec.ClientTLSInfo = transport.TLSInfo{CertFile: cfg.TLS.CertFile, KeyFile: cfg.TLS.KeyFile,
			TrustedCAFile: cfg.TLS.TrustFile, ClientCertAuth: cfg.TLS.ClientCertAuth}
	}
	closing := &atomic.Bool{}
	elog := log.Named("etcd").WithOptions(zap.IncreaseLevel(zap.WarnLevel), zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return quietOnClose{Core: c, closing: closing}
	}))
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(elog)
	// Only requests slower than this are logged.
	ec.WarningUnaryRequestDuration = embed.DefaultWarningUnaryRequestDuration
	// Keep history bounded: metadata is rewritten often (cursors, ledgers).
	ec.AutoCompactionMode = "periodic"
	ec.AutoCompactionRetention = "10m"

	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("metastore: start embedded etcd in %s: %w", cfg.Dir, err)
	}
	timer := time.NewTimer(cfg.StartTimeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("metastore: embedded etcd failed: %w", err)
	case <-timer.C:
		e.Close()
		return nil, fmt.Errorf("metastore: embedded etcd not ready after %v", cfg.StartTimeout)
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	}
	eps := make([]string, 0, len(e.Clients))
	for _, l := range e.Clients {
		eps = append(eps, l.Addr().String())
	}
	return &Embedded{etcd: e, endpoints: eps, closing: closing}, nil
}

// Endpoints are the addresses clients connect to.
func (e *Embedded) Endpoints() []string { return e.endpoints }

// Err delivers a fatal server error.
func (e *Embedded) Err() <-chan error { return e.etcd.Err() }

// Close stops the server.
func (e *Embedded) Close() {
	e.closeOnce.Do(func() {
		e.closing.Store(true)
		e.etcd.Close()
	})
}

// quietOnClose drops what etcd logs while it is being closed on purpose:
// only errors about its listeners closing ("use of closed network
// connection").
type quietOnClose struct {
	zapcore.Core
	closing *atomic.Bool
}

func (q quietOnClose) With(fields []zapcore.Field) zapcore.Core {
	return quietOnClose{Core: q.Core.With(fields), closing: q.closing}
}

func (q quietOnClose) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if q.closing.Load() && e.Level < zapcore.DPanicLevel {
		return ce
	}
	if q.Enabled(e.Level) {
		return ce.AddCore(e, q)
	}
	return ce
}
