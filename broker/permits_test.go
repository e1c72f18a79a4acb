package broker_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/internal/testutil"
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
	send := rawProducer(t, e, "unreadable")
	send(&pulsarpb.MessageMetadata{NumMessagesInBatch: proto.Int32(250000)}, "not a batch of 250,000")
	send(&pulsarpb.MessageMetadata{}, "readable")

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

// rawProducer opens a producer on topic with the client protocol itself,
// and returns a function that stores one entry with the metadata and
// payload given, unchecked by any SDK.
func rawProducer(t *testing.T, e *env, topic string) func(md *pulsarpb.MessageMetadata, payload string) {
	t.Helper()
	stream, err := dialBroker(t, e.b.Addr()).Produce(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stream.CloseSend() })
	if err := stream.Send(&brokerpb.ProduceRequest{Request: &brokerpb.ProduceRequest_Open{Open: &brokerpb.ProducerOpen{Topic: topic}}}); err != nil {
		t.Fatal(err)
	}
	if r, err := stream.Recv(); err != nil || r.GetOpened() == nil {
		t.Fatalf("open: %v %v", r, err)
	}
	seq := uint64(0)
	return func(md *pulsarpb.MessageMetadata, payload string) {
		t.Helper()
		seq++
		md.ProducerName, md.SequenceId, md.PublishTime = proto.String(""), proto.Uint64(0), proto.Uint64(0)
		if err := stream.Send(&brokerpb.ProduceRequest{Request: &brokerpb.ProduceRequest_Send{Send: &brokerpb.Send{
			SequenceId: seq, Metadata: md, Payload: []byte(payload)}}}); err != nil {
			t.Fatal(err)
		}
		if r, err := stream.Recv(); err != nil || r.GetReceipt() == nil {
			t.Fatalf("send %d: %v %v", seq, r, err)
		}
	}
}

// Entries the SDK cannot read are not delivered. A corrupt one (a batch
// that does not split, a payload that does not decompress) is dropped as
// pulsar-client-go drops it: acknowledged with its reason, which the
// broker logs and counts, so that it does not hold the subscription's
// backlog (nor a terminated topic's end) for good. An encrypted one is
// left unacknowledged, as Pulsar's clients leave it by default: a
// consumer with the key could read it. Each is told to the client's
// Logger.
func TestUnreadableEntriesDroppedOrKept(t *testing.T) {
	e := newEnv(t, nil)
	const topic = "unreadable-entries"
	send := rawProducer(t, e, topic)
	send(&pulsarpb.MessageMetadata{NumMessagesInBatch: proto.Int32(3)}, "not a batch of 3")
	send(&pulsarpb.MessageMetadata{Compression: pulsarpb.CompressionType_LZ4.Enum(), UncompressedSize: proto.Uint32(100)}, "not LZ4")
	send(&pulsarpb.MessageMetadata{EncryptionKeys: []*pulsarpb.EncryptionKeys{{Key: proto.String("k"), Value: []byte("wrapped key")}}}, "ciphertext")
	send(&pulsarpb.MessageMetadata{}, "readable")

	var logs logRecords
	cl, err := client.NewClient(client.ClientOptions{URL: "magnetar://" + e.b.Addr(), Logger: slog.New(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cons, err := cl.Subscribe(client.ConsumerOptions{Topic: topic, SubscriptionName: "s",
		SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	ctx, cancel := context.WithTimeout(ctxT(t), 20*time.Second)
	defer cancel()
	m, err := cons.Receive(ctx)
	if err != nil || string(m.Payload()) != "readable" {
		t.Fatalf("got %v, %v; want only the readable message", m, err)
	}
	if err := cons.Ack(m); err != nil {
		t.Fatal(err)
	}
	// The readable and the two corrupt entries are acknowledged; the
	// encrypted one is left.
	testutil.Eventually(t, 20*time.Second, "the corrupt entries acknowledged", func() bool { return statsBacklog(t, e, topic, "s") == 1 })
	mt := testutil.Scrape(t, e.b.HTTPAddr())
	mt.Want(t, 1, "magnetar_broker_entries_discarded_total", "reason", "batch_error")
	mt.Want(t, 1, "magnetar_broker_entries_discarded_total", "reason", "decompression_error")
	got := logs.messages()
	want := []string{
		"magnetar: a message could not be read: dropped (acknowledged)",
		"magnetar: a message could not be read: dropped (acknowledged)",
		"magnetar: a message could not be read and was not delivered",
	}
	if !slices.Equal(got, want) {
		t.Errorf("logged %q, want %q", got, want)
	}
}

// logRecords is a slog.Handler keeping the messages of the records it
// gets.
type logRecords struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecords) WithGroup(string) slog.Handler            { return l }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}

func (l *logRecords) messages() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.msgs)
}
