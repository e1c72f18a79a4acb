package client

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/internal/testutil"
	"github.com/magnetar-io/magnetar/proto/brokerpb"
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
