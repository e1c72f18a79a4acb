// Package autorecovery keeps every ledger at its write quorum of copies as
// bookies come and go, and moves copies off bookies being decommissioned
// or onto emptier ones (rebalance).
//
// Each instance (one inside every bookie by default, or `magnetar
// autorecovery` apart) is a candidate for the auditor role, elected through
// etcd, and a re-replication worker:
//
//   - The auditor (audit.go, decisions in the pure auditState) declares a
//     bookie lost when its registration stays away longer than the
//     lost-bookie delay and marks every ledger of the bookie -> ledgers
//     index (kept by package bookie/ledger with the metadata) as
//     under-replicated; it also marks draining bookies' ledgers, finishes
//     drains, runs rebalance rounds (rebalance.go, planMoves) and the
//     periodic check of what each bookie holds (check.go).
//   - Workers (worker.go) repair marked ledgers one at a time under a
//     per-ledger lock: a pure plan (plan.go, planRepair) of fills and
//     replaces, the copies, then one guarded compare-and-swap of the
//     metadata that also clears the marks.
//
// status.go is the operator's view (bookie states, marks) and the admin
// actions (decommission, recommission, rebalance). docs/architecture.md,
// "Autorecovery", states the invariants and the tests that check them.
package autorecovery
