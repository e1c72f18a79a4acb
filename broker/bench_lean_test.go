package broker_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/internal/pulsarwire"
	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/proto/brokerpb"
	"github.com/magnetar-io/magnetar/proto/entry"
	"github.com/magnetar-io/magnetar/proto/pulsarpb"
)

// Lean producers: the least client work each protocol allows (no
// batching timer, no per-message callback or queue; a batch is a fixed
// number of messages), sending the same entries, so that what differs
// between the two in BenchmarkProtocols is the broker's path for each
// protocol and the protocol's own framing, not the clients (the SDK and
// pulsar-client-go differ 2x in CPU per message).

// leanBatch is the messages per entry of the lean producers' batched
// cases: 100 messages of 1 KiB, about what the SDK's batches of at most
// 128 KiB hold.
const leanBatch = 100

// leanProducer sends entries of n messages. send and flush are called by
// one goroutine, receipt by another.
type leanProducer interface {
	// send sends (or buffers) one entry of n messages, the first with
	// sequence id first.
	send(first uint64, n int) error
	// flush writes what send buffered.
	flush() error
	// receipt waits for the next entry's receipt.
	receipt() error
	close()
}

// benchLean sends b.N messages in entries of batch through p with at most
// inflight messages unanswered, and reports msg/s as benchSends does.
func benchLean(b *testing.B, inflight, batch int, p leanProducer) {
	defer p.close()
	entries := (b.N + batch - 1) / batch
	slots := make(chan struct{}, max(1, inflight/batch))
	done := make(chan error, 1)
	b.SetBytes(1024)
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu := time.Now(), startCPU(b)
	go func() {
		for i := 0; i < entries; i++ {
			if err := p.receipt(); err != nil {
				done <- fmt.Errorf("receipt %d of %d: %w", i, entries, err)
				return
			}
			<-slots
		}
		done <- nil
	}()
	for i := 0; i < entries; i++ {
		select {
		case slots <- struct{}{}:
		default:
			// Everything allowed is sent: write it out, then wait.
			if err := p.flush(); err != nil {
				b.Fatal(err)
			}
			select {
			case slots <- struct{}{}:
			case err := <-done:
				b.Fatalf("receiving ended early: %v", err)
			}
		}
		if err := p.send(uint64(i*batch), min(batch, b.N-i*batch)); err != nil {
			b.Fatal(err)
		}
	}
	if err := p.flush(); err != nil {
		b.Fatal(err)
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msg/s")
	cpu.report(b)
}

// leanBody is the stored payload of an entry of n messages: payload
// itself for one message sent unbatched (batch 1), else n single
// messages packed as a batch is.
func leanBody(b testing.TB, first uint64, n, batch int, payload []byte) ([]byte, *pulsarpb.MessageMetadata) {
	md := &pulsarpb.MessageMetadata{}
	if batch == 1 {
		return payload, md
	}
	body := make([]byte, 0, n*(len(payload)+16))
	for i := range n {
		var err error
		if body, err = entry.AppendSingle(body, &pulsarpb.SingleMessageMetadata{SequenceId: proto.Uint64(first + uint64(i)),
			PayloadSize: proto.Int32(int32(len(payload)))}, payload); err != nil {
			b.Fatal(err)
		}
	}
	md.NumMessagesInBatch = proto.Int32(int32(n))
	return body, md
}

// leanGRPC produces on the broker's gRPC Produce stream.
type leanGRPC struct {
	b       testing.TB
	cc      *grpc.ClientConn
	cancel  context.CancelFunc
	stream  brokerpb.Broker_ProduceClient
	payload []byte
	batch   int
}

func dialLeanGRPC(ctx context.Context, b testing.TB, addr, topic string, payload []byte, batch int) leanProducer {
	b.Helper()
	// The SDK's buffers and windows (client/client.go).
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithWriteBufferSize(256<<10), grpc.WithReadBufferSize(256<<10),
		grpc.WithInitialWindowSize(4<<20), grpc.WithInitialConnWindowSize(8<<20))
	if err != nil {
		b.Fatal(err)
	}
	bc := brokerpb.NewBrokerClient(cc)
	if _, err := bc.Lookup(ctx, &brokerpb.LookupRequest{Topic: topic}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	stream, err := bc.Produce(ctx)
	if err == nil {
		err = stream.Send(&brokerpb.ProduceRequest{Request: &brokerpb.ProduceRequest_Open{Open: &brokerpb.ProducerOpen{Topic: topic}}})
	}
	var resp *brokerpb.ProduceResponse
	if err == nil {
		resp, err = stream.Recv()
	}
	if err == nil && resp.GetOpened() == nil {
		err = fmt.Errorf("open answered %v", resp)
	}
	if err != nil {
		cancel()
		cc.Close()
		b.Fatal(err)
	}
	return &leanGRPC{b: b, cc: cc, cancel: cancel, stream: stream, payload: payload, batch: batch}
}

func (p *leanGRPC) send(first uint64, n int) error {
	body, md := leanBody(p.b, first, n, p.batch, p.payload)
	// What the SDK sends: the broker fills in these three.
	md.ProducerName, md.SequenceId, md.PublishTime = proto.String(""), proto.Uint64(0), proto.Uint64(0)
	s := &brokerpb.Send{SequenceId: first, Metadata: md, Payload: body}
	if n > 1 {
		s.HighestSequenceId = first + uint64(n) - 1
	}
	return p.stream.Send(&brokerpb.ProduceRequest{Request: &brokerpb.ProduceRequest_Send{Send: s}})
}

func (p *leanGRPC) flush() error { return nil } // gRPC's writer coalesces

func (p *leanGRPC) receipt() error {
	resp, err := p.stream.Recv()
	if err != nil {
		return err
	}
	if resp.GetReceipt() == nil {
		return fmt.Errorf("answered %v", resp)
	}
	return nil
}

func (p *leanGRPC) close() {
	p.cancel()
	p.cc.Close()
}

// leanPulsar produces on a connection of Pulsar's binary protocol, its
// SEND frames written through one buffer (pulsar-client-go writes each
// with a system call of its own).
type leanPulsar struct {
	b       testing.TB
	conn    net.Conn
	w       *bufio.Writer
	r       *pulsarwire.Reader
	name    string
	payload []byte
	batch   int
	frame   []byte
}

const leanProducerID = 1

func dialLeanPulsar(b testing.TB, addr, topic string, payload []byte, batch int) leanProducer {
	b.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	p := &leanPulsar{b: b, conn: conn, w: bufio.NewWriterSize(conn, 256<<10), r: pulsarwire.NewReader(conn, 10<<20), payload: payload, batch: batch}
	ask := func(cmd *pulsarpb.BaseCommand) *pulsarpb.BaseCommand {
		err := p.write(cmd, nil)
		if err == nil {
			err = p.flush()
		}
		var f pulsarwire.Frame
		if err == nil {
			f, err = p.r.Read()
		}
		if err != nil {
			conn.Close()
			b.Fatal(err)
		}
		return f.Cmd
	}
	if got := ask(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_CONNECT.Enum(), Connect: &pulsarpb.CommandConnect{
		ClientVersion: proto.String("lean"), ProtocolVersion: proto.Int32(19)}}); got.GetType() != pulsarpb.BaseCommand_CONNECTED {
		conn.Close()
		b.Fatalf("CONNECT answered %v", got)
	}
	got := ask(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PRODUCER.Enum(), Producer: &pulsarpb.CommandProducer{
		Topic: proto.String(topic), ProducerId: proto.Uint64(leanProducerID), RequestId: proto.Uint64(1)}})
	if got.GetType() != pulsarpb.BaseCommand_PRODUCER_SUCCESS {
		conn.Close()
		b.Fatalf("PRODUCER answered %v", got)
	}
	p.name = got.GetProducerSuccess().GetProducerName()
	return p
}

func (p *leanPulsar) write(cmd *pulsarpb.BaseCommand, payload []byte) error {
	var err error
	if p.frame, err = pulsarwire.Append(p.frame[:0], cmd, payload); err != nil {
		return err
	}
	_, err = p.w.Write(p.frame)
	return err
}

func (p *leanPulsar) send(first uint64, n int) error {
	body, md := leanBody(p.b, first, n, p.batch, p.payload)
	// What pulsar-client-go writes, which the broker stores as sent.
	md.ProducerName, md.SequenceId, md.PublishTime = proto.String(p.name), proto.Uint64(first), proto.Uint64(uint64(time.Now().UnixMilli()))
	cmd := &pulsarpb.CommandSend{ProducerId: proto.Uint64(leanProducerID), SequenceId: proto.Uint64(first), NumMessages: proto.Int32(int32(n))}
	if n > 1 {
		md.HighestSequenceId = proto.Uint64(first + uint64(n) - 1)
		cmd.HighestSequenceId = md.HighestSequenceId
	}
	e, err := entry.Encode(md, body)
	if err != nil {
		return err
	}
	return p.write(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SEND.Enum(), Send: cmd}, e)
}

func (p *leanPulsar) flush() error { return p.w.Flush() }

func (p *leanPulsar) receipt() error {
	for {
		f, err := p.r.Read()
		if err != nil {
			return err
		}
		switch f.Cmd.GetType() {
		case pulsarpb.BaseCommand_SEND_RECEIPT:
			return nil
		case pulsarpb.BaseCommand_PING: // not answered: the broker closes only a connection silent for three keepalives, and this one sends
		default:
			return fmt.Errorf("answered %v", f.Cmd)
		}
	}
}

func (p *leanPulsar) close() { p.conn.Close() }

// The lean producers of BenchmarkProtocols store what they claim: each
// message sent, batched or not, is read back by the SDK with its payload,
// in batches of the size it was sent in.
func TestLeanProducersStoreWhatTheySend(t *testing.T) {
	e := newEnv(t, nil)
	cl := e.client()
	payload := []byte("lean payload")
	for _, tc := range []struct {
		name  string
		dial  func(topic string, batch int) leanProducer
		batch int
	}{
		{"grpc", func(topic string, batch int) leanProducer {
			return dialLeanGRPC(ctxT(t), t, e.b.Addr(), topic, payload, batch)
		}, 1},
		{"grpc-batched", func(topic string, batch int) leanProducer {
			return dialLeanGRPC(ctxT(t), t, e.b.Addr(), topic, payload, batch)
		}, 3},
		{"pulsar", func(topic string, batch int) leanProducer {
			return dialLeanPulsar(t, e.b.Addr(), topic, payload, batch)
		}, 1},
		{"pulsar-batched", func(topic string, batch int) leanProducer {
			return dialLeanPulsar(t, e.b.Addr(), topic, payload, batch)
		}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topic := "persistent://public/default/lean-" + tc.name
			p := tc.dial(topic, tc.batch)
			defer p.close()
			// 7 messages: batches of 3, 3 and 1 when batched.
			const n = 7
			for first := 0; first < n; first += tc.batch {
				if err := p.send(uint64(first), min(tc.batch, n-first)); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.flush(); err != nil {
				t.Fatal(err)
			}
			for first := 0; first < n; first += tc.batch {
				if err := p.receipt(); err != nil {
					t.Fatal(err)
				}
			}
			c, err := cl.Subscribe(client.ConsumerOptions{Topic: topic, SubscriptionName: "s", SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for i := 0; i < n; i++ {
				m, err := c.Receive(ctxT(t))
				if err != nil {
					t.Fatal(err)
				}
				id := m.ID()
				idx, size := int32(-1), int32(0) // unbatched
				if tc.batch > 1 {
					idx, size = int32(i%tc.batch), int32(min(tc.batch, n-i/tc.batch*tc.batch))
				}
				if string(m.Payload()) != string(payload) || m.ProducerName() == "" || id.BatchIdx() != idx || id.BatchSize() != size {
					t.Fatalf("message %d: %q from %q, id %v (batch size %d); want %q in batches of %d", i, m.Payload(), m.ProducerName(), id, id.BatchSize(), payload, tc.batch)
				}
			}
		})
	}
}
