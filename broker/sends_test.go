package broker_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/proto/brokerpb"
	"github.com/magnetar-io/magnetar/proto/pulsarpb"
)

// Several sends in one request (Sends) are taken one by one, in order, as
// if sent apart: each stored or refused on its own (one over the maximum
// size refused, and, as after any failed send, the ones after it), and
// each answered: in Receipts to a producer that asked for them together,
// one receipt per response to one that did not (an older client).
func TestSendsTogether(t *testing.T) {
	for _, together := range []bool{false, true} {
		t.Run(fmt.Sprintf("receipts together=%v", together), func(t *testing.T) {
			e := newEnv(t, func(c *broker.Config) { c.MaxMessageSize = 10 << 10 })
			topic := "sends-together"
			stream, err := dialBroker(t, e.b.Addr()).Produce(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			defer stream.CloseSend()
			if err := stream.Send(&brokerpb.ProduceRequest{Request: &brokerpb.ProduceRequest_Open{Open: &brokerpb.ProducerOpen{
				Topic: topic, ReceiptsTogether: together}}}); err != nil {
				t.Fatal(err)
			}
			r, err := stream.Recv()
			if err != nil || !r.GetOpened().GetSendsTogether() {
				t.Fatalf("open: %v %v; want a broker that takes sends together", r, err)
			}
			send := func(seq uint64, payload string) *brokerpb.Send {
				return &brokerpb.Send{SequenceId: seq, Payload: []byte(payload), Metadata: &pulsarpb.MessageMetadata{
					ProducerName: proto.String(""), SequenceId: proto.Uint64(0), PublishTime: proto.Uint64(0)}}
			}
			sends := func(ss ...*brokerpb.Send) {
				t.Helper()
				if err := stream.Send(&brokerpb.ProduceRequest{Request: &brokerpb.ProduceRequest_Sends{Sends: &brokerpb.Sends{Sends: ss}}}); err != nil {
					t.Fatal(err)
				}
			}
			// answers reads responses until n sends are answered: each
			// as "seq" (stored) or "seq:REASON" (refused).
			answers := func(n int) []string {
				t.Helper()
				var got []string
				for len(got) < n {
					r, err := stream.Recv()
					if err != nil {
						t.Fatalf("after %v: %v", got, err)
					}
					switch x := r.Response.(type) {
					case *brokerpb.ProduceResponse_Receipt:
						got = append(got, fmt.Sprint(x.Receipt.SequenceId))
					case *brokerpb.ProduceResponse_Receipts:
						if !together {
							t.Fatal("Receipts to a producer that did not ask for them")
						}
						for _, rc := range x.Receipts.Receipts {
							got = append(got, fmt.Sprint(rc.SequenceId))
						}
					case *brokerpb.ProduceResponse_Error:
						got = append(got, fmt.Sprintf("%d:%v", x.Error.SequenceId, x.Error.Reason))
					}
				}
				return got
			}
			sends(send(1, "a"), send(2, "b"), send(3, "c"))
			if got := strings.Join(answers(3), " "); got != "1 2 3" {
				t.Fatalf("answers %q, want 1 2 3", got)
			}
			sends(send(4, "d"), send(5, strings.Repeat("x", 11<<10)), send(6, "f"))
			// Refusals are decided at once, while 4 is still being
			// stored, and answered after it: in the order sent.
			if got := strings.Join(answers(3), " "); got != "4 5:MESSAGE_TOO_LARGE 6:SERVICE_NOT_READY" {
				t.Fatalf("answers %q, want 4 stored, 5 too large, 6 refused after it", got)
			}

			cons, err := e.client().Subscribe(client.ConsumerOptions{Topic: topic, SubscriptionName: "s",
				SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
			if err != nil {
				t.Fatal(err)
			}
			defer cons.Close()
			for _, want := range []string{"a", "b", "c", "d"} {
				ctx, cancel := context.WithTimeout(ctxT(t), 20*time.Second)
				m, err := cons.Receive(ctx)
				cancel()
				if err != nil || string(m.Payload()) != want {
					t.Fatalf("received %v, %v; want %q", m, err, want)
				}
			}
		})
	}
}

// An empty Sends is refused, and ends the stream with the reason.
func TestEmptySendsRefused(t *testing.T) {
	e := newEnv(t, nil)
	stream, err := dialBroker(t, e.b.Addr()).Produce(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.CloseSend()
	if err := stream.Send(&brokerpb.ProduceRequest{Request: &brokerpb.ProduceRequest_Open{Open: &brokerpb.ProducerOpen{Topic: "empty-sends"}}}); err != nil {
		t.Fatal(err)
	}
	if r, err := stream.Recv(); err != nil || r.GetOpened() == nil {
		t.Fatalf("open: %v %v", r, err)
	}
	if err := stream.Send(&brokerpb.ProduceRequest{Request: &brokerpb.ProduceRequest_Sends{Sends: &brokerpb.Sends{}}}); err != nil {
		t.Fatal(err)
	}
	_, err = stream.Recv()
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "ProduceRequest_Sends") {
		t.Fatalf("an empty Sends: %v; want InvalidArgument naming it", err)
	}
}

// A producer stream whose client has closed its side waits for the
// answers of the sends it took; when the topic unloads meanwhile (the
// producer is disconnected, and the answers after it are dropped), the
// stream ends instead of waiting for answers that never come.
func TestProduceStreamEndsOnUnloadWhileAnswering(t *testing.T) {
	e := newEnv(t, nil)
	const topic = "persistent://public/default/unload-answering"
	ctx, cancel := context.WithTimeout(ctxT(t), 30*time.Second)
	defer cancel()
	stream, err := dialBroker(t, e.b.Addr()).Produce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&brokerpb.ProduceRequest{Request: &brokerpb.ProduceRequest_Open{Open: &brokerpb.ProducerOpen{Topic: topic}}}); err != nil {
		t.Fatal(err)
	}
	if r, err := stream.Recv(); err != nil || r.GetOpened() == nil {
		t.Fatalf("open: %v %v", r, err)
	}
	// The send's append is held once stored, before it is answered.
	entered, release := holdFirstAppend(t)
	answering := make(chan struct{})
	var answeringOnce sync.Once
	broker.SetTestHookAnswering(func() { answeringOnce.Do(func() { close(answering) }) })
	defer broker.SetTestHookAnswering(nil)

	if err := stream.Send(&brokerpb.ProduceRequest{Request: &brokerpb.ProduceRequest_Send{Send: &brokerpb.Send{SequenceId: 1, Payload: []byte("a"),
		Metadata: &pulsarpb.MessageMetadata{ProducerName: proto.String(""), SequenceId: proto.Uint64(0), PublishTime: proto.Uint64(0)}}}}); err != nil {
		t.Fatal(err)
	}
	await(t, entered, "the append")
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	await(t, answering, "the handler waiting for the send's answer")
	unloaded := make(chan error, 1)
	go func() { unloaded <- e.b.Unload(ctxT(t), topic) }()
	// The unload disconnects the producer before it closes the managed
	// ledger, which waits for the held append: the stream ends now.
	r, err := stream.Recv()
	if status.Code(err) == codes.DeadlineExceeded {
		t.Fatal("the stream did not end after its topic unloaded; the handler waited for an answer that was dropped")
	}
	if err == nil {
		t.Fatalf("received %v after the unload, want the stream's end", r)
	}
	release()
	if err := <-unloaded; err != nil {
		t.Fatal(err)
	}
}
