// Package ledger is the client side of Magnetar's storage: the library a
// broker uses to create ledgers on bookies, append to them, recover and
// read them, and delete them.
//
// A ledger is an append-only sequence of entries replicated over an
// ensemble of E bookies: entry e goes to the Qw consecutive bookies starting
// at e mod E, and is complete once Qa of them stored it durably (E >= Qw >=
// Qa). Its metadata (quorums, state, segments of entries with their
// bookies, master key) lives in the metastore and changes only by
// compare-and-swap.
//
//   - Client.Create picks E live, writable bookies from the registry
//     (never two of one host label in a write set, write sets spread over
//     racks, then favouring free disk and low load: placement.go) and
//     returns a Writer.
//   - Writer.Append/AppendAsync keep many entries in flight and report
//     completions in entry order; the last add confirmed (LAC) rides on
//     later adds and is sent explicitly when the writer is idle. A failed
//     or slow bookie, or one that turned read-only, is replaced (ensemble
//     change) and pending entries are resent to its replacement: no gap,
//     no duplicate id. A fenced writer
//     fails with ErrFenced and stops.
//   - Client.OpenRecover fences the ledger, finds the last entry that may
//     have been acknowledged, re-replicates the tail and closes the ledger.
//   - Reader.Read reads ranges from any replica with speculative retry;
//     Reader.WaitLAC long-polls for a tailing reader.
//   - Client.Delete removes the metadata; bookies collect the entries.
//   - Client.Metrics exports each add's and read's latency per bookie, as
//     the client sees it.
//
// The protocol rules (striping, quorum completion, fencing coverage,
// recovery decisions) are pure code in protocol.go and writestate.go,
// tested step by step; writer.go, reader.go and recovery.go do the I/O.
package ledger
