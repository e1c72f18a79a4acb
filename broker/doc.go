// Package broker will hold Magnetar's stateless brokers: topic ownership
// through etcd leases, managed ledgers (a partition as a chain of ledgers
// written with bookie/ledger), cursors and subscriptions, and the client
// protocol. It is built in issue 3; the storage layer it stands on
// (metastore, bookie, bookie/ledger) is in place.
package broker
