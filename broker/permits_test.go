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
// that does not split, a payload that does not decompress or claims more
// than it can make) is dropped as pulsar-client-go drops it: acknowledged
// with its reason, which the broker logs and counts, so that it does not
// hold the subscription's backlog (nor a terminated topic's end) for good.
// One that another client may read (encrypted; a chunk of a larger
// message; a claim over this client's 64 MiB that the payload could make)
// is left unacknowledged, as pulsar-client-go leaves an entry it cannot
// decrypt, and on a shared subscription nacked, as it nacks one, so that
// it comes again. A reader acknowledges nothing. Each is told to the
// client's Logger.
func TestUnreadableEntriesDroppedOrKept(t *testing.T) {
	e := newEnv(t, nil)
	const topic = "unreadable-entries"
	send := rawProducer(t, e, topic)
	lz4 := func(claim uint32) *pulsarpb.MessageMetadata {
		return &pulsarpb.MessageMetadata{Compression: pulsarpb.CompressionType_LZ4.Enum(), UncompressedSize: proto.Uint32(claim)}
	}
	// Dropped: their entry ids are 0, 1, 2.
	send(&pulsarpb.MessageMetadata{NumMessagesInBatch: proto.Int32(3)}, "not a batch of 3")
	send(lz4(100), "not LZ4")
	send(lz4(100<<20), "19 bytes cannot make 100 MiB of LZ4")
	// Kept: 3, 4, 5.
	send(&pulsarpb.MessageMetadata{EncryptionKeys: []*pulsarpb.EncryptionKeys{{Key: proto.String("k"), Value: []byte("wrapped key")}}}, "ciphertext")
	send(&pulsarpb.MessageMetadata{Compression: pulsarpb.CompressionType_ZSTD.Enum(), UncompressedSize: proto.Uint32(100 << 20)}, "a ZSTD frame may")
	send(&pulsarpb.MessageMetadata{NumChunksFromMsg: proto.Int32(2), ChunkId: proto.Int32(0), Uuid: proto.String("u"), TotalChunkMsgSize: proto.Int32(20)}, "first half")
	send(&pulsarpb.MessageMetadata{}, "readable")

	logs := newLogRecords()
	cl, err := client.NewClient(client.ClientOptions{URL: "magnetar://" + e.b.Addr(), Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctxT(t), 30*time.Second)
	defer cancel()
	discarded := func() (batch, lz4 float64) {
		m := testutil.Scrape(t, e.b.HTTPAddr())
		batch, _ = m.Value(t, "magnetar_broker_entries_discarded_total", "reason", "batch_error")
		lz4, _ = m.Value(t, "magnetar_broker_entries_discarded_total", "reason", "decompression_error")
		return batch, lz4
	}
	const (
		skipped = "magnetar: a message could not be read and was skipped"
		dropped = "magnetar: a message could not be read and was dropped (acknowledged)"
		kept    = "magnetar: a message could not be read by this client and was not delivered"
	)

	// A reader: nothing acknowledged, nothing counted.
	r, err := cl.CreateReader(client.ReaderOptions{Topic: topic, StartMessageID: client.EarliestMessageID()})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := r.Next(ctx); err != nil || string(m.Payload()) != "readable" {
		t.Fatalf("reader: %v, %v; want only the readable message", m, err)
	}
	r.Close()
	if b, l := discarded(); b != 0 || l != 0 {
		t.Fatalf("a reader dropped entries: counted %v batch and %v decompression errors", b, l)
	}
	want := []string{"0 " + skipped, "1 " + skipped, "2 " + skipped, "3 " + skipped, "4 " + skipped, "5 " + skipped}
	if got := logs.take(); !slices.Equal(got, want) {
		t.Errorf("reader logged %q, want %q", got, want)
	}

	// Exclusive: the corrupt entries acknowledged, the others kept.
	cons, err := cl.Subscribe(client.ConsumerOptions{Topic: topic, SubscriptionName: "s",
		SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons.Receive(ctx)
	if err != nil || string(m.Payload()) != "readable" {
		t.Fatalf("got %v, %v; want only the readable message", m, err)
	}
	if err := cons.Ack(m); err != nil {
		t.Fatal(err)
	}
	cons.Close() // its acknowledgements all applied
	if got := statsBacklog(t, e, topic, "s"); got != 3 {
		t.Errorf("backlog %d, want 3: the encrypted entry, the chunk and the ZSTD claim", got)
	}
	if b, l := discarded(); b != 1 || l != 2 {
		t.Errorf("counted %v batch and %v decompression errors, want 1 and 2", b, l)
	}
	want = []string{"0 " + dropped, "1 " + dropped, "2 " + dropped, "3 " + kept, "4 " + kept, "5 " + kept}
	if got := logs.take(); !slices.Equal(got, want) {
		t.Errorf("exclusive consumer logged %q, want %q", got, want)
	}

	// Shared: the kept ones are nacked, and so come again.
	shared, err := cl.Subscribe(client.ConsumerOptions{Topic: topic, SubscriptionName: "sh", Type: client.Shared,
		SubscriptionInitialPosition: client.SubscriptionPositionEarliest, NackRedeliveryDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer shared.Close()
	if m, err := shared.Receive(ctx); err != nil || string(m.Payload()) != "readable" {
		t.Fatalf("shared: %v, %v; want the readable message", m, err)
	}
	times := map[string]int{}
	testutil.Eventually(t, 20*time.Second, "each kept entry delivered again", func() bool {
		for _, l := range logs.take() {
			times[l]++
		}
		return times["3 "+kept] >= 2 && times["4 "+kept] >= 2 && times["5 "+kept] >= 2
	})
}

// logRecords is a slog.Handler keeping, for each record, the value of its
// "entry" attribute and its message.
type logRecords struct {
	mu    *sync.Mutex
	msgs  *[]string
	entry string // from WithAttrs
}

func newLogRecords() *logRecords { return &logRecords{mu: &sync.Mutex{}, msgs: &[]string{}} }

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) WithGroup(string) slog.Handler            { return l }
func (l *logRecords) WithAttrs(as []slog.Attr) slog.Handler {
	c := *l
	for _, a := range as {
		if a.Key == "entry" {
			c.entry = a.Value.String()
		}
	}
	return &c
}

func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	*l.msgs = append(*l.msgs, l.entry+" "+r.Message)
	return nil
}

// take returns the messages kept since the last take.
func (l *logRecords) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := *l.msgs
	*l.msgs = nil
	return out
}
