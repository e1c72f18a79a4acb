// Package standalone runs a whole Magnetar cluster in one process, for a
// laptop or a test: an embedded etcd, bookies and a broker, all under one
// data directory.
package standalone

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/internal/auth"
	"github.com/magnetar-io/magnetar/internal/bytesize"
	"github.com/magnetar-io/magnetar/internal/health"
	"github.com/magnetar-io/magnetar/internal/netaddr"
	"github.com/magnetar-io/magnetar/metastore"
)

// Config of a standalone cluster.
type Config struct {
	// DataDir holds everything: metastore/ and bookie-<i>/. Default ./data.
	DataDir string `mapstructure:"data-dir"`
	// Bookies is how many bookies to run. Default 1.
	Bookies int `mapstructure:"bookies"`
	// MetastoreListen is the embedded etcd's client address. Default
	// 127.0.0.1:2379.
	MetastoreListen string `mapstructure:"metastore-listen"`
	// BookieListen is the first bookie's address; bookie i listens on
	// port+i (port 0: every bookie on a free port). Default 127.0.0.1:3181.
	BookieListen string `mapstructure:"bookie-listen"`
	// MaxEntrySize for the bookies. Default 5 MiB.
	MaxEntrySize int `mapstructure:"max-entry-size"`
	// EntryLog is the bookies' --entry-log.
	EntryLog bool `mapstructure:"entry-log"`
	// EntryLogDirectIO is the bookies' --entry-log-direct-io.
	EntryLogDirectIO bool `mapstructure:"entry-log-direct-io"`
	// EntryLogSyncInterval is the bookies' --entry-log-sync-interval.
	EntryLogSyncInterval time.Duration `mapstructure:"entry-log-sync-interval"`
	// EntryLogRecycleFiles is the bookies' --entry-log-recycle-files.
	EntryLogRecycleFiles int `mapstructure:"entry-log-recycle-files"`
	// EntryLogCheckpointBytes is the bookies'
	// --entry-log-checkpoint-bytes.
	EntryLogCheckpointBytes bytesize.Size `mapstructure:"entry-log-checkpoint-bytes"`
	// BrokerListen is the client (gRPC) address. Default 127.0.0.1:6650.
	BrokerListen string `mapstructure:"broker-listen"`
	// HTTPListen is the admin REST address. Default 127.0.0.1:8080.
	HTTPListen string `mapstructure:"http"`
	// AdvertisedAddress is the broker address clients are sent to by
	// lookups. Default: the broker's listen address, with 127.0.0.1 for a
	// host that binds every interface (0.0.0.0 in a container).
	AdvertisedAddress string `mapstructure:"advertised-address"`
	// PulsarListen is the broker's --pulsar-listen: a port of its own for
	// Pulsar's binary protocol (TLS with TLS on). Default none: without
	// TLS the client port speaks it too.
	PulsarListen string `mapstructure:"pulsar-listen"`
	// LostBookieRecoveryDelay: with several bookies, how long one must be
	// gone before its copies are re-replicated. Default 30s.
	LostBookieRecoveryDelay time.Duration `mapstructure:"lost-bookie-recovery-delay"`
	// ClusterName is the cluster's name (metrics label, admin API). Default
	// "standalone" (Pulsar's).
	ClusterName string `mapstructure:"cluster-name"`
	// StatsInterval is the window of the metrics' rates. Default 1m.
	StatsInterval time.Duration `mapstructure:"stats-interval"`
	// RetentionCheckInterval is the broker's: how often TTL, retention and
	// backlog quotas are applied. Default 1m.
	RetentionCheckInterval time.Duration `mapstructure:"retention-check-interval"`
	// KeySharedSelector is the broker's --key-shared-selector. Default
	// consistent-hashing.
	KeySharedSelector string `mapstructure:"key-shared-selector"`
	// SchemaCompatibilityStrategy is the broker's
	// --schema-compatibility-strategy. Default FULL.
	SchemaCompatibilityStrategy string `mapstructure:"schema-compatibility-strategy"`
	// LocalBookies: the broker hands its adds to the bookies by function
	// calls (ledger.LocalBookie), not gRPC over loopback; reads and the
	// other requests still use gRPC. False: every request goes over gRPC,
	// as between a cluster's processes. Default true.
	LocalBookies bool `mapstructure:"local-bookies"`
	// Pprof serves /debug/pprof/ on the admin port.
	Pprof bool `mapstructure:"pprof"`
	// MemoryBudget is the memory the whole process may use: it is shared
	// out among the broker's cache and every bookie's memtables, block
	// cache and in-flight adds (see Budget); `magnetar standalone` also
	// makes it the Go runtime's soft memory limit (unless GOMEMLIMIT is
	// set).
	// Default 512MiB; at least 128MiB.
	MemoryBudget bytesize.Size `mapstructure:"memory-budget"`
	// Security of the broker's ports: authentication, authorization and
	// TLS (see broker.Security).
	broker.Security `mapstructure:",squash"`
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		DataDir:          "./data",
		Bookies:          1,
		MetastoreListen:  "127.0.0.1:2379",
		BookieListen:     "127.0.0.1:3181",
		MaxEntrySize:     bookie.DefaultConfig().MaxEntrySize,
		EntryLog:         bookie.DefaultConfig().EntryLog,
		EntryLogDirectIO: bookie.DefaultConfig().EntryLogDirectIO,
		BrokerListen:     "127.0.0.1:6650",
		HTTPListen:       "127.0.0.1:8080",

		EntryLogCheckpointBytes: bookie.DefaultConfig().EntryLogCheckpointBytes,

		LostBookieRecoveryDelay:     bookie.DefaultConfig().LostBookieRecoveryDelay,
		ClusterName:                 "standalone",
		StatsInterval:               broker.DefaultConfig().StatsInterval,
		RetentionCheckInterval:      broker.DefaultConfig().RetentionCheckInterval,
		KeySharedSelector:           broker.DefaultConfig().KeySharedSelector,
		SchemaCompatibilityStrategy: broker.DefaultConfig().SchemaCompatibilityStrategy,
		MemoryBudget:                512 << 20,
		LocalBookies:                true,
	}
}

// Bounds of Config.MemoryBudget, and the largest memtable a bookie takes.
const (
	minMemoryBudget = 128 << 20
	maxMemoryBudget = 1 << 40
	maxMemtable     = 1 << 30
)

// Budget is how a standalone shares out its memory budget.
type Budget struct {
	Total       int64
	BrokerCache int64
	Bookie      bookie.Memory // each bookie's
	Bookies     int
}

// Configured is the sum of the sized consumers; the rest of Total is
// left to what has no configured size (the Go runtime and garbage
// collector's headroom, etcd, gRPC's buffers, goroutines).
func (b Budget) Configured() int64 { return b.BrokerCache + int64(b.Bookies)*b.Bookie.Total() }

func (b Budget) String() string {
	return fmt.Sprintf("%v: broker cache %v + %d bookie(s) x (%v) = %v configured, %v for the rest",
		bytesize.Size(b.Total), bytesize.Size(b.BrokerCache), b.Bookies, b.Bookie,
		bytesize.Size(b.Configured()), bytesize.Size(b.Total-b.Configured()))
}

// Budget shares out c.MemoryBudget: an eighth for the broker's cache,
// three eighths for the bookies in equal shares (a share: half to
// memtables, of which two are held, a quarter to in-flight adds, an
// eighth to the block cache), and half left for what has no configured
// size: measured at full load, the garbage collector's headroom and the
// rest took as much as the sized parts (docs/benchmarks.md). A memtable
// is at least 1MiB and in-flight adds at least two of the largest
// entries.
func (c *Config) Budget() Budget {
	const mib = 1 << 20
	share := int64(c.MemoryBudget) * 3 / 8 / int64(max(c.Bookies, 1))
	mibs := func(n int64) int64 { return max(n/mib*mib, mib) } // whole MiB, at least one
	memtable := min(mibs(share/4), maxMemtable)
	return Budget{
		Total:       int64(c.MemoryBudget),
		BrokerCache: mibs(int64(c.MemoryBudget) / 8),
		Bookies:     c.Bookies,
		Bookie: bookie.Memory{
			Memtables:       2 * memtable,
			BlockCache:      mibs(share / 8),
			InflightPayload: max(mibs(share/4), 2*int64(c.MaxEntrySize)),
		},
	}
}

// MaxBookies bounds Config.Bookies.
const MaxBookies = 16

// Validate checks the configuration.
func (c *Config) Validate() error {
	var errs []error
	if c.DataDir == "" {
		errs = append(errs, errors.New("data directory is empty"))
	}
	if c.LostBookieRecoveryDelay < 0 {
		errs = append(errs, fmt.Errorf("--lost-bookie-recovery-delay %v is negative", c.LostBookieRecoveryDelay))
	}
	if c.Bookies < 1 || c.Bookies > MaxBookies {
		errs = append(errs, fmt.Errorf("bookies %d must be in 1..%d", c.Bookies, MaxBookies))
	}
	if c.MemoryBudget < minMemoryBudget || c.MemoryBudget > maxMemoryBudget {
		errs = append(errs, fmt.Errorf("--memory-budget %v: must be in %v..%v", c.MemoryBudget, bytesize.Size(minMemoryBudget), bytesize.Size(maxMemoryBudget)))
	} else if b := c.Budget(); b.Configured() > b.Total*3/4 {
		// The floors (a memtable of 1MiB, two of the largest entries in
		// flight) can take more than their share: the rest must keep at
		// least a quarter, or the garbage collector runs all the time.
		errs = append(errs, fmt.Errorf("--memory-budget %v is too small for %d bookies with --max-entry-size %d: %v would be configured, over three quarters of it",
			c.MemoryBudget, c.Bookies, c.MaxEntrySize, bytesize.Size(b.Configured())))
	} else {
		// Each bookie's own checks, before anything starts.
		bc := c.bookieConfig(b, 0)
		bc.Metastore = []string{"127.0.0.1:2379"}
		if err := bc.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	// The broker's own checks, before anything starts.
	bc := broker.DefaultConfig()
	bc.Security = c.Security
	bc.ClusterName, bc.StatsInterval = c.ClusterName, c.StatsInterval
	bc.RetentionCheckInterval, bc.KeySharedSelector = c.RetentionCheckInterval, c.KeySharedSelector
	bc.SchemaCompatibilityStrategy = c.SchemaCompatibilityStrategy
	bc.Metastore = []string{"127.0.0.1:2379"}
	if err := bc.Validate(); err != nil {
		errs = append(errs, err)
	}
	listen := func(flag, value string) {
		if err := netaddr.Listen(value); err != nil {
			errs = append(errs, fmt.Errorf("--%s %q: %w", flag, value, err))
		}
	}
	listen("metastore-listen", c.MetastoreListen)
	listen("bookie-listen", c.BookieListen)
	if p, err := netaddr.Port(c.BookieListen); err == nil && p != 0 && c.Bookies > 1 && p+c.Bookies-1 > 65535 {
		errs = append(errs, fmt.Errorf("--bookie-listen %q: bookie %d would listen on port %d, above 65535", c.BookieListen, c.Bookies-1, p+c.Bookies-1))
	}
	listen("broker-listen", c.BrokerListen)
	if c.AdvertisedAddress != "" {
		if err := netaddr.Dial(c.AdvertisedAddress); err != nil {
			errs = append(errs, fmt.Errorf("--advertised-address %q: %w", c.AdvertisedAddress, err))
		}
	}
	listen("http", c.HTTPListen)
	if c.PulsarListen != "" {
		listen("pulsar-listen", c.PulsarListen)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("standalone config: %w", err)
	}
	return nil
}

// bookieConfig is bookie i's configuration (without its metastore
// endpoints, known once etcd runs).
func (c *Config) bookieConfig(b Budget, i int) bookie.Config {
	host, portStr, _ := net.SplitHostPort(c.BookieListen)
	port, _ := strconv.Atoi(portStr)
	bc := bookie.DefaultConfig()
	bc.ID = fmt.Sprintf("standalone-bookie-%d", i)
	bc.Listen = net.JoinHostPort(host, "0")
	if port != 0 {
		bc.Listen = net.JoinHostPort(host, strconv.Itoa(port+i))
	}
	bc.DataDir = filepath.Join(c.DataDir, fmt.Sprintf("bookie-%d", i))
	bc.MaxEntrySize = c.MaxEntrySize
	bc.EntryLog = c.EntryLog
	bc.EntryLogDirectIO = c.EntryLogDirectIO
	bc.EntryLogCheckpointBytes = c.EntryLogCheckpointBytes
	bc.EntryLogSyncInterval = c.EntryLogSyncInterval
	bc.EntryLogRecycleFiles = c.EntryLogRecycleFiles
	bc.MemtableSize = bytesize.Size(b.Bookie.Memtables / 2)
	bc.BlockCacheSize = bytesize.Size(b.Bookie.BlockCache)
	bc.MaxInflightBytes = b.Bookie.InflightPayload
	// With several bookies, each runs autorecovery: a lost bookie's
	// copies move to the others.
	bc.Autorecovery = c.Bookies > 1
	bc.LostBookieRecoveryDelay = c.LostBookieRecoveryDelay
	return bc
}

// replication is the default persistence for n bookies: every entry on
// every bookie up to 3, then 3/3/2.
func replication(n int) (e, qw, qa int) {
	switch {
	case n >= 3:
		return 3, 3, 2
	case n == 2:
		return 2, 2, 2
	}
	return 1, 1, 1
}

// Standalone is a running single-process cluster.
type Standalone struct {
	Etcd    *metastore.Embedded
	Store   *metastore.Store
	Bookies []*bookie.Server
	Broker  *broker.Server
	// Budget is how the memory budget was shared out.
	Budget Budget
	log    *zap.Logger
}

// Start starts etcd, then the bookies. On error everything started is
// stopped again.
func Start(ctx context.Context, cfg Config, log *zap.Logger) (_ *Standalone, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	s := &Standalone{log: log}
	budget := cfg.Budget()
	s.Budget = budget
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	s.Etcd, err = metastore.StartEmbedded(ctx, metastore.EmbeddedConfig{
		Dir:        filepath.Join(cfg.DataDir, "metastore"),
		ClientAddr: cfg.MetastoreListen,
		Logger:     log,
	})
	if err != nil {
		return nil, err
	}
	s.Store, err = metastore.Open(ctx, metastore.Config{Endpoints: s.Etcd.Endpoints()}, log)
	if err != nil {
		return nil, err
	}
	// With authentication by a secret key, the bookies want a token too:
	// the broker's own, signed here (role "broker"), kept in the data
	// directory. With a public key the process cannot sign one, and the
	// bookies (on their loopback ports) stay open.
	var internalToken string
	if cfg.AuthenticationEnabled && cfg.TokenSecretKey != "" {
		if internalToken, err = writeInternalToken(cfg); err != nil {
			return nil, err
		}
	} else if cfg.AuthenticationEnabled {
		log.Warn("the bookies' ports take no credentials: standalone signs its internal token with --token-secret-key, and only a public key was given")
	}
	for i := 0; i < cfg.Bookies; i++ {
		bc := cfg.bookieConfig(budget, i)
		bc.Metastore = s.Etcd.Endpoints()
		if internalToken != "" {
			bc.AuthenticationEnabled, bc.TokenSecretKey = true, cfg.TokenSecretKey
			bc.AllowedRoles, bc.ClientAuthTokenFile = []string{internalRole}, internalToken
		}
		b, err := bookie.Start(ctx, bc, bookie.WithStore(s.Store), bookie.WithLogger(log.Named(bc.ID)),
			bookie.WithMetricLabels(prometheus.Labels{"bookie": bc.ID}))
		if err != nil {
			return nil, err
		}
		s.Bookies = append(s.Bookies, b)
	}
	bc := broker.DefaultConfig()
	bc.Listen, bc.HTTPListen = cfg.BrokerListen, cfg.HTTPListen
	bc.AdvertisedAddress = advertised(cfg)
	bc.PulsarListen = cfg.PulsarListen
	bc.Metastore = s.Etcd.Endpoints()
	bc.Ensemble, bc.WriteQuorum, bc.AckQuorum = replication(cfg.Bookies)
	bc.MaxMessageSize = min(bc.MaxMessageSize, cfg.MaxEntrySize)
	bc.CacheSize = budget.BrokerCache
	bc.ClusterName, bc.StatsInterval, bc.Pprof = cfg.ClusterName, cfg.StatsInterval, cfg.Pprof
	bc.RetentionCheckInterval, bc.KeySharedSelector = cfg.RetentionCheckInterval, cfg.KeySharedSelector
	bc.SchemaCompatibilityStrategy = cfg.SchemaCompatibilityStrategy
	bc.Security = cfg.Security
	bc.ClientAuthTokenFile = internalToken
	// The process is live and ready only with all its bookies.
	var checks health.Checks
	for _, b := range s.Bookies {
		c := b.HealthChecks()
		checks.Live = append(checks.Live, prefixed(b.ID(), c.Live)...)
		checks.Ready = append(checks.Ready, prefixed(b.ID(), c.Ready)...)
	}
	bopts := []broker.Option{broker.WithStore(s.Store), broker.WithLogger(log.Named("broker")), broker.WithHealthChecks(checks)}
	for _, b := range s.Bookies {
		bopts = append(bopts, broker.WithMetrics(b.Metrics(false))) // labelled bookie=<id>
	}
	if cfg.LocalBookies {
		bookies := s.Bookies
		bopts = append(bopts, broker.WithLocalBookies(func(id string) ledger.LocalBookie {
			for _, b := range bookies {
				if b.ID() == id {
					return b
				}
			}
			return nil
		}))
	}
	s.Broker, err = broker.Start(ctx, bc, bopts...)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// prefixed names checks "<prefix>/<name>".
func prefixed(prefix string, checks []health.Check) []health.Check {
	out := make([]health.Check, len(checks))
	for i, c := range checks {
		out[i] = health.Check{Name: prefix + "/" + c.Name, Fn: c.Fn}
	}
	return out
}

// advertised is the broker's advertised address: the configured one, or
// the listen address with 127.0.0.1 for a host that binds every interface
// (clients cannot dial 0.0.0.0 or [::] from another machine, and a lookup
// must not send them there).
func advertised(cfg Config) string {
	if cfg.AdvertisedAddress != "" {
		return cfg.AdvertisedAddress
	}
	host, port, err := net.SplitHostPort(cfg.BrokerListen)
	if err != nil || port == "0" {
		return "" // the broker's bound address
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return ""
}

// Close stops the bookies, then etcd.
func (s *Standalone) Close() error {
	var errs []error
	if s.Broker != nil {
		errs = append(errs, s.Broker.Close())
		s.Broker = nil
	}
	for i := len(s.Bookies) - 1; i >= 0; i-- {
		errs = append(errs, s.Bookies[i].Close())
	}
	s.Bookies = nil
	if s.Store != nil {
		errs = append(errs, s.Store.Close())
		s.Store = nil
	}
	if s.Etcd != nil {
		s.Etcd.Close()
		s.Etcd = nil
	}
	return errors.Join(errs...)
}

// internalRole is the role of the token standalone's broker presents to
// its bookies.
const internalRole = "broker"

// writeInternalToken signs the broker's token for the bookies with the
// secret key and writes it (mode 0600) under the data directory; it
// returns the file.
func writeInternalToken(cfg Config) (string, error) {
	signer, err := auth.NewSigner(cfg.TokenSecretKey, "")
	if err != nil {
		return "", err
	}
	tok, err := signer.Sign(internalRole, 0)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cfg.DataDir, "auth")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	f := filepath.Join(dir, "internal.token")
	if err := os.WriteFile(f, []byte(tok), 0o600); err != nil {
		return "", err
	}
	// Files left by an earlier run keep their modes: tighten them.
	if err := errors.Join(os.Chmod(dir, 0o700), os.Chmod(f, 0o600)); err != nil {
		return "", err
	}
	return f, nil
}
