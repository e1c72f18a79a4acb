package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/magnetar-io/magnetar/bookie/autorecovery"
	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/internal/auth"
	"github.com/magnetar-io/magnetar/internal/config"
	"github.com/magnetar-io/magnetar/internal/health"
	"github.com/magnetar-io/magnetar/internal/netaddr"
	"github.com/magnetar-io/magnetar/internal/ops"
	"github.com/magnetar-io/magnetar/internal/tlsutil"
	"github.com/magnetar-io/magnetar/metastore"
)

// autorecoveryConfig is the configuration of `magnetar autorecovery`, a
// process that runs an autorecovery instance apart from the bookies.
type autorecoveryConfig struct {
	// ID names the instance in the auditor key and ledger locks. Default
	// autorecovery-<hostname>-<pid>.
	ID string `mapstructure:"id"`
	// Metastore lists the etcd endpoints.
	Metastore []string `mapstructure:"metastore"`
	// MetastoreRoot is the key prefix of the cluster. Default /magnetar.
	MetastoreRoot string `mapstructure:"metastore-root"`
	// Metastore credentials: etcd's TLS and authentication.
	metastore.Credentials `mapstructure:",squash"`
	// httpTLS serves HTTPListen over TLS.
	httpTLS `mapstructure:",squash"`
	// How it calls bookies: the token of ClientAuthTokenFile; over TLS
	// with BookieTLSEnabled, verified with TLSTrustCertsFile's
	// authorities, presenting AuthTLSCertFile if set.
	ClientAuthTokenFile string `mapstructure:"client-auth-token-file"`
	BookieTLSEnabled    bool   `mapstructure:"bookie-tls-enabled"`
	TLSTrustCertsFile   string `mapstructure:"tls-trust-certs-file"`
	AuthTLSCertFile     string `mapstructure:"auth-tls-cert-file"`
	AuthTLSKeyFile      string `mapstructure:"auth-tls-key-file"`
	// HTTPListen serves /healthz, /readyz and /metrics. Default empty: none.
	HTTPListen string `mapstructure:"http"`
	// Pprof serves /debug/pprof/ on the HTTP port.
	Pprof bool `mapstructure:"pprof"`
	// LostBookieRecoveryDelay: see bookie.Config. Default 30s; 0 allowed.
	LostBookieRecoveryDelay time.Duration `mapstructure:"lost-bookie-recovery-delay"`
	// CheckInterval: see bookie.Config.AutorecoveryCheckInterval. Default
	// 24h; 0 disables.
	CheckInterval time.Duration `mapstructure:"check-interval"`
	// RereplicationMaxBytesPerSec throttles the worker; 0: unlimited.
	RereplicationMaxBytesPerSec int64 `mapstructure:"rereplication-max-bytes-per-sec"`
	// SessionTTL of the lease holding the auditor role and ledger locks.
	// Default 10s.
	SessionTTL time.Duration `mapstructure:"session-ttl"`
	// MaxEntrySize: the largest entry copied. Default 5 MiB.
	MaxEntrySize int `mapstructure:"max-entry-size"`
	// AutoRebalance, RebalanceInterval, RebalanceTargetSpread: see
	// bookie.Config.
	AutoRebalance         bool          `mapstructure:"auto-rebalance"`
	RebalanceInterval     time.Duration `mapstructure:"rebalance-interval"`
	RebalanceTargetSpread float64       `mapstructure:"rebalance-target-spread"`
}

func defaultAutorecoveryConfig() autorecoveryConfig {
	host, _ := os.Hostname()
	return autorecoveryConfig{
		ID:                      fmt.Sprintf("autorecovery-%s-%d", host, os.Getpid()),
		MetastoreRoot:           "/magnetar",
		LostBookieRecoveryDelay: 30 * time.Second,
		CheckInterval:           24 * time.Hour,
		SessionTTL:              10 * time.Second,
		MaxEntrySize:            5 << 20,
		RebalanceInterval:       5 * time.Minute,
		RebalanceTargetSpread:   autorecovery.DefaultRebalanceSpread,
	}
}

func (c *autorecoveryConfig) validate() error {
	errs := checkProcess(c.ID, c.Metastore, c.HTTPListen)
	if c.LostBookieRecoveryDelay < 0 {
		errs = append(errs, fmt.Errorf("--lost-bookie-recovery-delay %v is negative", c.LostBookieRecoveryDelay))
	}
	if c.CheckInterval < 0 {
		errs = append(errs, fmt.Errorf("--check-interval %v is negative (0 disables the check)", c.CheckInterval))
	}
	if c.RereplicationMaxBytesPerSec < 0 {
		errs = append(errs, fmt.Errorf("--rereplication-max-bytes-per-sec %d is negative (0: unlimited)", c.RereplicationMaxBytesPerSec))
	}
	if c.SessionTTL < time.Second {
		errs = append(errs, fmt.Errorf("--session-ttl %v is below 1s", c.SessionTTL))
	}
	if c.RebalanceInterval <= 0 {
		errs = append(errs, fmt.Errorf("--rebalance-interval %v must be positive", c.RebalanceInterval))
	}
	if !(c.RebalanceTargetSpread > 0 && c.RebalanceTargetSpread <= 10) {
		errs = append(errs, fmt.Errorf("--rebalance-target-spread %v must be in (0, 10]", c.RebalanceTargetSpread))
	}
	if err := c.httpTLS.check(); err != nil {
		errs = append(errs, err)
	}
	if (c.AuthTLSCertFile == "") != (c.AuthTLSKeyFile == "") {
		errs = append(errs, errors.New("give both --auth-tls-cert-file and --auth-tls-key-file"))
	}
	if c.MaxEntrySize <= 0 {
		errs = append(errs, fmt.Errorf("--max-entry-size %d must be positive", c.MaxEntrySize))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("autorecovery config: %w", err)
	}
	return nil
}

// checkProcess checks what the helper processes (autorecovery,
// autoscaler) share: an id, etcd endpoints, an optional HTTP address.
func checkProcess(id string, metastore []string, httpListen string) []error {
	var errs []error
	if id == "" {
		errs = append(errs, errors.New("--id is empty"))
	}
	if len(metastore) == 0 {
		errs = append(errs, errors.New("no metastore (etcd) endpoints given: --metastore HOST:PORT,..."))
	}
	for _, e := range metastore {
		if err := netaddr.Endpoint(e); err != nil {
			errs = append(errs, fmt.Errorf("--metastore %q: %w", e, err))
		}
	}
	if httpListen != "" {
		if err := netaddr.Listen(httpListen); err != nil {
			errs = append(errs, fmt.Errorf("--http %q: %w", httpListen, err))
		}
	}
	return errs
}

func loadAutorecoveryConfig(flags *pflag.FlagSet, path string) (autorecoveryConfig, error) {
	cfg := defaultAutorecoveryConfig()
	if err := config.Load(flags, path, &cfg); err != nil {
		return cfg, err
	}
	return cfg, cfg.validate()
}

func newAutorecoveryCmd(g *globals) *cobra.Command {
	def := defaultAutorecoveryConfig()
	cmd := &cobra.Command{
		Use:   "autorecovery",
		Short: "Run autorecovery apart from the bookies (auditor candidate and re-replication worker)",
		Long: `Run an autorecovery instance in its own process. Every bookie runs one by
default (bookie --autorecovery=false turns it off); this command is for
deployments that keep it apart. Instances elect one auditor through etcd: it
notices bookies that are gone for longer than --lost-bookie-recovery-delay,
and marks their ledgers under-replicated; every instance re-replicates marked
ledgers, one worker per ledger. Every flag can also be set with a MAGNETAR_*
environment variable or in the --config file.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadAutorecoveryConfig(cmd.Flags(), g.config)
			if err != nil {
				return err
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			defer log.Sync()
			store, err := metastore.Open(cmd.Context(), metastore.Config{Endpoints: cfg.Metastore, Root: cfg.MetastoreRoot, Credentials: cfg.Credentials}, log)
			if err != nil {
				return err
			}
			defer store.Close()
			dial, err := auth.Peer{TLS: cfg.BookieTLSEnabled, TokenFile: cfg.ClientAuthTokenFile,
				Files: tlsutil.Files{Cert: cfg.AuthTLSCertFile, Key: cfg.AuthTLSKeyFile, Trust: cfg.TLSTrustCertsFile}}.DialOptions()
			if err != nil {
				return err
			}
			lc, err := ledger.New(store, ledger.Config{MaxEntrySize: cfg.MaxEntrySize, DialOptions: dial, Logger: log.Named("ledger")})
			if err != nil {
				return err
			}
			defer lc.Close()
			check := cfg.CheckInterval
			if check == 0 {
				check = -1
			}
			s, err := autorecovery.Start(store, lc, autorecovery.Config{
				ID:                cfg.ID,
				LostBookieDelay:   cfg.LostBookieRecoveryDelay,
				CheckInterval:     check,
				SessionTTL:        cfg.SessionTTL,
				MaxBytesPerSec:    cfg.RereplicationMaxBytesPerSec,
				AutoRebalance:     cfg.AutoRebalance,
				RebalanceInterval: cfg.RebalanceInterval,
				RebalanceSpread:   cfg.RebalanceTargetSpread,
				Logger:            log,
			})
			if err != nil {
				return err
			}
			var stopHTTP func()
			if cfg.HTTPListen != "" {
				addr, stop, err := serveOps(cfg.HTTPListen, cfg.httpTLS, ops.Options{
					Health:  health.Checks{Ready: []health.Check{{Name: "session", Fn: s.Ready}}},
					Metrics: autorecoveryMetrics(s), Pprof: cfg.Pprof,
				})
				if err != nil {
					s.Close()
					return err
				}
				stopHTTP = stop
				log.Info("HTTP endpoints (health, metrics)", zap.String("http", addr))
			}
			log.Info("autorecovery running", zap.String("id", cfg.ID), zap.Duration("lost-bookie-recovery-delay", cfg.LostBookieRecoveryDelay))
			<-cmd.Context().Done()
			log.Info("stopping")
			if stopHTTP != nil {
				stopHTTP()
			}
			return s.Close()
		},
	}
	f := cmd.Flags()
	f.String("id", def.ID, "instance name in the auditor key and ledger locks")
	f.StringSlice("metastore", def.Metastore, "etcd endpoints, comma-separated (required)")
	f.String("metastore-root", def.MetastoreRoot, "key prefix of the cluster in etcd")
	addMetastoreFlags(f)
	addHTTPTLSFlags(f)
	f.String("client-auth-token-file", "", "token presented to the bookies (read again when it changes)")
	f.Bool("bookie-tls-enabled", false, "the bookies serve TLS: verify them with --tls-trust-certs-file")
	f.String("tls-trust-certs-file", "", "authorities (PEM) of the bookies' certificates (the system's if empty)")
	f.String("auth-tls-cert-file", "", "client certificate (PEM) presented to the bookies (mutual TLS)")
	f.String("auth-tls-key-file", "", "its private key (PEM)")
	f.String("http", def.HTTPListen, "HTTP address for the health endpoints /healthz and /readyz and /metrics, HOST:PORT (empty: none)")
	f.Bool("pprof", false, "serve Go's profiles under /debug/pprof/ on the HTTP port")
	f.Duration("lost-bookie-recovery-delay", def.LostBookieRecoveryDelay, "how long a bookie must stay unregistered before its ledgers are re-replicated (0: at once)")
	f.Duration("check-interval", def.CheckInterval, "how often the auditor compares every ledger's metadata with what each bookie holds (0: never)")
	f.Int64("rereplication-max-bytes-per-sec", def.RereplicationMaxBytesPerSec, "throttle of the re-replication worker in bytes per second (0: unlimited)")
	f.Duration("session-ttl", def.SessionTTL, "TTL of the lease holding the auditor role and ledger locks")
	f.Int("max-entry-size", def.MaxEntrySize, "largest entry copied, in bytes")
	f.Bool("auto-rebalance", def.AutoRebalance, "let the auditor move closed ledgers' copies from the fullest bookies to the emptiest by itself, every --rebalance-interval")
	f.Duration("rebalance-interval", def.RebalanceInterval, "how often an automatic rebalance may run")
	f.Float64("rebalance-target-spread", def.RebalanceTargetSpread, "rebalancing stops when (max - min) / mean of the bookies' usage is at most this")
	return cmd
}

// autorecoveryMetrics gathers the instance's metrics with the runtime's.
func autorecoveryMetrics(s *autorecovery.Service) prometheus.Gatherer {
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.Collector())
	return prometheus.Gatherers{reg, ops.RuntimeMetrics()}
}
