package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/internal/config"
	"github.com/magnetar-io/magnetar/internal/powerloss"
)

// loadBookieConfig fills a bookie's configuration from its flags, MAGNETAR_*
// environment variables and the YAML file at path, and validates it.
func loadBookieConfig(flags *pflag.FlagSet, path string) (bookie.Config, error) {
	cfg := bookie.DefaultConfig()
	if err := config.Load(flags, path, &cfg); err != nil {
		return cfg, err
	}
	return cfg, cfg.Validate()
}

func newBookieCmd(g *globals) *cobra.Command {
	def := bookie.DefaultConfig()
	var simulatePowerLoss bool
	cmd := &cobra.Command{
		Use:   "bookie",
		Short: "Run a bookie (storage node)",
		Long: `Run a bookie: it stores ledger entries on local disk (Pebble) and registers
itself in the metastore (etcd). Every flag can also be set with a MAGNETAR_*
environment variable (--data-dir: MAGNETAR_DATA_DIR) or in the --config file.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadBookieConfig(cmd.Flags(), g.config)
			if err != nil {
				return err
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			defer log.Sync()
			bookie.Version = version
			opts := []bookie.Option{bookie.WithLogger(log)}
			var mem *powerloss.FS
			if simulatePowerLoss {
				if mem, err = powerloss.Load(cfg.DataDir); err != nil {
					return err
				}
				opts = append(opts, bookie.WithFS(mem))
				powerLost := make(chan os.Signal, 1)
				signal.Notify(powerLost, syscall.SIGUSR1)
				go func() {
					<-powerLost
					// Only synced data reaches the disk; nothing is closed,
					// and no later sync completes (nor is acknowledged).
					if err := powerloss.Save(mem.PowerLoss(), cfg.DataDir); err != nil {
						fmt.Fprintln(os.Stderr, "simulated power loss:", err)
					}
					os.Exit(137)
				}()
			}
			s, err := bookie.Start(cmd.Context(), cfg, opts...)
			if err != nil {
				return err
			}
			log.Info("serving", zap.String("id", s.ID()), zap.String("address", s.AdvertisedAddress()), zap.String("listen", s.Addr()))
			<-cmd.Context().Done()
			log.Info("stopping")
			err = s.Close()
			if mem != nil {
				err = errors.Join(err, powerloss.Save(mem.MemFS, cfg.DataDir))
			}
			return err
		},
	}
	f := cmd.Flags()
	f.String("listen", def.Listen, "gRPC listen address")
	f.String("http", def.HTTPListen, "HTTP address for the health endpoints /healthz and /readyz and /metrics, HOST:PORT (empty: none)")
	f.Bool("pprof", def.Pprof, "serve Go's profiles under /debug/pprof/ on the HTTP port")
	f.String("advertised-address", def.AdvertisedAddress, "address clients dial (default: the listen address)")
	f.String("id", def.ID, "bookie id in ledger metadata, fixed for the life of the data directory (default: the advertised address)")
	f.String("data-dir", def.DataDir, "data directory")
	f.StringSlice("metastore", def.Metastore, "etcd endpoints, comma-separated (required)")
	f.String("metastore-root", def.MetastoreRoot, "key prefix of this cluster in etcd")
	addMetastoreFlags(f)
	f.Int("max-entry-size", def.MaxEntrySize, "largest entry accepted, in bytes")
	f.Duration("session-ttl", def.SessionTTL, "TTL of the registration lease")
	f.Duration("registration-interval", def.RegistrationInterval, "how often the load report is refreshed")
	f.Duration("gc-interval", def.GCInterval, "how often ledgers deleted from metadata are removed")
	f.Bool("value-separation", def.ValueSeparation, "keep payloads of 1 KiB and more in Pebble blob files")
	f.Int64("max-inflight-bytes", def.MaxInflightBytes, "payload bytes of adds held at once, all clients together; past it the bookie stops reading requests")
	sizeFlag(f, "memtable-size", def.MemtableSize, "size of one Pebble memtable (two are held at most), e.g. 64MiB")
	sizeFlag(f, "block-cache-size", def.BlockCacheSize, "Pebble's block cache, e.g. 64MiB")
	f.Bool("storage-compression", def.StorageCompression, "compress what the storage engine writes (Snappy); off: entries are stored as written (producers compress)")
	f.Bool("entry-log", def.EntryLog, "store entries in an append-only log written once, with Pebble as the index (a data directory that used it keeps needing it)")
	sizeFlag(f, "entry-log-file-size", def.EntryLogFileSize, "size at which the entry log starts a new file, e.g. 128MiB")
	sizeFlag(f, "entry-log-checkpoint-bytes", def.EntryLogCheckpointBytes, "entry log written between two checkpoints (flushes of the index): bounds the replay at restart (about 1.5s per GiB) and how long files of deleted ledgers stay; each checkpoint briefly stalls the log's syncs, so rarer can be a lower p99; one also comes every minute and once the index written reaches a quarter of --memtable-size; e.g. 1GiB")
	f.Int("entry-log-recycle-files", def.EntryLogRecycleFiles, "entry log files no ledger needs kept for reuse instead of deleted: overwriting syncs faster than appending, but may make the tail worse (measure on your disk); 0: delete them; in 0..64")
	f.Duration("entry-log-sync-interval", def.EntryLogSyncInterval, "least time between the starts of two writes and syncs of the entry log: adds that come meanwhile share the next, so a loaded bookie makes fewer, larger I/O requests, and an add may wait this much longer (a writer's that waits for each one too); 0: sync as soon as the last ended; in 0..1s, e.g. 4ms")
	f.Bool("entry-log-direct-io", def.EntryLogDirectIO, "write the entry log with direct I/O, around the page cache (where the filesystem has it; not tmpfs)")
	f.Float64("entry-log-compaction-threshold", def.EntryLogCompactionThreshold, "an entry log file whose live entries take less than this share of it is compacted (its live entries copied, the file removed); in [0, 1), 0: never")
	f.Float64("disk-usage-threshold", def.DiskUsageThreshold, "share of the data directory's filesystem in use (as df counts it) above which the bookie turns read-only: it refuses new writes and serves reads; in (0, 1]")
	f.Float64("disk-usage-low-threshold", def.DiskUsageLowThreshold, "share in use below which a bookie read-only for disk usage is writable again; below --disk-usage-threshold")
	f.Duration("disk-check-interval", def.DiskCheckInterval, "how often disk usage is checked")
	f.String("rack", def.Rack, "rack or zone of this bookie: placement spreads each write quorum over racks")
	f.String("host-label", def.HostLabel, "identity of the machine this bookie runs on: placement never puts two bookies with the same host label in one write quorum (default: unknown)")
	f.Bool("autorecovery", def.Autorecovery, "run autorecovery (auditor candidate and re-replication worker) inside this bookie")
	f.Duration("lost-bookie-recovery-delay", def.LostBookieRecoveryDelay, "how long a bookie must stay unregistered before its ledgers are re-replicated (0: at once)")
	f.Duration("autorecovery-check-interval", def.AutorecoveryCheckInterval, "how often the auditor compares every ledger's metadata with what each bookie holds (0: never)")
	f.Int64("rereplication-max-bytes-per-sec", def.RereplicationMaxBytesPerSec, "throttle of this bookie's re-replication worker in bytes per second (0: unlimited)")
	f.Bool("auto-rebalance", def.AutoRebalance, "let the auditor move closed ledgers' copies from the fullest bookies to the emptiest by itself, every --rebalance-interval")
	f.Duration("rebalance-interval", def.RebalanceInterval, "how often an automatic rebalance may run")
	f.Float64("rebalance-target-spread", def.RebalanceTargetSpread, "rebalancing stops when (max - min) / mean of the bookies' usage is at most this")
	addAuthServerFlags(f)
	addTLSServerFlags(f)
	f.StringSlice("allowed-roles", def.AllowedRoles, "with authentication: the roles that may use this bookie (brokers' and autorecovery's)")
	f.String("client-auth-token-file", "", "token this bookie's autorecovery presents to other bookies (read again when it changes)")
	f.BoolVar(&simulatePowerLoss, "simulate-power-loss", false, "for fault tests only: keep the data directory in memory; SIGUSR1 writes only synced data back and exits (a power loss), a clean stop writes everything back")
	return cmd
}
