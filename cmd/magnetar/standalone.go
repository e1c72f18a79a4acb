package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/internal/bytesize"
	"github.com/magnetar-io/magnetar/internal/config"
	"github.com/magnetar-io/magnetar/internal/standalone"
)

func newStandaloneCmd(g *globals) *cobra.Command {
	def := standalone.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "standalone",
		Short: "Run a whole cluster in one process (embedded etcd, bookies and a broker)",
		Long: `Run Magnetar on one machine: an embedded etcd, bookies and a broker in one
process, with all data under --data-dir. Clients connect to
magnetar://127.0.0.1:6650, the admin API is on http://127.0.0.1:8080. Stop it
with Ctrl-C; starting it again on the same data directory keeps everything.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := standalone.DefaultConfig()
			if err := config.Load(cmd.Flags(), g.config, &cfg); err != nil {
				return err
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			defer log.Sync()
			// The budget is the runtime's soft limit: the garbage
			// collector works harder near it instead of letting the heap
			// grow past it. In a cgo build, Pebble allocates memtables
			// and block caches with malloc, outside the Go heap: those
			// come off the Go runtime's share.
			limitFromEnv := os.Getenv("GOMEMLIMIT") != ""
			goLimit := goMemoryLimit(cfg.Budget())
			if !limitFromEnv {
				defer debug.SetMemoryLimit(debug.SetMemoryLimit(goLimit)) // restored for tests that run commands in-process
			}
			s, err := standalone.Start(cmd.Context(), cfg, log)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			abs, _ := filepath.Abs(cfg.DataDir)
			fmt.Fprintf(out, "Magnetar standalone is running (data in %s)\n", abs)
			scheme, http := "magnetar", "http"
			if cfg.TLSCertFile != "" {
				scheme, http = "magnetar+ssl", "https"
			}
			fmt.Fprintf(out, "  clients           %s://%s\n", scheme, s.Broker.ID())
			if a := s.Broker.AdvertisedPulsarAddr(); a != "" {
				ps := "pulsar"
				if cfg.TLSCertFile != "" {
					ps = "pulsar+ssl"
				}
				fmt.Fprintf(out, "  Pulsar clients    %s://%s\n", ps, a)
			} else if cfg.TLSCertFile == "" {
				fmt.Fprintf(out, "  Pulsar clients    pulsar://%s\n", s.Broker.ID())
			}
			fmt.Fprintf(out, "  admin (HTTP)      %s://%s\n", http, s.Broker.AdvertisedHTTPAddr())
			fmt.Fprintf(out, "  metastore (etcd)  %s\n", s.Etcd.Endpoints()[0])
			for _, b := range s.Bookies {
				fmt.Fprintf(out, "  bookie            %s  (id %s)\n", b.AdvertisedAddress(), b.ID())
			}
			fmt.Fprintf(out, "  memory budget     %v\n", s.Budget)
			if limitFromEnv {
				fmt.Fprintf(out, "                    (the Go runtime's limit is GOMEMLIMIT=%s)\n", os.Getenv("GOMEMLIMIT"))
			} else if goLimit != s.Budget.Total {
				fmt.Fprintf(out, "                    (the Go runtime's limit is %v: memtables and block caches are outside its heap)\n", bytesize.Size(goLimit))
			}
			fmt.Fprintln(out, "Press Ctrl-C to stop.")
			<-cmd.Context().Done()
			fmt.Fprintln(out, "Stopping.")
			return s.Close()
		},
	}
	f := cmd.Flags()
	f.String("data-dir", def.DataDir, "directory for all data")
	f.Int("bookies", def.Bookies, "number of bookies")
	f.String("metastore-listen", def.MetastoreListen, "client address of the embedded etcd")
	f.String("bookie-listen", def.BookieListen, "address of the first bookie; bookie i uses port+i (port 0: free ports)")
	f.Int("max-entry-size", def.MaxEntrySize, "largest entry (message or batch) accepted, in bytes")
	f.Bool("entry-log", def.EntryLog, "the bookies store entries in an append-only log written once, with Pebble as the index (a data directory that used it keeps needing it)")
	f.Duration("entry-log-sync-interval", def.EntryLogSyncInterval, "the bookies' least time between the starts of two writes and syncs of the entry log: fewer, larger I/O requests under load, an add may wait this much longer; 0: sync as soon as the last ended; in 0..1s, e.g. 4ms")
	f.Bool("entry-log-direct-io", def.EntryLogDirectIO, "the bookies write the entry log with direct I/O, around the page cache (where the filesystem has it; not tmpfs)")
	f.Int("entry-log-recycle-files", def.EntryLogRecycleFiles, "the bookies' entry log files no ledger needs kept for reuse instead of deleted: overwriting syncs faster than appending, but may make the tail worse (measure on your disk); 0: delete them; in 0..64")
	sizeFlag(f, "entry-log-checkpoint-bytes", def.EntryLogCheckpointBytes, "the bookies' entry log written between two checkpoints (flushes of the index): bounds the replay at restart (about 1.5s per GiB) and how long files of deleted ledgers stay; each checkpoint briefly stalls the log's syncs; e.g. 1GiB")
	f.String("broker-listen", def.BrokerListen, "client (gRPC) address of the broker")
	f.String("http", def.HTTPListen, "admin REST address of the broker (also /healthz, /readyz and /metrics)")
	f.String("advertised-address", def.AdvertisedAddress, "broker address clients are sent to, HOST:PORT (default: --broker-listen, with 127.0.0.1 for 0.0.0.0)")
	f.String("pulsar-listen", def.PulsarListen, "also serve Pulsar's binary protocol on this HOST:PORT, with TLS when TLS is on (pulsar+ssl://); without TLS --broker-listen speaks it too")
	f.Duration("lost-bookie-recovery-delay", def.LostBookieRecoveryDelay, "with several bookies: how long one must be gone before its copies are re-replicated to the others")
	f.String("cluster-name", def.ClusterName, "the cluster's name: the label of the metrics, and the one cluster the admin API (Pulsar's /admin/v2/clusters) knows")
	f.Duration("stats-interval", def.StatsInterval, "window of the rates and latency buckets in /metrics")
	f.Duration("retention-check-interval", def.RetentionCheckInterval, "how often the broker applies TTL, retention and backlog quotas")
	f.String("key-shared-selector", def.KeySharedSelector, "how key_shared consumers share the keys: consistent-hashing or auto-split (Pulsar's subscriptionKeySharedUseConsistentHashing=false)")
	f.String("schema-compatibility-strategy", def.SchemaCompatibilityStrategy, "how a new version of a topic's Avro or JSON schema must relate to the versions kept: "+strings.Join(broker.SchemaStrategies, ", "))
	f.Bool("local-bookies", def.LocalBookies, "the broker hands its adds to the bookies of this process by function calls, not gRPC over loopback (false: over gRPC, as between a cluster's processes)")
	f.Bool("pprof", def.Pprof, "serve Go's profiles under /debug/pprof/ on the admin port")
	sizeFlag(f, "memory-budget", def.MemoryBudget, "memory of the whole process, shared out among the broker's cache and the bookies' memtables, block caches and in-flight adds, and the Go runtime's soft limit (unless GOMEMLIMIT is set), e.g. 512MiB or 2GiB")
	addAuthServerFlags(f)
	addAuthorizationFlags(f)
	addTLSServerFlags(f)
	return cmd
}

// goMemoryLimit is the Go runtime's share of a standalone's budget: all of
// it, less Pebble's manually allocated memory (memtables, block caches)
// when the binary is built with cgo (Pebble then allocates it with malloc,
// outside the Go heap; without cgo, on the Go heap).
func goMemoryLimit(b standalone.Budget) int64 {
	if !pebbleMallocs {
		return b.Total
	}
	return b.Total - int64(b.Bookies)*(b.Bookie.Memtables+b.Bookie.BlockCache)
}
