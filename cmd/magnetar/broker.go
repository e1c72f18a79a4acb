package main

import (
	"strings"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/internal/config"
)

func newBrokerCmd(g *globals) *cobra.Command {
	def := broker.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "broker",
		Short: "Run a broker (serves topics; keeps no data)",
		Long: `Run a broker against an etcd cluster and its bookies. Every flag can also be
set with a MAGNETAR_* environment variable (--http: MAGNETAR_HTTP) or in the
--config file.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := broker.DefaultConfig()
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
			s, err := broker.Start(cmd.Context(), cfg, broker.WithLogger(log))
			if err != nil {
				return err
			}
			log.Info("serving", zap.String("clients", s.Addr()), zap.String("admin", s.HTTPAddr()))
			<-cmd.Context().Done()
			log.Info("stopping")
			return s.Close()
		},
	}
	f := cmd.Flags()
	f.String("listen", def.Listen, "client (gRPC) listen address, HOST:PORT (port 0: a free port)")
	f.String("http", def.HTTPListen, "admin REST listen address, HOST:PORT (empty: no admin API)")
	f.String("advertised-address", def.AdvertisedAddress, "HOST:PORT clients are sent to (default: the listen address)")
	f.String("pulsar-listen", def.PulsarListen, "also serve Pulsar's binary protocol on this HOST:PORT, with TLS when the broker has it (pulsar+ssl://); without TLS --listen speaks it too")
	f.String("advertised-pulsar-address", def.AdvertisedPulsarAddress, "HOST:PORT Pulsar's clients are sent to (default: --pulsar-listen)")
	f.String("advertised-http-address", def.AdvertisedHTTPAddress, "HOST:PORT other brokers and admin redirects use for this broker's admin API (default: --http, or with 0.0.0.0 the host of --advertised-address)")
	f.StringSlice("metastore", def.Metastore, "etcd endpoints, comma-separated (required)")
	f.String("metastore-root", def.MetastoreRoot, "key prefix of this cluster in etcd")
	addMetastoreFlags(f)
	f.Duration("session-ttl", def.SessionTTL, "TTL of the broker's registration and topic ownership")
	f.StringToString("bookie-addresses", nil, "dial these bookies at other addresses than they registered: ID=HOST:PORT,... (a NAT, a proxy)")
	f.Int("ensemble", def.Ensemble, "default ensemble of new ledgers: the bookies a ledger's messages are spread over (at least --write-quorum)")
	f.Int("write-quorum", def.WriteQuorum, "default write quorum: copies of each message (at least --ack-quorum)")
	f.Int("ack-quorum", def.AckQuorum, "default ack quorum: copies written before a message is acknowledged (at least 1)")
	f.Duration("retention-time", def.RetentionTime, "default retention of consumed messages (negative: forever)")
	f.Int64("retention-size", def.RetentionSize, "default retention size of consumed messages in bytes (negative: no limit)")
	f.Duration("message-ttl", def.MessageTTL, "default message TTL (0: none)")
	f.Bool("deduplication", def.Deduplication, "deduplicate re-sent messages by default")
	f.Duration("dedup-producer-inactivity-timeout", def.DedupProducerInactivityTimeout, "deduplication: forget a producer disconnected this long (it starts afresh if it comes back)")
	f.Int("dedup-max-producers", def.DedupMaxProducers, "deduplication: producers a partition's snapshot names at most (past it the least recently active disconnected ones are forgotten)")
	f.Int("dedup-snapshot-entries", def.DedupSnapshotEntries, "deduplication: snapshot a partition's state after this many entries (bounds the replay on load)")
	f.Duration("dedup-snapshot-interval", def.DedupSnapshotInterval, "deduplication: snapshot a partition's state at least this often while it changes")
	f.Bool("allow-auto-topic-creation", def.AllowAutoTopicCreation, "create topics on first use")
	f.Int("max-message-size", def.MaxMessageSize, "largest message (or batch) accepted, in bytes")
	f.Int64("max-entries-per-ledger", def.MaxEntriesPerLedger, "ledger rollover: entries")
	f.Int64("max-size-per-ledger", def.MaxSizePerLedger, "ledger rollover: bytes")
	f.Duration("min-ledger-rollover", def.MinLedgerRollover, "ledger rollover: minimum age")
	f.Duration("max-ledger-rollover", def.MaxLedgerRollover, "ledger rollover: maximum age")
	f.Int64("cache-size", def.CacheSize, "tail cache for all topics, in bytes")
	f.Duration("cursor-persist-interval", def.CursorPersistInterval, "how often acknowledgements are persisted")
	f.Duration("retention-check-interval", def.RetentionCheckInterval, "how often TTL and retention are applied")
	f.Int("max-unacked-messages-per-consumer", def.MaxUnackedMessagesPerConsumer, "shared and key_shared: unacknowledged messages a consumer may hold (0: no limit)")
	f.Duration("load-balance-interval", def.LoadBalanceInterval, "how often a broker unloads partitions if it owns clearly more than the others (0: never)")
	f.Int("delayed-delivery-max-indexed", def.DelayedDeliveryMaxIndexed, "delayed messages a shared or key_shared subscription indexes in memory (more are found again by scanning)")
	f.String("key-shared-selector", def.KeySharedSelector, "how key_shared consumers share the keys: consistent-hashing (a joining consumer moves about 1/n of them) or auto-split (it takes half of the largest range, as Pulsar with subscriptionKeySharedUseConsistentHashing=false)")
	f.String("schema-compatibility-strategy", def.SchemaCompatibilityStrategy, "how a new version of a topic's Avro or JSON schema must relate to the versions kept: "+strings.Join(broker.SchemaStrategies, ", ")+" (Pulsar's)")
	f.Duration("shutdown-timeout", def.ShutdownTimeout, "a clean stop (SIGTERM) ends within this, whatever is unreachable; what is not done by then the next owners recover")
	f.Int("max-unacked-messages-per-subscription", def.MaxUnackedMessagesPerSubscription, "shared and key_shared: unacknowledged messages a subscription may have out (0: no limit)")
	f.String("cluster-name", def.ClusterName, "the cluster's name: the label of the metrics, and the one cluster the admin API (Pulsar's /admin/v2/clusters) knows")
	f.Duration("stats-interval", def.StatsInterval, "window of the rates and latency buckets in /metrics")
	f.Bool("metrics-topic-level", def.MetricsTopicLevel, "metrics per topic and subscription (false: per namespace)")
	f.Int("metrics-max-topics", def.MetricsMaxTopics, "with more topics loaded than this, metrics are per namespace (bounds the series)")
	f.Bool("pprof", def.Pprof, "serve Go's profiles under /debug/pprof/ on the admin port")
	addAuthServerFlags(f)
	addAuthorizationFlags(f)
	addTLSServerFlags(f)
	f.String("client-auth-token-file", "", "token this broker presents to other brokers' admin API and to bookies (read again when it changes)")
	f.Bool("bookie-tls-enabled", false, "the bookies serve TLS: verify them with --tls-trust-certs-file")
	return cmd
}
