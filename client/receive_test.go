package client

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/magnetar-io/magnetar/proto/brokerpb"
	"github.com/magnetar-io/magnetar/proto/pulsarpb"
)

// scriptedProduceStream is a produce stream whose Recv returns n receipts
// (of no pending batch), then blocks until abort, then fails.
type scriptedProduceStream struct {
	grpc.ClientStream // not used
	mu                sync.Mutex
	left              int
	aborted           chan struct{}
}

func (s *scriptedProduceStream) Send(*brokerpb.ProduceRequest) error { return nil }

func (s *scriptedProduceStream) Recv() (*brokerpb.ProduceResponse, error) {
	s.mu.Lock()
	if s.left > 0 {
		s.left--
		s.mu.Unlock()
		return &brokerpb.ProduceResponse{Response: &brokerpb.ProduceResponse_Receipt{Receipt: &brokerpb.SendReceipt{
			SequenceId: 1 << 40, MessageId: &brokerpb.MessageId{}}}}, nil
	}
	s.mu.Unlock()
	<-s.aborted
	return nil, context.Canceled
}

// When sends time out, receive returns while the stream's receiver may
// still have responses to hand over (more than its buffer holds): they
// must be taken until the stream ends, or the receiver never ends (a
// goroutine leak the e2e suite's leak check found under faults).
func TestReceiveLeavesNoReceiverBehindAfterTimeouts(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	timedOut := make(chan error, 1)
	pp := &partitionProducer{topic: "t", opts: &ProducerOptions{SendTimeout: time.Millisecond},
		sem: make(chan struct{}, 1), stop: make(chan struct{})}
	pp.idle = sync.NewCond(&pp.mu)
	pp.sem <- struct{}{}
	pp.mu.pending = []*pendingBatch{{created: time.Now().Add(-time.Hour), msgs: []*pendingMsg{{seq: 1,
		cb: func(_ MessageID, _ *ProducerMessage, err error) { timedOut <- err }}}}}
	stream := &scriptedProduceStream{left: 100, aborted: make(chan struct{})}
	timeouts := make(chan time.Time, 1)
	timeouts <- time.Now()
	recvEnded := make(chan struct{})
	_, err := pp.receive(stream, timeouts, recvEnded)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("receive after a timeout: %v, want ErrUnavailable", err)
	}
	if err := <-timedOut; !errors.Is(err, ErrSendTimeout) {
		t.Fatalf("the pending send: %v, want ErrSendTimeout", err)
	}
	close(stream.aborted) // the caller aborts the stream: the receiver must end
	<-recvEnded
}

// closingProduceStream answers, once released, a receipt for sequence id
// 1, then ends: a broker answering what it took before ending the stream
// of a producer being closed.
type closingProduceStream struct {
	grpc.ClientStream // not used
	release           chan struct{}
	answered          bool
}

func (s *closingProduceStream) Send(*brokerpb.ProduceRequest) error { return nil }

func (s *closingProduceStream) Recv() (*brokerpb.ProduceResponse, error) {
	<-s.release
	if s.answered {
		return nil, io.EOF
	}
	s.answered = true
	return &brokerpb.ProduceResponse{Response: &brokerpb.ProduceResponse_Receipt{Receipt: &brokerpb.SendReceipt{
		SequenceId: 1, MessageId: &brokerpb.MessageId{LedgerId: 3, EntryId: 4}}}}, nil
}

// A receipt that comes after Close stopped the receiving (while it waits
// for the broker to end the stream) still acknowledges its message: the
// broker stored it.
func TestReceiptAfterCloseAcknowledges(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	result := make(chan error, 1)
	pp := &partitionProducer{topic: "t", opts: &ProducerOptions{}, sem: make(chan struct{}, 1), stop: make(chan struct{})}
	pp.idle = sync.NewCond(&pp.mu)
	pp.sem <- struct{}{}
	pp.mu.pending = []*pendingBatch{{created: time.Now(), req: &brokerpb.Send{Metadata: &pulsarpb.MessageMetadata{}},
		msgs: []*pendingMsg{{seq: 1, cb: func(_ MessageID, _ *ProducerMessage, err error) { result <- err }}}}}
	close(pp.stop) // Close
	stream := &closingProduceStream{release: make(chan struct{})}
	recvEnded := make(chan struct{})
	if _, err := pp.receive(stream, nil, recvEnded); !errors.Is(err, ErrClosed) {
		t.Fatalf("receive after Close: %v, want ErrClosed", err)
	}
	close(stream.release) // the broker answers, then ends the stream
	<-recvEnded           // the receipt was handled before
	select {
	case err := <-result:
		if err != nil {
			t.Fatalf("the message answered after Close: %v, want acknowledged", err)
		}
	default:
		t.Fatal("the receipt that came after Close was dropped")
	}
}
