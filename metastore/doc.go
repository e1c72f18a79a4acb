// Package metastore is Magnetar's typed layer over etcd: every component
// keeps its metadata (ledgers, bookie and broker registrations, ownership,
// topics, cursors) through it.
//
// A Store works under a root prefix (default "/magnetar") so that several
// clusters can share one etcd; all keys passed to it are relative to that
// root, and the layout is defined once in keys.go and documented in
// docs/architecture.md.
//
// Operations:
//   - Get, Put, Delete, List (paged, in key order) and Watch.
//   - Create and CompareAndSwap: conditional on the key's mod revision.
//   - Commit: several puts and deletes in one transaction, each with its
//     own expected revision, optionally guarded by an ownership token (a
//     Guard): the owner key's create revision must still be the token, so a
//     deposed owner can never change metadata.
//   - Sessions: an etcd lease kept alive in the background; Done is closed
//     when the lease is lost or the session is closed.
//   - NextID: cluster-wide unique, increasing ids.
//
// Errors are the sentinels ErrNotFound, ErrBadVersion (a compare-and-swap
// lost), ErrNotOwner (a guard failed) and ErrSessionLost; test them with
// errors.Is.
//
// StartEmbedded runs a single-member etcd inside the process, for
// standalone mode and tests.
package metastore
