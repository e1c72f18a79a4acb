// Package check records what the e2e fault suite did and finds anomalies
// in it, in the manner of Jepsen's Kafka workload.
//
// Producers send unique values, with keys, to a partitioned topic while
// faults are injected; consumers on exclusive, failover, shared and
// key_shared subscriptions, and a final drain read, record what they are
// handed. Check compares the two.
//
// # History format
//
// A history is a file of JSON lines, history.jsonl, written by a Writer
// and read by ReadHistory. The first line is the run's setup:
//
//	{"type":"meta","meta":{"scenario":"kill-broker","partitions":10,"dedup":false,"subscriptions":["ex","ks"],"started":1700000000000000000}}
//
// Every other line is an Event of type send, recv or fault:
//
//	{"type":"send","producer":"p1","seq":7,"result":"ok","start":...,"end":...,"key":"k3","value":"p1-7","id":{"p":3,"l":12,"e":40,"b":0}}
//	{"type":"recv","sub":"ex","subType":"exclusive","consumer":"ex-1","time":...,"key":"k3","value":"p1-7","id":{"p":3,"l":12,"e":40,"b":0}}
//	{"type":"fault","name":"kill-broker","target":"broker-1","start":...,"end":...}
//
// A send is written when the Send call completed. Its result is "ok"
// (acknowledged, with the id it was written at), "failed" (known not
// written) or "unknown" (a timeout: it may or may not have been written).
// Seq numbers each producer's sends in the order they were issued. A recv
// is one message handed to the application, in the order received; a
// restarted consumer has a new name. A fault is written when healed (end
// set) or at the end of the run (end 0: never healed). Times are unix
// nanoseconds. Lines are at most MaxLine bytes; an unknown type is an
// error naming the line.
//
// Positions (MsgID: partition, ledger, entry, batch index) are ordered
// and only comparable within a partition.
//
// # Rules
//
// The Report has one entry per kind: a count, counts per subscription
// where one applies, and up to MaxExamples sorted examples.
//
//   - Lost (fails): a value whose send was ok that a subscription listed in
//     Meta.Subscriptions never read. Counted per subscription. Those
//     subscriptions exist before the first send, so they must see every
//     acknowledged value, whichever consumer got it.
//   - Unexpected (fails): a value read that no send attempted. Counted
//     once per subscription that read it.
//   - Duplicated: a value read at two or more distinct positions, by any
//     reader: it was written twice. Split into duplicates of ok sends and
//     of unknown or failed ones. Allowed when Meta.Dedup is false (client
//     retries may write twice); with deduplication on every one fails.
//   - Redelivered (allowed): the same position received again within one
//     subscription: at-least-once delivery after a reconnect, nack or
//     failover. Counted per subscription as extra deliveries.
//   - Conflicting ids (fails): one position carrying two different values,
//     across all reads and ok sends' acknowledged ids; or an ok send whose
//     acknowledged id is not among the positions its value was read at
//     (checked only when the value was read at all).
//   - Reordered (fails): within one consumer's stream, a message the
//     subscription receives for the first time at a position lower than
//     the highest this consumer has received in the stream: a gap filled
//     later. Streams are (consumer, partition) for exclusive, failover and
//     drain reads, and (consumer, key) for key_shared ones; shared
//     subscriptions promise no order. Positions the subscription already
//     delivered, to this consumer or another one, are redeliveries, not
//     reorders: a rewind after a reconnect, or a failover whose
//     acknowledgements were lost with the broker that had them (the e2e
//     suite sees that when a broker loses its etcd session).
//   - Producer order (fails): one producer's ok sends to one partition,
//     ordered by Seq, must have strictly increasing acknowledged ids; per
//     key for the producers named in Meta.KeyOrdered (Pulsar's key-based
//     batching orders each key's messages, not the producer's: it sends
//     one batch per key, in the order of their first messages).
//   - Failed sends read (reported only): a value whose only sends failed
//     was read anyway, so "failed" was not "known not written". It does not
//     fail the run, but it means the harness's classification is wrong.
//
// Availability is reported and never fails: for each fault and partition,
// the seconds from the fault's start to the earliest end of an ok send to
// that partition that started at or after the fault's start; -1 when no
// such send exists (never recovered). Per fault the Report gives the
// start and heal offsets from Meta.Started, the slowest partition and the
// mean; both are -1 if a partition never recovered. It also gives the
// longest time any partition went without an acknowledged write between
// the fault's start and the next fault (or the last acknowledged write),
// which catches faults that take effect late (a broker cut off from etcd
// serves until its lease runs out).
//
// Totals give sends by result, receives per subscription, distinct values
// read, faults and the run's duration.
//
// Report.Pass is true when lost, unexpected, conflicting ids, reordered
// and producer order are all zero, and duplicated too when deduplication
// is on. The magnetar-check command re-checks a saved history.
package check
