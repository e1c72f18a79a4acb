package metastore

import (
	"fmt"
	"strconv"
	"strings"
)

// The key layout, relative to the store's root. This is the only place that
// spells keys out; docs/architecture.md documents the same table.
//
//	bookies/available/<bookie id>   metapb.BookieInfo, under the bookie's session lease
//	bookies/cookies/<bookie id>     metapb.Cookie, permanent
//	bookies/ledgers/<bookie id>/<ledger id, 20 digits>   empty: the bookie holds
//	                                copies of the ledger (kept with its metadata)
//	bookies/drain/<bookie id>       metapb.BookieDrain, while and after it drains
//	bookies/lost/<bookie id>        empty: the auditor declared the bookie lost
//	underreplicated/<ledger id, 20 digits>/<bookie id>   metapb.UnderReplicated
//	autorecovery/auditor            the elected auditor, under its session lease
//	autorecovery/locks/<ledger id, 20 digits>   a worker's lock, under its lease
//	autorecovery/index              empty: the bookie -> ledgers index is complete
//	autorecovery/rebalance          metapb.Rebalance, while a rebalance runs
//	ledgers/<ledger id, 20 digits>  metapb.LedgerMetadata
//	idgen/<name>                    empty; its revision is the last id handed out
//	topics/<tenant>/<ns>/<topic>/ledgers   metapb.ManagedLedgerInfo
//	topics/<tenant>/<ns>/<topic>/cursors/<subscription>   metapb.CursorInfo
//	topics/<tenant>/<ns>/<topic>/dedup     metapb.DedupSnapshot
//	owners/<tenant>/<ns>/<topic>    the owning broker, under its session lease
//	tenants/<tenant>                metapb.TenantInfo
//	namespaces/<tenant>/<ns>        metapb.NamespacePolicies
//	partitioned/<tenant>/<ns>/<topic>   metapb.PartitionedTopic
//	schemas/<tenant>/<ns>/<topic>   metapb.TopicSchemas (base name, no partition suffix)
//	brokers/available/<broker id>   the broker's address, under its session lease
const (
	BookiesAvailablePrefix = "bookies/available/"
	BookieCookiesPrefix    = "bookies/cookies/"
	BookieLedgersPrefix    = "bookies/ledgers/"
	BookieDrainPrefix      = "bookies/drain/"
	BookieLostPrefix       = "bookies/lost/"
	UnderReplicatedPrefix  = "underreplicated/"
	AuditorKey             = "autorecovery/auditor"
	LedgerLocksPrefix      = "autorecovery/locks/"
	IndexBuiltKey          = "autorecovery/index"
	RebalanceKey           = "autorecovery/rebalance"
	LedgersPrefix          = "ledgers/"
	idgenPrefix            = "idgen/"
	TopicsPrefix           = "topics/"
	OwnersPrefix           = "owners/"
	TenantsPrefix          = "tenants/"
	NamespacesPrefix       = "namespaces/"
	PartitionedPrefix      = "partitioned/"
	SchemasPrefix          = "schemas/"
	BrokersAvailablePrefix = "brokers/available/"
)

// DedupKey holds a topic partition's deduplication snapshot.
func DedupKey(topic string) string { return TopicsPrefix + topic + "/dedup" }

// TenantKey holds a tenant.
func TenantKey(tenant string) string { return TenantsPrefix + tenant }

// NamespaceKey holds a namespace's policies; ns is "tenant/namespace".
func NamespaceKey(ns string) string { return NamespacesPrefix + ns }

// PartitionedKey marks a partitioned topic; topic is "tenant/ns/topic".
func PartitionedKey(topic string) string { return PartitionedPrefix + topic }

// SchemaKey is the key of a topic's schemas; topic is its base name
// (tenant/ns/topic, no partition suffix).
func SchemaKey(topic string) string { return SchemasPrefix + topic }

// BrokerAvailableKey is where a live broker registers.
func BrokerAvailableKey(id string) string { return BrokersAvailablePrefix + id }

// ManagedLedgerKey holds a topic partition's ledger list; topic is
// "tenant/namespace/topic".
func ManagedLedgerKey(topic string) string { return TopicsPrefix + topic + "/ledgers" }

// CursorKey holds a durable subscription's cursor pointer.
func CursorKey(topic, subscription string) string {
	return TopicsPrefix + topic + "/cursors/" + subscription
}

// CursorsPrefix lists a topic partition's cursors.
func CursorsPrefix(topic string) string { return TopicsPrefix + topic + "/cursors/" }

// OwnerKey is the ownership key of a topic partition.
func OwnerKey(topic string) string { return OwnersPrefix + topic }

// BookieAvailableKey is where a live bookie registers.
func BookieAvailableKey(bookieID string) string { return BookiesAvailablePrefix + bookieID }

// BookieCookieKey holds the cookie of a bookie id.
func BookieCookieKey(bookieID string) string { return BookieCookiesPrefix + bookieID }

// LedgerKey holds a ledger's metadata. Ids are zero-padded so that key
// order is numeric order.
func LedgerKey(ledgerID int64) string { return fmt.Sprintf("%s%020d", LedgersPrefix, ledgerID) }

// ParseLedgerKey returns the ledger id of a key made by LedgerKey.
func ParseLedgerKey(key string) (int64, error) {
	s, ok := strings.CutPrefix(key, LedgersPrefix)
	if !ok || len(s) != 20 || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("metastore: %q is not a ledger key", key)
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("metastore: %q is not a ledger key", key)
	}
	return id, nil
}

// BookieLedgerKey records that a bookie holds copies of a ledger.
func BookieLedgerKey(bookieID string, ledgerID int64) string {
	return fmt.Sprintf("%s%s/%020d", BookieLedgersPrefix, bookieID, ledgerID)
}

// BookieLedgersOf lists the ledgers a bookie holds copies of.
func BookieLedgersOf(bookieID string) string { return BookieLedgersPrefix + bookieID + "/" }

// ParseBookieLedgerKey splits a key made by BookieLedgerKey.
func ParseBookieLedgerKey(key string) (bookieID string, ledgerID int64, err error) {
	s, ok := strings.CutPrefix(key, BookieLedgersPrefix)
	i := strings.LastIndexByte(s, '/')
	if !ok || i <= 0 {
		return "", 0, fmt.Errorf("metastore: %q is not a bookie ledger key", key)
	}
	id, err := ParseLedgerKey(LedgersPrefix + s[i+1:])
	if err != nil {
		return "", 0, fmt.Errorf("metastore: %q is not a bookie ledger key", key)
	}
	return s[:i], id, nil
}

// BookieLostKey records that the auditor declared a bookie lost.
func BookieLostKey(bookieID string) string { return BookieLostPrefix + bookieID }

// BookieDrainKey holds a bookie's decommission state.
func BookieDrainKey(bookieID string) string { return BookieDrainPrefix + bookieID }

// UnderReplicatedKey marks a bookie's copies of a ledger for repair.
func UnderReplicatedKey(ledgerID int64, bookieID string) string {
	return fmt.Sprintf("%s%020d/%s", UnderReplicatedPrefix, ledgerID, bookieID)
}

// UnderReplicatedOf lists the marks of one ledger.
func UnderReplicatedOf(ledgerID int64) string {
	return fmt.Sprintf("%s%020d/", UnderReplicatedPrefix, ledgerID)
}

// ParseUnderReplicatedKey splits a key made by UnderReplicatedKey.
func ParseUnderReplicatedKey(key string) (ledgerID int64, bookieID string, err error) {
	s, ok := strings.CutPrefix(key, UnderReplicatedPrefix)
	l, b, ok2 := strings.Cut(s, "/")
	if !ok || !ok2 || b == "" {
		return 0, "", fmt.Errorf("metastore: %q is not an under-replication mark", key)
	}
	id, err := ParseLedgerKey(LedgersPrefix + l)
	if err != nil {
		return 0, "", fmt.Errorf("metastore: %q is not an under-replication mark", key)
	}
	return id, b, nil
}

// LedgerLockKey is the autorecovery worker lock of a ledger.
func LedgerLockKey(ledgerID int64) string { return fmt.Sprintf("%s%020d", LedgerLocksPrefix, ledgerID) }
