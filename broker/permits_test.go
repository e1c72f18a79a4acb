package broker_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/proto/brokerpb"
	"github.com/magnetar-io/magnetar/proto/pulsarpb"
)

// An entry the SDK cannot read (a batch that claims 250,000 messages and
// holds garbage; a Pulsar client's encrypted batch looks alike to it) is
// skipped, and the 250,000 permits the broker took for it are given back,
// in Flows of at most 100,000 (the broker caps one there). The broker
// leaves a consumer owing what an entry larger than its receive queue
// takes beyond its permits; given back one, or 100,000, the consumer
// stayed owing for good and received nothing more.
func TestUnreadableBatchGivesItsPermitsBack(t *testing.T) {
	e := newEnv(t, nil)
	stream, err := dialBroker(t, e.b.Addr()).Produce(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&brokerpb.ProduceRequest{Request: &brokerpb.ProduceRequest_Open{Open: &brokerpb.ProducerOpen{Topic: "unreadable"}}}); err != nil {
		t.Fatal(err)
	}
	if r, err := stream.Recv(); err != nil || r.GetOpened() == nil {
		t.Fatalf("open: %v %v", r, err)
	}
	send := func(seq uint64, md *pulsarpb.MessageMetadata, payload string) {
		t.Helper()
		md.ProducerName, md.SequenceId, md.PublishTime = proto.String(""), proto.Uint64(0), proto.Uint64(0)
		if err := stream.Send(&brokerpb.ProduceRequest{Request: &brokerpb.ProduceRequest_Send{Send: &brokerpb.Send{
			SequenceId: seq, Metadata: md, Payload: []byte(payload)}}}); err != nil {
			t.Fatal(err)
		}
		if r, err := stream.Recv(); err != nil || r.GetReceipt() == nil {
			t.Fatalf("send %d: %v %v", seq, r, err)
		}
	}
	send(1, &pulsarpb.MessageMetadata{NumMessagesInBatch: proto.Int32(250000)}, "not a batch of 250,000")
	send(2, &pulsarpb.MessageMetadata{}, "readable")
	stream.CloseSend()

	cons, err := e.client().Subscribe(client.ConsumerOptions{Topic: "unreadable", SubscriptionName: "s", ReceiverQueueSize: 10,
		SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	ctx, cancel := context.WithTimeout(ctxT(t), 20*time.Second)
	defer cancel()
	m, err := cons.Receive(ctx)
	if err != nil || string(m.Payload()) != "readable" {
		t.Fatalf("after the unreadable batch: %v, %v; want the next message", m, err)
	}
}
