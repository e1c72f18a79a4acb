// Package broker is Magnetar's stateless broker: it serves topics to
// producers and consumers (the gRPC protocol in proto/brokerpb) and the
// admin REST API (Pulsar's /admin/v2 paths), keeping no data of its own.
//
// A topic partition is owned by one broker at a time through an owner key
// under the broker's etcd session; every metadata write of the owner is
// guarded by that key's create revision. The partition's data is a
// managed ledger (broker/internal/mledger): a chain of ledgers on bookies.
// A subscription is a durable cursor (broker/internal/cursor) with its
// consumers; exclusive and failover subscriptions deliver to one active
// consumer, never more messages than it granted permits for.
//
// Entries are stored in Pulsar's layout (proto/entry), so that Pulsar's
// binary protocol can later be served from the same storage.
package broker
