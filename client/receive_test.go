package client

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/magnetar-io/magnetar/proto/brokerpb"
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
