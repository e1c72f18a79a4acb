package broker

import (
	"errors"
	"fmt"
	"github.com/magnetar-io/magnetar/internal/auth"
	"github.com/magnetar-io/magnetar/metastore"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/magnetar-io/magnetar/internal/netaddr"
)

// Config is a broker's configuration, filled from flags, MAGNETAR_*
// environment variables and the YAML file (see cmd/magnetar).
type Config struct {
	// Listen is the client (gRPC) address. Default 127.0.0.1:6650.
	Listen string `mapstructure:"listen" yaml:"listen"`
	// HTTPListen is the admin REST address. Default 127.0.0.1:8080.
	HTTPListen string `mapstructure:"http" yaml:"http"`
	// AdvertisedAddress is the client address others are sent to; its id
	// among brokers. Default: the bound listen address.
	AdvertisedAddress string `mapstructure:"advertised-address" yaml:"advertised-address"`
	// AdvertisedHTTPAddress is the admin address other brokers and admin
	// redirects use. Default: the bound HTTP address, or, when that binds
	// every interface (0.0.0.0), the advertised address's host with the
	// HTTP port.
	AdvertisedHTTPAddress string `mapstructure:"advertised-http-address" yaml:"advertised-http-address"`
	// PulsarListen, when set, is a port of its own for Pulsar's binary
	// protocol, with TLS when the broker has it (pulsar+ssl://). Without
	// TLS, the client port speaks Pulsar's protocol too.
	PulsarListen string `mapstructure:"pulsar-listen" yaml:"pulsar-listen"`
	// AdvertisedPulsarAddress is the address lookups send Pulsar's clients
	// to. Default: the bound PulsarListen address, with the advertised
	// address's host for a host that binds every interface.
	AdvertisedPulsarAddress string `mapstructure:"advertised-pulsar-address" yaml:"advertised-pulsar-address"`
	// Metastore lists the etcd endpoints.
	Metastore []string `mapstructure:"metastore" yaml:"metastore"`
	// MetastoreRoot is the key prefix of this cluster. Default /magnetar.
	MetastoreRoot string `mapstructure:"metastore-root" yaml:"metastore-root"`
	// Metastore credentials: etcd's TLS and authentication.
	metastore.Credentials `mapstructure:",squash" yaml:",inline"`
	// SessionTTL of the broker's registration and topic ownership.
	// Default 10s.
	SessionTTL time.Duration `mapstructure:"session-ttl" yaml:"session-ttl"`
	// BookieAddresses maps bookie ids to the addresses this broker dials
	// instead of the registered ones (a NAT, a proxy). As a flag or
	// environment variable: ID=HOST:PORT,... In the YAML file the keys are
	// read lower-cased (viper), so only lower-case ids can be mapped there.
	BookieAddresses map[string]string `mapstructure:"bookie-addresses" yaml:"bookie-addresses"`

	// Replication of new ledgers, for namespaces that do not set their
	// own persistence policy: each entry is written to WriteQuorum of the
	// Ensemble bookies and acknowledged once AckQuorum of them have it.
	// Default 2/2/2 (Pulsar's): every message on 2 bookies; at least 2
	// bookies are needed to write at all. Need Ensemble >= WriteQuorum >=
	// AckQuorum >= 1.
	Ensemble    int `mapstructure:"ensemble" yaml:"ensemble"`
	WriteQuorum int `mapstructure:"write-quorum" yaml:"write-quorum"`
	AckQuorum   int `mapstructure:"ack-quorum" yaml:"ack-quorum"`
	// RetentionTime and RetentionSize of consumed data (0: none kept;
	// negative: no limit).
	RetentionTime time.Duration `mapstructure:"retention-time" yaml:"retention-time"`
	RetentionSize int64         `mapstructure:"retention-size" yaml:"retention-size"`
	// MessageTTL: unacknowledged messages older than this are
	// acknowledged by the broker (0: never).
	MessageTTL time.Duration `mapstructure:"message-ttl" yaml:"message-ttl"`
	// Deduplication of re-sent messages by producer name and sequence id.
	Deduplication bool `mapstructure:"deduplication" yaml:"deduplication"`
	// DedupProducerInactivityTimeout: the deduplication state of a
	// producer that has been disconnected this long is forgotten; a
	// producer of that name that comes back starts afresh. Default 6h
	// (Pulsar's brokerDeduplicationProducerInactivityTimeoutMinutes).
	DedupProducerInactivityTimeout time.Duration `mapstructure:"dedup-producer-inactivity-timeout" yaml:"dedup-producer-inactivity-timeout"`
	// DedupMaxProducers caps the producer names in a partition's
	// deduplication snapshot (an etcd value, also capped at 512 KiB).
	// Past either cap the least recently active disconnected producers
	// are forgotten. Default 10,000 (Pulsar's
	// brokerDeduplicationMaxNumberOfProducers).
	DedupMaxProducers int `mapstructure:"dedup-max-producers" yaml:"dedup-max-producers"`
	// DedupSnapshotEntries and DedupSnapshotInterval: a partition's
	// deduplication snapshot is written once this many entries were
	// stored since the last one, or this long after it if any was (and
	// when producers were forgotten, and on unload). A load replays the
	// entries after the snapshot, so this bounds the replay, not what is
	// deduplicated. Defaults 1,000 and 2m (Pulsar's
	// brokerDeduplicationEntriesInterval and
	// brokerDeduplicationSnapshotFrequencyInSeconds).
	DedupSnapshotEntries  int           `mapstructure:"dedup-snapshot-entries" yaml:"dedup-snapshot-entries"`
	DedupSnapshotInterval time.Duration `mapstructure:"dedup-snapshot-interval" yaml:"dedup-snapshot-interval"`
	// AllowAutoTopicCreation creates topics on first use.
	AllowAutoTopicCreation bool `mapstructure:"allow-auto-topic-creation" yaml:"allow-auto-topic-creation"`

	// MaxMessageSize caps a message (or batch): metadata plus payload, as
	// stored. Default 5 MiB; the bookies' --max-entry-size must be at least
	// this.
	MaxMessageSize int `mapstructure:"max-message-size" yaml:"max-message-size"`
	// Ledger rollover: Pulsar's defaults.
	MaxEntriesPerLedger int64         `mapstructure:"max-entries-per-ledger" yaml:"max-entries-per-ledger"`
	MaxSizePerLedger    int64         `mapstructure:"max-size-per-ledger" yaml:"max-size-per-ledger"`
	MinLedgerRollover   time.Duration `mapstructure:"min-ledger-rollover" yaml:"min-ledger-rollover"`
	MaxLedgerRollover   time.Duration `mapstructure:"max-ledger-rollover" yaml:"max-ledger-rollover"`
	// CacheSize is the tail cache for all topics. Default 256 MiB.
	CacheSize int64 `mapstructure:"cache-size" yaml:"cache-size"`
	// CursorPersistInterval: acknowledgements are persisted at least this
	// often (a restart redelivers at most about this much). Default 1s.
	CursorPersistInterval time.Duration `mapstructure:"cursor-persist-interval" yaml:"cursor-persist-interval"`
	// RetentionCheckInterval: how often consumed ledgers are trimmed and
	// expired messages acknowledged. Default 1m.
	RetentionCheckInterval time.Duration `mapstructure:"retention-check-interval" yaml:"retention-check-interval"`
	// Shared and Key_Shared subscriptions: a consumer holding this many
	// unacknowledged messages gets no more until it acknowledged half of
	// them; a subscription likewise (0: no limit). Pulsar's defaults,
	// 50,000 and 200,000.
	MaxUnackedMessagesPerConsumer     int `mapstructure:"max-unacked-messages-per-consumer" yaml:"max-unacked-messages-per-consumer"`
	MaxUnackedMessagesPerSubscription int `mapstructure:"max-unacked-messages-per-subscription" yaml:"max-unacked-messages-per-subscription"`
	// DelayedDeliveryMaxIndexed bounds the delayed messages a Shared or
	// Key_Shared subscription indexes in memory; later ones are found
	// again by scanning the partition when there is room. Default 100,000.
	DelayedDeliveryMaxIndexed int `mapstructure:"delayed-delivery-max-indexed" yaml:"delayed-delivery-max-indexed"`
	// KeySharedSelector is how a Key_Shared subscription's auto-split
	// consumers share the key hashes: KeySharedConsistentHashing (the
	// default, Pulsar's since 2.x: each consumer has points on a ring, so
	// one that joins or leaves moves about 1/n of the keys), or
	// KeySharedAutoSplit (Pulsar's subscriptionKeySharedUseConsistentHashing
	// =false: a joining consumer takes the lower half of the largest
	// range), which Pulsar's own client tests are run against.
	KeySharedSelector string `mapstructure:"key-shared-selector" yaml:"key-shared-selector"`
	// SchemaCompatibilityStrategy is how a new version of a topic's Avro
	// or JSON schema must relate to the versions kept (schema.go): one of
	// SchemaStrategies. Default FULL, Pulsar's broker default.
	SchemaCompatibilityStrategy string `mapstructure:"schema-compatibility-strategy" yaml:"schema-compatibility-strategy"`
	// LoadBalanceInterval: how often a broker compares its load with the
	// others' and unloads partitions if it has clearly more (0: never).
	// Default 1m.
	LoadBalanceInterval time.Duration `mapstructure:"load-balance-interval" yaml:"load-balance-interval"`
	// ShutdownTimeout bounds a clean stop (SIGTERM): unloading every
	// partition (closing its ledger, persisting its cursors), draining
	// clients, releasing the session. What is not done by then is left to
	// the next owners' recovery, as after a crash. Default 10s.
	ShutdownTimeout time.Duration `mapstructure:"shutdown-timeout" yaml:"shutdown-timeout"`

	// Metrics (GET /metrics on the admin port). ClusterName is their
	// cluster label. StatsInterval is the window of rates and latency
	// buckets (Pulsar's statsUpdateFrequencyInSecs), default 1m.
	// MetricsTopicLevel exports per topic and subscription (Pulsar's
	// exposeTopicLevelMetricsInPrometheus), else per namespace; past
	// MetricsMaxTopics loaded topics they are per namespace anyway, to
	// bound the series. Pprof serves /debug/pprof/ on the admin port.
	ClusterName       string        `mapstructure:"cluster-name" yaml:"cluster-name"`
	StatsInterval     time.Duration `mapstructure:"stats-interval" yaml:"stats-interval"`
	MetricsTopicLevel bool          `mapstructure:"metrics-topic-level" yaml:"metrics-topic-level"`
	MetricsMaxTopics  int           `mapstructure:"metrics-max-topics" yaml:"metrics-max-topics"`
	Pprof             bool          `mapstructure:"pprof" yaml:"pprof"`

	// Security: authentication, authorization and TLS of the client and
	// admin ports.
	Security `mapstructure:",squash" yaml:",inline"`
	// ClientAuthTokenFile holds the token the broker presents to other
	// brokers (their admin API) and to bookies; it is read again when it
	// changes, so that it can be
	// rotated. With authorization on, its role must be a superuser.
	ClientAuthTokenFile string `mapstructure:"client-auth-token-file" yaml:"client-auth-token-file"`
	// BookieTLSEnabled: the bookies serve TLS; they are verified with
	// TLSTrustCertsFile's authorities (the system's if none), and
	// TLSCertFile is presented if it is a client certificate. The token of
	// ClientAuthTokenFile is presented to them too (their --allowed-roles
	// must hold its role).
	BookieTLSEnabled bool `mapstructure:"bookie-tls-enabled" yaml:"bookie-tls-enabled"`
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Listen:                 "127.0.0.1:6650",
		HTTPListen:             "127.0.0.1:8080",
		MetastoreRoot:          "/magnetar",
		SessionTTL:             10 * time.Second,
		Ensemble:               2,
		WriteQuorum:            2,
		AckQuorum:              2,
		AllowAutoTopicCreation: true,
		MaxMessageSize:         5 << 20,
		MaxEntriesPerLedger:    50000,
		MaxSizePerLedger:       2 << 30,
		MinLedgerRollover:      10 * time.Minute,
		MaxLedgerRollover:      4 * time.Hour,
		CacheSize:              256 << 20,
		CursorPersistInterval:  time.Second,
		RetentionCheckInterval: time.Minute,

		DedupProducerInactivityTimeout: 6 * time.Hour,
		DedupMaxProducers:              10000,
		DedupSnapshotEntries:           1000,
		DedupSnapshotInterval:          2 * time.Minute,

		MaxUnackedMessagesPerConsumer:     50000,
		MaxUnackedMessagesPerSubscription: 200000,
		DelayedDeliveryMaxIndexed:         100000,
		KeySharedSelector:                 KeySharedConsistentHashing,
		SchemaCompatibilityStrategy:       SchemaFull,
		LoadBalanceInterval:               time.Minute,
		ShutdownTimeout:                   10 * time.Second,

		ClusterName:       "magnetar",
		StatsInterval:     time.Minute,
		MetricsTopicLevel: true,
		MetricsMaxTopics:  10000,
	}
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	var errs []error
	addr := func(flag, value string, check func(string) error) {
		if err := check(value); err != nil {
			errs = append(errs, fmt.Errorf("--%s %q: %w", flag, value, err))
		}
	}
	addr("listen", c.Listen, netaddr.Listen)
	if c.HTTPListen != "" { // empty: no admin API
		addr("http", c.HTTPListen, netaddr.Listen)
	}
	if c.AdvertisedAddress != "" {
		addr("advertised-address", c.AdvertisedAddress, netaddr.Dial)
	}
	if c.AdvertisedAddress == "" && netaddr.Wildcard(c.Listen) {
		errs = append(errs, fmt.Errorf("--listen %q binds every interface: set --advertised-address to the HOST:PORT clients dial", c.Listen))
	}
	if c.AdvertisedHTTPAddress != "" {
		addr("advertised-http-address", c.AdvertisedHTTPAddress, netaddr.Dial)
	}
	if c.PulsarListen != "" {
		addr("pulsar-listen", c.PulsarListen, netaddr.Listen)
	}
	if c.AdvertisedPulsarAddress != "" {
		if c.PulsarListen == "" {
			errs = append(errs, errors.New("--advertised-pulsar-address needs --pulsar-listen"))
		}
		addr("advertised-pulsar-address", c.AdvertisedPulsarAddress, netaddr.Dial)
	}
	if len(c.Metastore) == 0 {
		errs = append(errs, errors.New("no metastore (etcd) endpoints given: --metastore HOST:PORT,..."))
	}
	for _, e := range c.Metastore {
		addr("metastore", e, netaddr.Endpoint)
	}
	ids := slices.Sorted(maps.Keys(c.BookieAddresses))
	for _, id := range ids {
		if err := netaddr.Dial(c.BookieAddresses[id]); err != nil {
			errs = append(errs, fmt.Errorf("--bookie-addresses %s=%q: %w", id, c.BookieAddresses[id], err))
		}
	}
	if c.SessionTTL < time.Second {
		errs = append(errs, fmt.Errorf("session TTL %v is below 1s", c.SessionTTL))
	}
	if !(c.Ensemble >= c.WriteQuorum && c.WriteQuorum >= c.AckQuorum && c.AckQuorum >= 1) {
		errs = append(errs, fmt.Errorf("--ensemble %d, --write-quorum %d, --ack-quorum %d: need ensemble >= write quorum >= ack quorum >= 1",
			c.Ensemble, c.WriteQuorum, c.AckQuorum))
	}
	if c.MaxMessageSize < 1024 || c.MaxMessageSize > 64<<20 {
		errs = append(errs, fmt.Errorf("max message size %d must be in 1 KiB..64 MiB", c.MaxMessageSize))
	}
	if c.MaxEntriesPerLedger < 1 || c.MaxSizePerLedger < 1 {
		errs = append(errs, errors.New("ledger rollover limits must be positive"))
	}
	if c.CursorPersistInterval <= 0 || c.RetentionCheckInterval <= 0 {
		errs = append(errs, errors.New("intervals must be positive"))
	}
	if c.MaxUnackedMessagesPerConsumer < 0 || c.MaxUnackedMessagesPerSubscription < 0 {
		errs = append(errs, errors.New("negative unacknowledged message limit"))
	}
	if c.DelayedDeliveryMaxIndexed < 2 {
		errs = append(errs, fmt.Errorf("delayed delivery index of %d messages: at least 2", c.DelayedDeliveryMaxIndexed))
	}
	if c.KeySharedSelector != KeySharedConsistentHashing && c.KeySharedSelector != KeySharedAutoSplit {
		errs = append(errs, fmt.Errorf("--key-shared-selector %q: want %s or %s", c.KeySharedSelector, KeySharedConsistentHashing, KeySharedAutoSplit))
	}
	if !slices.Contains(SchemaStrategies, c.SchemaCompatibilityStrategy) {
		errs = append(errs, fmt.Errorf("--schema-compatibility-strategy %q: want one of %s", c.SchemaCompatibilityStrategy, strings.Join(SchemaStrategies, ", ")))
	}
	if c.ClusterName == "" || len(c.ClusterName) > maxNameLength {
		errs = append(errs, fmt.Errorf("--cluster-name %q: 1 to %d bytes", c.ClusterName, maxNameLength))
	}
	if c.StatsInterval < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("--stats-interval %v: at least 100ms", c.StatsInterval))
	}
	if err := c.Security.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.MetricsMaxTopics < 0 {
		errs = append(errs, fmt.Errorf("--metrics-max-topics %d: must not be negative", c.MetricsMaxTopics))
	}
	if c.DedupProducerInactivityTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--dedup-producer-inactivity-timeout %v: must be positive", c.DedupProducerInactivityTimeout))
	}
	if c.DedupMaxProducers < 1 {
		errs = append(errs, fmt.Errorf("--dedup-max-producers %d: at least 1", c.DedupMaxProducers))
	}
	if c.DedupSnapshotEntries < 1 || c.DedupSnapshotInterval <= 0 {
		errs = append(errs, fmt.Errorf("--dedup-snapshot-entries %d, --dedup-snapshot-interval %v: must be positive",
			c.DedupSnapshotEntries, c.DedupSnapshotInterval))
	}
	if c.ShutdownTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--shutdown-timeout %v must be positive", c.ShutdownTimeout))
	}
	if c.CacheSize < 0 {
		errs = append(errs, errors.New("negative cache size"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("broker config: %w", err)
	}
	return nil
}

// Security is the configuration of who may reach a broker and what they
// may do; standalone takes the same.
type Security struct {
	// Authentication and TLS of the client and admin ports (with
	// authentication on, a verified client certificate's common name is
	// the role; TLSTrustCertsFile also holds the authorities of other
	// brokers' and of bookies' certificates).
	auth.ServerConfig `mapstructure:",squash" yaml:",inline"`
	// AuthenticateMetricsEndpoint: /metrics needs credentials too (the
	// health probes never do).
	AuthenticateMetricsEndpoint bool `mapstructure:"authenticate-metrics-endpoint" yaml:"authenticate-metrics-endpoint"`

	// Authorization (needs authentication; authz.go): SuperuserRoles may
	// do anything; a tenant's admin roles administer the tenant and use
	// its topics; other roles what the namespace's and topic's grants
	// allow.
	AuthorizationEnabled bool     `mapstructure:"authorization-enabled" yaml:"authorization-enabled"`
	SuperuserRoles       []string `mapstructure:"superuser-roles" yaml:"superuser-roles"`
}

// Validate checks the security settings.
func (c Security) Validate() error {
	errs := []error{c.ServerConfig.Validate()}
	if c.AuthenticateMetricsEndpoint && !c.AuthenticationEnabled {
		errs = append(errs, errors.New("--authenticate-metrics-endpoint without --authentication-enabled: set it, or drop it"))
	}
	if c.AuthorizationEnabled && !c.AuthenticationEnabled {
		errs = append(errs, errors.New("--authorization-enabled needs --authentication-enabled: roles come from credentials"))
	}
	if len(c.SuperuserRoles) > 0 && !c.AuthorizationEnabled {
		errs = append(errs, errors.New("--superuser-roles without --authorization-enabled: set it, or drop them"))
	}
	for _, r := range c.SuperuserRoles {
		if r == "" || len(r) > maxNameLength {
			errs = append(errs, fmt.Errorf("--superuser-roles: role %q must be 1 to %d bytes", r, maxNameLength))
		}
	}
	return errors.Join(errs...)
}
