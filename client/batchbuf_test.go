package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/magnetar-io/magnetar/internal/testutil"
	"github.com/magnetar-io/magnetar/proto/brokerpb"
	"github.com/magnetar-io/magnetar/proto/entry"
)

// A batch's buffer goes back to the pool only once the batch is done and
// the sender is not writing it: gRPC reads it until Send returns.
func TestBatchBufferReleasedAfterDoneAndSent(t *testing.T) {
	for _, tc := range []struct {
		name         string
		sending      bool
		wantReleased bool
	}{
		{"done, not being sent", false, true},
		{"done while being sent", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf := append(getBatchBuf(5000), "payload"...)
			b := &pendingBatch{req: &brokerpb.Send{Payload: buf}, buf: buf, sending: tc.sending}
			b.finishLocked()
			if released := b.buf == nil; released != tc.wantReleased {
				t.Fatalf("released: %v, want %v", released, tc.wantReleased)
			}
			if tc.sending {
				if string(b.req.Payload) != "payload" {
					t.Fatalf("payload while being sent: %q", b.req.Payload)
				}
				b.sending = false // Send returned
				b.releaseLocked()
				if b.buf != nil || b.req.Payload != nil {
					t.Fatal("not released once Send returned")
				}
			}
			if buf[0] != 0xdb {
				t.Fatalf("the released buffer was not poisoned: %q", buf[:7])
			}
		})
	}
	b := &pendingBatch{req: &brokerpb.Send{}, buf: getBatchBuf(100)}
	b.releaseLocked()
	if b.buf == nil {
		t.Fatal("released before the batch was done")
	}
}

// A batch that expires while the sender is writing it keeps its bytes
// until the write is over: gRPC encodes the request after the expiry, and
// must find the payload the batch was built with (a buffer released at
// the expiry would be poisoned and taken off the request). Driven through
// a producer, its sender held inside Send by an interceptor until the
// application has been told of the timeout.
func TestBatchExpiredWhileSentKeepsItsBytes(t *testing.T) {
	f := startFakeBroker(t, fakeOptions{})
	entered, gate := make(chan struct{}), make(chan struct{})
	encoded := make(chan []byte, 1) // the payload as gRPC is given it, after the gate
	var hold sync.Once
	saved := testDialOptions
	testDialOptions = []grpc.DialOption{grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || method != brokerpb.Broker_Produce_FullMethodName {
			return s, err
		}
		return &sendHook{ClientStream: s, send: func(m any) {
			req, ok := m.(*brokerpb.ProduceRequest)
			if !ok || req.GetSend() == nil {
				return
			}
			hold.Do(func() {
				close(entered)
				<-gate
				encoded <- bytes.Clone(req.GetSend().Payload)
			})
		}}, nil
	})}
	t.Cleanup(func() { testDialOptions = saved })
	c := newTestClient(t, ClientOptions{URL: "magnetar://" + f.addr})
	// The timeout leaves the sender ample time to take the batch (it
	// must be inside Send when the batch expires); the hold makes a long
	// one as deterministic as a short one.
	p, err := c.CreateProducer(ProducerOptions{Topic: "t", SendTimeout: 2 * time.Second,
		BatchingMaxMessages: 3, BatchingMaxPublishDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
		p.Close()
	}()
	want := []string{"first message", "second message", "third message"}
	errs := make(chan error, len(want))
	for _, m := range want {
		p.SendAsync(ctxT(t), &ProducerMessage{Payload: []byte(m)}, func(_ MessageID, _ *ProducerMessage, err error) { errs <- err })
	}
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the batch was never sent")
	}
	deadline := time.After(30 * time.Second)
	for range want {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrSendTimeout) {
				t.Fatalf("got %v, want a send timeout", err)
			}
		case <-deadline:
			t.Fatal("the held batch did not expire")
		}
	}
	close(gate)
	var payload []byte
	select {
	case payload = <-encoded:
	case <-deadline:
		t.Fatal("the sender did not go on once released")
	}
	msgs, err := entry.SplitBatch(payload, len(want))
	if err != nil {
		t.Fatalf("the payload written after the expiry: %v (%q)", err, payload[:min(len(payload), 16)])
	}
	for i, m := range msgs {
		if string(m.Payload) != want[i] {
			t.Fatalf("message %d written as %q, want %q", i, m.Payload, want[i])
		}
	}
}

// sendHook is a client stream whose SendMsg calls send first.
type sendHook struct {
	grpc.ClientStream
	send func(m any)
}

func (s *sendHook) SendMsg(m any) error {
	s.send(m)
	return s.ClientStream.SendMsg(m)
}

func TestBatchBufSizes(t *testing.T) {
	for _, tc := range []struct{ size, wantCap int }{
		{0, 4096}, {1, 4096}, {4096, 4096}, {4097, 8192}, {70 << 10, 128 << 10}, {16 << 20, 16 << 20}, {16<<20 + 1, 16<<20 + 1},
	} {
		if b := getBatchBuf(tc.size); len(b) != 0 || cap(b) != tc.wantCap {
			t.Errorf("getBatchBuf(%d): len %d cap %d, want 0 and %d", tc.size, len(b), cap(b), tc.wantCap)
		}
	}
}

// Batches pending when the stream breaks are sent again from their
// buffers, which are reused only after: what the broker stores is every
// message, in order, with its own bytes (released buffers are poisoned in
// these tests).
func TestResentBatchesKeepTheirBytes(t *testing.T) {
	f := startFakeBroker(t, fakeOptions{})
	f.cutAfterSends(4)
	c := newTestClient(t, ClientOptions{URL: "magnetar://" + f.addr})
	p, err := c.CreateProducer(ProducerOptions{Topic: "t", BatchingMaxMessages: 7, BatchingMaxPublishDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const n = 2000
	var want []string
	errs := make(chan error, n)
	for i := range n {
		want = append(want, fmt.Sprintf("message %d %s", i, slices.Repeat([]byte{byte('a' + i%26)}, 100+i%300)))
		p.SendAsync(ctxT(t), &ProducerMessage{Payload: []byte(want[i])}, func(_ MessageID, _ *ProducerMessage, err error) { errs <- err })
		if i == n/2 {
			// A second cut halfway, once the first one happened.
			testutil.Eventually(t, 10*time.Second, "the first cut", func() bool {
				f.mu.Lock()
				defer f.mu.Unlock()
				return f.mu.cutAfter == 0
			})
			f.cutAfterSends(3)
		}
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 10*time.Second, "nothing left to store", func() bool { return len(f.storedMessages(t)) >= n })
	if got := f.storedMessages(t); !slices.Equal(got, want) {
		t.Fatalf("stored %d messages, want %d; first difference at %d", len(got), len(want), firstDiff(got, want))
	}
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
