package broker

import (
	"context"

	"github.com/magnetar-io/magnetar/proto/topicname"
)

// The partition names rule. A name "T-partition-N" (N a partition index as
// topicname.PartitionIndex reads it) names partition N of the partitioned
// topic T: it is served (looked up, loaded, created on first use or by the
// admin API) only if T is a partitioned topic with more than N
// partitions. Otherwise the caller gets ErrTopicNotFound saying why, and
// nothing is created: no stray non-partitioned topic that looks like a
// partition.
//
// This is Pulsar's rule since PIP-414 ("Enforce topic consistency check",
// apache/pulsar#24118): BrokerService.validateTopicConsistency refuses,
// when a topic is loaded, a partition name whose base has no partitioned
// metadata ("Partition metadata not found for the partitioned topic") or
// fewer partitions ("Illegal topic partition name ... with max allowed N
// partitions"). Before PIP-414 the broker allowed the first case
// (BrokerService.getTopic: "Allow creating non-partitioned persistent
// topic that name includes `partition`") while the admin API refused it
// (PersistentTopicsBase.validateNonPartitionTopicName, 412). Pulsar
// answers NotAllowed; we answer TOPIC_NOT_FOUND (gRPC NOT_FOUND, HTTP
// 404), as the broker already did for an index past the partition count:
// the partition does not exist, and the SDK does not retry it.
//
// Names with "-partition-" followed by something that is not an index
// ("x-partition-abc", "x-partition-07") are ordinary topic names, as in
// Pulsar (TopicName.getPartitionIndex).
func (md *metadata) checkPartitionName(ctx context.Context, n topicname.Name) error {
	i := n.PartitionIndex()
	if i < 0 {
		return nil
	}
	parts, err := md.partitions(ctx, n.Base())
	if err != nil {
		return err
	}
	switch {
	case parts == 0:
		return errorf(ErrTopicNotFound, "%s: %s is not a partitioned topic, so it has no partition %d", n, n.Base(), i)
	case i >= parts:
		return errorf(ErrTopicNotFound, "%s: %s has %d partitions (0..%d)", n, n.Base(), parts, parts-1)
	}
	return nil
}

// checkPartitionedTopicName refuses a partitioned topic whose name
// contains "-partition-" anywhere, as Pulsar's
// AdminResource.validatePartitionedTopicName does ("Partitioned Topic Name
// should not contain '-partition-'"): its partitions' names would be
// ambiguous.
func checkPartitionedTopicName(n topicname.Name) error {
	if n.ContainsPartitionSuffix() {
		return errorf(ErrInvalidArgument, "%s: the name of a partitioned topic must not contain %q", n, "-partition-")
	}
	return nil
}
