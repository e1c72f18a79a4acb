package bookie

import (
	"errors"
	"fmt"
	"github.com/magnetar-io/magnetar/internal/auth"
	"github.com/magnetar-io/magnetar/metastore"
	"strings"
	"time"
	"unicode"

	"github.com/magnetar-io/magnetar/bookie/internal/storage"
	"github.com/magnetar-io/magnetar/internal/bytesize"
	"github.com/magnetar-io/magnetar/internal/netaddr"
)

// Config is a bookie's configuration. Flags, MAGNETAR_* environment
// variables and the YAML file all fill this struct (see cmd/magnetar).
type Config struct {
	// Listen is the gRPC address. Default 127.0.0.1:3181.
	Listen string `mapstructure:"listen" yaml:"listen"`
	// HTTPListen is the address of the HTTP port: /healthz and /readyz for
	// probes, /metrics. Default empty: none.
	HTTPListen string `mapstructure:"http" yaml:"http"`
	// Pprof serves Go's profiles under /debug/pprof/ on the HTTP port.
	Pprof bool `mapstructure:"pprof" yaml:"pprof"`
	// AdvertisedAddress is the host:port other components dial. Default:
	// the bound listen address.
	AdvertisedAddress string `mapstructure:"advertised-address" yaml:"advertised-address"`
	// ID names the bookie in ledger metadata; clients find its address in
	// the registry. It must stay the same for the life of the data
	// directory. Default: the advertised address.
	ID string `mapstructure:"id" yaml:"id"`
	// DataDir holds the Pebble database. Default ./data/bookie.
	DataDir string `mapstructure:"data-dir" yaml:"data-dir"`
	// Metastore lists the etcd endpoints.
	Metastore []string `mapstructure:"metastore" yaml:"metastore"`
	// MetastoreRoot is the key prefix of this cluster. Default /magnetar.
	MetastoreRoot string `mapstructure:"metastore-root" yaml:"metastore-root"`
	// Metastore credentials: etcd's TLS and authentication.
	metastore.Credentials `mapstructure:",squash" yaml:",inline"`
	// MaxEntrySize caps one entry's payload. Default 5 MiB.
	MaxEntrySize int `mapstructure:"max-entry-size" yaml:"max-entry-size"`
	// MaxInflightBytes bounds the payload bytes of adds the bookie holds at
	// once (all clients together); past it, it stops reading requests.
	// Default 256 MiB; at least MaxEntrySize.
	MaxInflightBytes int64 `mapstructure:"max-inflight-bytes" yaml:"max-inflight-bytes"`
	// MemtableSize is the size of one of Pebble's memtables. Up to
	// memtablesHeld of them are in memory at once (one taking writes,
	// the others being flushed): beyond, writes wait. Default 64MiB;
	// in 1MiB..1GiB.
	MemtableSize bytesize.Size `mapstructure:"memtable-size" yaml:"memtable-size"`
	// BlockCacheSize is Pebble's block cache (reads that miss the
	// broker's cache). Default 64MiB; at least 1MiB.
	BlockCacheSize bytesize.Size `mapstructure:"block-cache-size" yaml:"block-cache-size"`
	// StorageCompression compresses what the storage engine writes
	// (Snappy). Default false: entries are stored as written, as
	// BookKeeper stores them; producers compress (or send random bytes).
	StorageCompression bool `mapstructure:"storage-compression" yaml:"storage-compression"`
	// EntryLog stores entries in an append-only log of the bookie's own,
	// written once and synced before acknowledgement, with Pebble as
	// its index (docs/architecture.md, "The entry log"). Default true;
	// false: everything in Pebble (written to its WAL, then again at
	// memtable flushes). A data directory written with the entry log
	// needs it: once on, it cannot be turned off. One written without it
	// is read in place with it on.
	EntryLog bool `mapstructure:"entry-log" yaml:"entry-log"`
	// EntryLogFileSize is the size at which the entry log starts a new
	// file. Default 128MiB; in 1MiB..4GiB.
	EntryLogFileSize bytesize.Size `mapstructure:"entry-log-file-size" yaml:"entry-log-file-size"`
	// EntryLogCheckpointBytes is how much entry log is written between
	// two checkpoints (flushes of the Pebble index). It bounds the log
	// replayed at restart (about 1.5 s per GiB on this project's test
	// machine) and the log files kept past their ledgers' deletion until
	// the next checkpoint; each checkpoint stalls the log's syncs for a
	// moment, so rarer can be a lower p99 (1GiB halved a standalone's
	// p99 in one set of runs and about a tenth in a later one;
	// docs/benchmarks.md). Default 64MiB; in 16MiB..64GiB. A
	// checkpoint is also taken every minute once something was written,
	// and once the index written since the last one reaches a quarter of
	// MemtableSize: small entries, many index writes per byte of log, do
	// not fill the memtables between checkpoints.
	EntryLogCheckpointBytes bytesize.Size `mapstructure:"entry-log-checkpoint-bytes" yaml:"entry-log-checkpoint-bytes"`
	// EntryLogRecycleFiles is how many entry log files no ledger needs
	// are kept for reuse instead of deleted: a later file overwrites
	// one. Overwriting syncs faster than appending (no metadata to
	// commit). On one of this project's test machines it made the tail
	// of a loaded standalone far worse; on another, a disk probe's
	// overwrites cost the virtual machine's host less than its appends,
	// but a loaded standalone's tail and pauses were no different
	// (docs/benchmarks.md): measure on your disk.
	// Default 0 (files are deleted); in 0..64.
	EntryLogRecycleFiles int `mapstructure:"entry-log-recycle-files" yaml:"entry-log-recycle-files"`
	// EntryLogSyncInterval is the least time from the start of one
	// write and sync of the entry log to the start of the next: adds
	// that come meanwhile wait and share the next one, so a loaded
	// bookie makes fewer, larger I/O requests, and each add may wait
	// this much longer (every add of a writer that waits for each, one
	// at a time, too; the first after a quiet spell does not). Default
	// 0: each starts as soon as the one before ended; in 0..1s. On this
	// project's test machine, a virtual machine whose host seems to
	// charge its I/O requests to its CPU allowance, 4ms made the pauses a
	// loaded standalone caused rarer, and its p99 lower, for 2ms more at
	// the median; a lone writer waiting for each add went from about
	// 1,300 adds a second to 220 (docs/benchmarks.md, "A smaller index;
	// fewer I/O requests"): measure on yours.
	EntryLogSyncInterval time.Duration `mapstructure:"entry-log-sync-interval" yaml:"entry-log-sync-interval"`
	// EntryLogDirectIO writes the entry log with direct I/O (O_DIRECT),
	// around the page cache, which costs CPU for every byte written.
	// Default true; where the filesystem refuses direct I/O (tmpfs), the
	// writes go through the page cache. Reads always do.
	EntryLogDirectIO bool `mapstructure:"entry-log-direct-io" yaml:"entry-log-direct-io"`
	// EntryLogCompactionThreshold: an entry log file whose live entries
	// (of ledgers not deleted) take less than this share of it has them
	// copied to the current file, and goes. Default 0.5; in [0, 1); 0:
	// never (files then go only once all their ledgers are deleted).
	EntryLogCompactionThreshold float64 `mapstructure:"entry-log-compaction-threshold" yaml:"entry-log-compaction-threshold"`
	// SessionTTL is the lease TTL of the registration. Default 10s.
	SessionTTL time.Duration `mapstructure:"session-ttl" yaml:"session-ttl"`
	// RegistrationInterval is how often the load report is refreshed.
	// Default 5s.
	RegistrationInterval time.Duration `mapstructure:"registration-interval" yaml:"registration-interval"`
	// GCInterval is how often ledgers deleted from metadata are removed.
	// Default 1m.
	GCInterval time.Duration `mapstructure:"gc-interval" yaml:"gc-interval"`
	// ValueSeparation keeps payloads of 1 KiB and more in Pebble blob
	// files (see docs/architecture.md for the measurements). Default true.
	ValueSeparation bool `mapstructure:"value-separation" yaml:"value-separation"`
	// Autorecovery runs an autorecovery instance (auditor candidate and
	// re-replication worker) inside the bookie. Default true.
	Autorecovery bool `mapstructure:"autorecovery" yaml:"autorecovery"`
	// LostBookieRecoveryDelay: how long a bookie must stay unregistered
	// before its ledgers are re-replicated. Default 30s; 0 allowed.
	LostBookieRecoveryDelay time.Duration `mapstructure:"lost-bookie-recovery-delay" yaml:"lost-bookie-recovery-delay"`
	// AutorecoveryCheckInterval: how often the auditor compares every
	// ledger's metadata with what each bookie holds. Default 24h; 0
	// disables.
	AutorecoveryCheckInterval time.Duration `mapstructure:"autorecovery-check-interval" yaml:"autorecovery-check-interval"`
	// RereplicationMaxBytesPerSec throttles this bookie's re-replication
	// worker. Default 0: unlimited.
	RereplicationMaxBytesPerSec int64 `mapstructure:"rereplication-max-bytes-per-sec" yaml:"rereplication-max-bytes-per-sec"`
	// AutoRebalance: the auditor moves closed ledgers' copies from the
	// fullest bookies to the emptiest by itself, every RebalanceInterval.
	// Default false (rebalance on request: magnetar admin bookies
	// rebalance).
	AutoRebalance bool `mapstructure:"auto-rebalance" yaml:"auto-rebalance"`
	// RebalanceInterval: how often an automatic rebalance may run.
	// Default 5m.
	RebalanceInterval time.Duration `mapstructure:"rebalance-interval" yaml:"rebalance-interval"`
	// RebalanceTargetSpread: rebalancing stops when (max - min) / mean of
	// the bookies' usage is at most this. Default 0.2.
	RebalanceTargetSpread float64 `mapstructure:"rebalance-target-spread" yaml:"rebalance-target-spread"`
	// DiskUsageThreshold: above this share of its filesystem in use (as df
	// counts it: used / (used + available)) the bookie turns read-only:
	// it refuses normal adds and registers read_only, so that placement
	// skips it; reads and recovery adds go on. Default 0.90; in (0, 1].
	DiskUsageThreshold float64 `mapstructure:"disk-usage-threshold" yaml:"disk-usage-threshold"`
	// DiskUsageLowThreshold: a bookie read-only for disk usage becomes
	// writable again below this share. Default 0.85; in (0, 1] and below
	// DiskUsageThreshold, so that it does not flap.
	DiskUsageLowThreshold float64 `mapstructure:"disk-usage-low-threshold" yaml:"disk-usage-low-threshold"`
	// DiskCheckInterval is how often disk usage is checked. Default 1s.
	DiskCheckInterval time.Duration `mapstructure:"disk-check-interval" yaml:"disk-check-interval"`
	// Rack names the rack or zone the bookie runs in, for placement: each
	// write quorum is spread over as many racks as there are. Default
	// empty (no rack).
	Rack string `mapstructure:"rack" yaml:"rack"`
	// HostLabel identifies the machine (or failure domain smaller than a
	// rack) the bookie runs on: placement never puts two bookies with the
	// same host label in one write quorum. Set it when several bookies
	// share a machine. Default empty (unknown: no constraint).
	HostLabel string `mapstructure:"host-label" yaml:"host-label"`

	// Security of the gRPC port (and TLS of the HTTP port, which serves
	// only probes, metrics and profiles): with authentication on, only
	// AllowedRoles may call it (default broker and autorecovery).
	// ClientAuthTokenFile is the token this bookie's autorecovery
	// presents to other bookies; it dials them over TLS when this bookie
	// serves TLS, trusting TLSTrustCertsFile's authorities.
	auth.ServerConfig   `mapstructure:",squash" yaml:",inline"`
	AllowedRoles        []string `mapstructure:"allowed-roles" yaml:"allowed-roles"`
	ClientAuthTokenFile string   `mapstructure:"client-auth-token-file" yaml:"client-auth-token-file"`
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Listen:                      "127.0.0.1:3181",
		DataDir:                     "./data/bookie",
		MetastoreRoot:               "/magnetar",
		MaxEntrySize:                5 << 20,
		EntryLog:                    true,
		EntryLogFileSize:            128 << 20,
		EntryLogCheckpointBytes:     storage.DefaultCheckpointBytes,
		EntryLogDirectIO:            true,
		EntryLogCompactionThreshold: 0.5,
		MaxInflightBytes:            256 << 20,
		MemtableSize:                64 << 20,
		BlockCacheSize:              64 << 20,
		SessionTTL:                  10 * time.Second,
		RegistrationInterval:        5 * time.Second,
		GCInterval:                  time.Minute,
		ValueSeparation:             true,
		Autorecovery:                true,
		LostBookieRecoveryDelay:     30 * time.Second,
		AutorecoveryCheckInterval:   24 * time.Hour,
		RebalanceInterval:           5 * time.Minute,
		RebalanceTargetSpread:       0.2,
		DiskUsageThreshold:          0.90,
		DiskUsageLowThreshold:       0.85,
		DiskCheckInterval:           time.Second,
		AllowedRoles:                []string{"broker", "autorecovery"},
	}
}

// MaxEntrySizeLimit is the largest MaxEntrySize accepted.
const MaxEntrySizeLimit = 64 << 20

// maxLabelLen bounds a rack or host label.
const maxLabelLen = 255

// checkLabel accepts a placement label: printable, without spaces, at most
// maxLabelLen bytes (empty: not set).
func checkLabel(l string) error {
	if len(l) > maxLabelLen {
		return fmt.Errorf("longer than %d bytes", maxLabelLen)
	}
	for _, r := range l {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return fmt.Errorf("contains %q: labels are printable, without spaces", r)
		}
	}
	return nil
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	errs := []error{c.ServerConfig.Validate()}
	if c.AuthenticationEnabled && len(c.AllowedRoles) == 0 {
		errs = append(errs, errors.New("--allowed-roles is empty: with authentication on, no one could use the bookie"))
	}
	if err := netaddr.Listen(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("--listen %q: %w", c.Listen, err))
	}
	if c.HTTPListen != "" {
		if err := netaddr.Listen(c.HTTPListen); err != nil {
			errs = append(errs, fmt.Errorf("--http %q: %w", c.HTTPListen, err))
		}
	}
	if c.AdvertisedAddress == "" && netaddr.Wildcard(c.Listen) {
		errs = append(errs, fmt.Errorf("--listen %q binds every interface: set --advertised-address to the HOST:PORT brokers dial", c.Listen))
	}
	if c.AdvertisedAddress != "" {
		if err := netaddr.Dial(c.AdvertisedAddress); err != nil {
			errs = append(errs, fmt.Errorf("--advertised-address %q: %w", c.AdvertisedAddress, err))
		}
	}
	if strings.ContainsAny(c.ID, "/ \t\n") {
		errs = append(errs, fmt.Errorf("bookie id %q must not contain '/' or spaces", c.ID))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("data directory is empty"))
	}
	if len(c.Metastore) == 0 {
		errs = append(errs, errors.New("no metastore (etcd) endpoints given: --metastore HOST:PORT,..."))
	}
	for _, e := range c.Metastore {
		if err := netaddr.Endpoint(e); err != nil {
			errs = append(errs, fmt.Errorf("--metastore %q: %w", e, err))
		}
	}
	if c.MaxEntrySize <= 0 || c.MaxEntrySize > MaxEntrySizeLimit {
		errs = append(errs, fmt.Errorf("max entry size %d must be in 1..%d", c.MaxEntrySize, MaxEntrySizeLimit))
	}
	if c.MemtableSize < 1<<20 || c.MemtableSize > 1<<30 {
		errs = append(errs, fmt.Errorf("--memtable-size %v: must be in 1MiB..1GiB", c.MemtableSize))
	}
	if !(c.EntryLogCompactionThreshold >= 0 && c.EntryLogCompactionThreshold < 1) {
		errs = append(errs, fmt.Errorf("--entry-log-compaction-threshold %v: must be in [0, 1)", c.EntryLogCompactionThreshold))
	}
	if c.EntryLogCheckpointBytes < 16<<20 || c.EntryLogCheckpointBytes > 64<<30 {
		errs = append(errs, fmt.Errorf("--entry-log-checkpoint-bytes %v: must be in 16MiB..64GiB", c.EntryLogCheckpointBytes))
	}
	if c.EntryLogSyncInterval < 0 || c.EntryLogSyncInterval > time.Second {
		errs = append(errs, fmt.Errorf("--entry-log-sync-interval %v: must be in 0..1s", c.EntryLogSyncInterval))
	}
	if c.EntryLogRecycleFiles < 0 || c.EntryLogRecycleFiles > 64 {
		errs = append(errs, fmt.Errorf("--entry-log-recycle-files %d: must be in 0..64", c.EntryLogRecycleFiles))
	}
	if c.EntryLogFileSize < 1<<20 || c.EntryLogFileSize > 4<<30 {
		errs = append(errs, fmt.Errorf("--entry-log-file-size %v: must be in 1MiB..4GiB", c.EntryLogFileSize))
	}
	if c.BlockCacheSize < 1<<20 {
		errs = append(errs, fmt.Errorf("--block-cache-size %v: must be at least 1MiB", c.BlockCacheSize))
	}
	if c.MaxInflightBytes < int64(c.MaxEntrySize) {
		errs = append(errs, fmt.Errorf("max in-flight bytes %d is below the max entry size %d", c.MaxInflightBytes, c.MaxEntrySize))
	}
	if c.SessionTTL < time.Second {
		errs = append(errs, fmt.Errorf("session TTL %v is below 1s", c.SessionTTL))
	}
	if c.RegistrationInterval <= 0 {
		errs = append(errs, fmt.Errorf("registration interval %v must be positive", c.RegistrationInterval))
	}
	if c.GCInterval <= 0 {
		errs = append(errs, fmt.Errorf("gc interval %v must be positive", c.GCInterval))
	}
	if c.LostBookieRecoveryDelay < 0 {
		errs = append(errs, fmt.Errorf("lost bookie recovery delay %v is negative", c.LostBookieRecoveryDelay))
	}
	if c.AutorecoveryCheckInterval < 0 {
		errs = append(errs, fmt.Errorf("autorecovery check interval %v is negative (0 disables the check)", c.AutorecoveryCheckInterval))
	}
	if c.RebalanceInterval <= 0 {
		errs = append(errs, fmt.Errorf("--rebalance-interval %v must be positive", c.RebalanceInterval))
	}
	if !(c.RebalanceTargetSpread > 0 && c.RebalanceTargetSpread <= 10) {
		errs = append(errs, fmt.Errorf("--rebalance-target-spread %v must be in (0, 10]", c.RebalanceTargetSpread))
	}
	if c.RereplicationMaxBytesPerSec < 0 {
		errs = append(errs, fmt.Errorf("re-replication rate %d is negative (0: unlimited)", c.RereplicationMaxBytesPerSec))
	}
	// NaN fails every comparison: written so that it is refused too.
	if !(c.DiskUsageThreshold > 0 && c.DiskUsageThreshold <= 1) {
		errs = append(errs, fmt.Errorf("--disk-usage-threshold %v must be in (0, 1]", c.DiskUsageThreshold))
	}
	if !(c.DiskUsageLowThreshold > 0 && c.DiskUsageLowThreshold <= 1) {
		errs = append(errs, fmt.Errorf("--disk-usage-low-threshold %v must be in (0, 1]", c.DiskUsageLowThreshold))
	} else if !(c.DiskUsageLowThreshold < c.DiskUsageThreshold) {
		errs = append(errs, fmt.Errorf("--disk-usage-low-threshold %v must be below --disk-usage-threshold %v", c.DiskUsageLowThreshold, c.DiskUsageThreshold))
	}
	if c.DiskCheckInterval <= 0 {
		errs = append(errs, fmt.Errorf("--disk-check-interval %v must be positive", c.DiskCheckInterval))
	}
	if err := checkLabel(c.Rack); err != nil {
		errs = append(errs, fmt.Errorf("--rack %q: %w", c.Rack, err))
	}
	if err := checkLabel(c.HostLabel); err != nil {
		errs = append(errs, fmt.Errorf("--host-label %q: %w", c.HostLabel, err))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bookie config: %w", err)
	}
	return nil
}

// storageOptions maps the settings to the storage engine's options; the
// server adds the filesystem, the logger and the callbacks.
func (c *Config) storageOptions() storage.Options {
	o := storage.Options{
		Dir:                  c.DataDir,
		ValueSeparation:      c.ValueSeparation,
		MemTableSize:         uint64(c.MemtableSize),
		MemtablesHeld:        memtablesHeld,
		CacheSize:            int64(c.BlockCacheSize),
		Compress:             c.StorageCompression,
		EntryLog:             c.EntryLog,
		EntryLogFileSize:     int64(c.EntryLogFileSize),
		EntryLogRecycle:      c.EntryLogRecycleFiles,
		CheckpointBytes:      int64(c.EntryLogCheckpointBytes),
		EntryLogDirectIO:     c.EntryLogDirectIO,
		EntryLogSyncInterval: c.EntryLogSyncInterval,
		CompactionThreshold:  c.EntryLogCompactionThreshold,
	}
	if o.CompactionThreshold == 0 { // the bookie's never is the storage's negative
		o.CompactionThreshold = -1
	}
	return o
}

// memtablesHeld is how many memtables a bookie's Pebble holds at most:
// its MemTableStopWritesThreshold (Pebble stops writes when the queued
// memtables reach this many times the memtable size).
const memtablesHeld = 2

// Memory is the memory a bookie's configuration allows its large
// consumers; their sum is its budget (the Go runtime, gRPC's buffers
// beyond the in-flight adds and goroutines come on top).
type Memory struct {
	Memtables       int64 // memtablesHeld x MemtableSize
	BlockCache      int64
	InflightPayload int64 // MaxInflightBytes
}

// Total is the sum of the parts.
func (m Memory) Total() int64 { return m.Memtables + m.BlockCache + m.InflightPayload }

func (m Memory) String() string {
	return fmt.Sprintf("memtables %v + block cache %v + in-flight adds %v = %v",
		bytesize.Size(m.Memtables), bytesize.Size(m.BlockCache), bytesize.Size(m.InflightPayload), bytesize.Size(m.Total()))
}

// Memory returns the configuration's memory budget.
func (c Config) Memory() Memory {
	return Memory{
		Memtables:       memtablesHeld * int64(c.MemtableSize),
		BlockCache:      int64(c.BlockCacheSize),
		InflightPayload: c.MaxInflightBytes,
	}
}
