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
//	ledgers/<ledger id, 20 digits>  metapb.LedgerMetadata
//	idgen/<name>                    empty; its revision is the last id handed out
//	topics/<tenant>/<ns>/<topic>/ledgers   metapb.ManagedLedgerInfo
//	topics/<tenant>/<ns>/<topic>/cursors/<subscription>   metapb.CursorInfo
//	topics/<tenant>/<ns>/<topic>/dedup     metapb.DedupSnapshot
//	owners/<tenant>/<ns>/<topic>    the owning broker, under its session lease
//	tenants/<tenant>                metapb.TenantInfo
//	namespaces/<tenant>/<ns>        metapb.NamespacePolicies
//	partitioned/<tenant>/<ns>/<topic>   metapb.PartitionedTopic
//	brokers/available/<broker id>   the broker's address, under its session lease
const (
	BookiesAvailablePrefix = "bookies/available/"
	BookieCookiesPrefix    = "bookies/cookies/"
	LedgersPrefix          = "ledgers/"
	idgenPrefix            = "idgen/"
	TopicsPrefix           = "topics/"
	OwnersPrefix           = "owners/"
	TenantsPrefix          = "tenants/"
	NamespacesPrefix       = "namespaces/"
	PartitionedPrefix      = "partitioned/"
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
