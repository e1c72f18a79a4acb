// Package bookie is Magnetar's storage node: it stores ledger entries
// replicated to it by ledger clients (package bookie/ledger, used by
// brokers) and serves them back.
//
// A bookie serves the gRPC service in proto/bookiepb: add entry (answered
// only once durable, checked against the ledger's master key and the entry
// checksum), read entry (optionally fencing first, for recovery), read LAC
// (optionally long-polling), write LAC and fence. Storage is one Pebble
// database (bookie/internal/storage) with group commit.
//
// On start a bookie checks its cookie (bookie id and instance, kept both in
// its data directory and in the metastore) so that a bookie whose disk was
// wiped cannot rejoin and deny having entries it acknowledged; then it
// registers under bookies/available/ with its address and load, on a
// session lease, refreshed periodically and revoked on a clean stop. In
// the background it deletes the ledgers that the metadata no longer lists.
//
// A bookie turns read-only above a disk usage threshold, when a write
// fails for lack of space, or when told to (SetReadOnly): it then refuses
// normal adds, which makes writers move to other bookies, and keeps
// serving reads and recovery adds (readonly.go).
//
// Unless turned off, a bookie runs an autorecovery instance (package
// bookie/autorecovery): an auditor candidate and a re-replication worker.
// It follows its decommission record (bookies/drain/<id>: read-only while
// draining), and its garbage collection also deletes copies of closed
// ledgers whose metadata no longer names it (moved away), under the
// ledger's autorecovery lock (gc.go).
//
// Errors leave the bookie as gRPC statuses with a reason (package
// bookie/wire).
package bookie
