package broker

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/magnetar-io/magnetar/proto/brokerpb"
)

// The receipts at the front of a producer's queue go out in one Receipts,
// in order, up to maxReceiptsTogether; an error (or anything else) ends
// the run and goes out alone.
func TestReceiptsTogether(t *testing.T) {
	receipt := func(seq uint64) *brokerpb.ProduceResponse {
		return &brokerpb.ProduceResponse{Response: &brokerpb.ProduceResponse_Receipt{Receipt: &brokerpb.SendReceipt{SequenceId: seq}}}
	}
	failure := &brokerpb.ProduceResponse{Response: &brokerpb.ProduceResponse_Error{Error: &brokerpb.SendError{SequenceId: 3}}}
	q := []*brokerpb.ProduceResponse{receipt(1), receipt(2), failure, receipt(4)}
	if n := receiptsAhead(q); n != 2 {
		t.Fatalf("receipts ahead of an error: %d, want 2", n)
	}
	if n := receiptsAhead(q[2:]); n != 0 {
		t.Fatalf("receipts ahead at an error: %d, want 0", n)
	}
	got := receiptsOf(q[:2]).GetReceipts().GetReceipts()
	if len(got) != 2 || got[0].SequenceId != 1 || got[1].SequenceId != 2 {
		t.Fatalf("Receipts %v, want 1 and 2", got)
	}
	long := make([]*brokerpb.ProduceResponse, maxReceiptsTogether+5)
	for i := range long {
		long[i] = receipt(uint64(i))
	}
	if n := receiptsAhead(long); n != maxReceiptsTogether {
		t.Fatalf("receipts ahead of a long queue: %d, want the cap %d", n, maxReceiptsTogether)
	}
}

// Receipts go together only to a client that asked (an older one reads
// one receipt per response), in order, errors alone.
func TestNextResponse(t *testing.T) {
	receipt := func(seq uint64) *brokerpb.ProduceResponse {
		return &brokerpb.ProduceResponse{Response: &brokerpb.ProduceResponse_Receipt{Receipt: &brokerpb.SendReceipt{SequenceId: seq}}}
	}
	failure := &brokerpb.ProduceResponse{Response: &brokerpb.ProduceResponse_Error{Error: &brokerpb.SendError{SequenceId: 3}}}
	for _, together := range []bool{false, true} {
		q := []*brokerpb.ProduceResponse{receipt(1), receipt(2), failure, receipt(4)}
		var got []string
		for len(q) > 0 {
			var r *brokerpb.ProduceResponse
			r, q = nextResponse(q, together)
			switch x := r.Response.(type) {
			case *brokerpb.ProduceResponse_Receipt:
				got = append(got, "receipt")
			case *brokerpb.ProduceResponse_Receipts:
				got = append(got, fmt.Sprintf("receipts of %d", len(x.Receipts.Receipts)))
			case *brokerpb.ProduceResponse_Error:
				got = append(got, "error")
			}
		}
		want := "receipt receipt error receipt"
		if together {
			want = "receipts of 2 error receipt"
		}
		if g := strings.Join(got, " "); g != want {
			t.Errorf("together=%v: %s, want %s", together, g, want)
		}
	}
}

// A producer's responses are queued in the order their sends were taken,
// whatever order they are decided in: a send refused at once waits for
// the sends before it, still being stored; nothing is queued after the
// producer is disconnected.
func TestResponsesInSendOrder(t *testing.T) {
	receipt := func(seq uint64) *brokerpb.ProduceResponse {
		return &brokerpb.ProduceResponse{Response: &brokerpb.ProduceResponse_Receipt{Receipt: &brokerpb.SendReceipt{SequenceId: seq}}}
	}
	p := newProducer("p", 10)
	// queued returns the sequence ids queued since the last call.
	queued := func() string {
		p.mu.Lock()
		q := p.mu.queue
		p.mu.queue = nil
		p.mu.Unlock()
		var got []string
		for _, r := range q {
			switch x := r.Response.(type) {
			case *brokerpb.ProduceResponse_Receipt:
				got = append(got, fmt.Sprint(x.Receipt.SequenceId))
			case *brokerpb.ProduceResponse_Error:
				got = append(got, fmt.Sprintf("%d:%v", x.Error.SequenceId, x.Error.Reason))
			default:
				got = append(got, "opened")
			}
		}
		return strings.Join(got, " ")
	}
	p.push(&brokerpb.ProduceResponse{Response: &brokerpb.ProduceResponse_Opened{Opened: &brokerpb.ProducerOpened{}}})
	first, second, third := p.take(), p.take(), p.take()
	p.fail(second, 2, errorf(ErrMessageTooLarge, "too large"))
	p.fail(third, 3, errorf(ErrServiceNotReady, "after a failure"))
	if got := queued(); got != "opened" {
		t.Fatalf("queued %q before the first send is stored; want only the opening", got)
	}
	p.answer(first, receipt(1))
	if got, want := queued(), "1 2:MESSAGE_TOO_LARGE 3:SERVICE_NOT_READY"; got != want {
		t.Fatalf("queued %q, want %q", got, want)
	}
	// Out of order again, further on: the window slid.
	fourth, fifth := p.take(), p.take()
	p.answer(fifth, receipt(5))
	p.answer(fourth, receipt(4))
	if got := queued(); got != "4 5" {
		t.Fatalf("queued %q, want 4 5", got)
	}
	sixth := p.take()
	p.disconnect(errors.New("gone"))
	p.answer(sixth, receipt(6))
	if got := queued(); got != "" {
		t.Fatalf("queued %q after the producer was disconnected", got)
	}
}

// A send's slot is given back only once its answer is written: answers a
// client does not read hold their slots, and the broker takes no more of
// its sends (the Produce handler takes a slot before each send).
func TestSlotsHeldUntilAnswersWritten(t *testing.T) {
	p := newProducer("p", 2)
	// free counts the slots free now.
	free := func() int {
		n := 0
		for {
			select {
			case p.slots <- struct{}{}:
				n++
				continue
			default:
			}
			break
		}
		for range n {
			<-p.slots
		}
		return n
	}
	p.push(&brokerpb.ProduceResponse{Response: &brokerpb.ProduceResponse_Opened{Opened: &brokerpb.ProducerOpened{}}})
	p.slots <- struct{}{}
	first := p.take()
	p.slots <- struct{}{}
	second := p.take()
	p.answer(first, &brokerpb.ProduceResponse{Response: &brokerpb.ProduceResponse_Receipt{Receipt: &brokerpb.SendReceipt{SequenceId: 1}}})
	p.fail(second, 2, errorf(ErrMessageTooLarge, "too large"))
	if n := free(); n != 0 {
		t.Fatalf("%d slots free with both answers unwritten", n)
	}
	written, gate, stop := make(chan *brokerpb.ProduceResponse), make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- p.sendLoop(func(r *brokerpb.ProduceResponse) error {
			select {
			case written <- r:
			case <-stop: // the test failed: end
				return errors.New("stopped")
			}
			select {
			case <-gate:
			case <-stop:
			}
			return nil
		}, true)
	}()
	t.Cleanup(func() {
		close(stop)
		p.disconnect(errors.New("test over")) // sendLoop ends, also from next()
	})
	// Each write is seen before it returns; the slots are checked there.
	for i, want := range []struct {
		what string
		free int // slots free while it is being written
	}{{"opened", 0}, {"receipt", 0}, {"error", 1}} {
		r := <-written
		got := "opened"
		switch r.Response.(type) {
		case *brokerpb.ProduceResponse_Receipt:
			got = "receipt"
		case *brokerpb.ProduceResponse_Error:
			got = "error"
		}
		if got != want.what {
			t.Fatalf("write %d: %s, want %s", i, got, want.what)
		}
		if n := free(); n != want.free {
			t.Fatalf("writing the %s: %d slots free, want %d", got, n, want.free)
		}
		gate <- struct{}{}
	}
	p.disconnect(errors.New("gone"))
	if err := <-done; err == nil {
		t.Fatal("sendLoop returned nil after the producer was disconnected")
	}
	if n := free(); n != 2 {
		t.Fatalf("%d slots free once every answer was written, want 2", n)
	}
}
