package broker

import (
	"sync"

	"github.com/magnetar-io/magnetar/proto/brokerpb"
)

// producer is one producer connection (a Produce stream). Its responses
// go out in the order of its sends. After its first failed send it refuses
// every later one: the client reconnects and resends from the failure, so
// that the producer's messages stay in order in the topic.
type producer struct {
	name         string
	t            *topic
	lastSequence int64

	signal chan struct{}
	gone   chan struct{}

	mu struct {
		sync.Mutex
		queue  []*brokerpb.ProduceResponse
		failed bool
		err    error // disconnected
	}
}

func newProducer(name string) *producer {
	return &producer{name: name, signal: make(chan struct{}, 1), gone: make(chan struct{})}
}

func (p *producer) push(r *brokerpb.ProduceResponse) {
	p.mu.Lock()
	if p.mu.err == nil {
		p.mu.queue = append(p.mu.queue, r)
	}
	p.mu.Unlock()
	select {
	case p.signal <- struct{}{}:
	default:
	}
}

// fail marks the producer failed and queues the send error.
func (p *producer) fail(seq uint64, err error) {
	reason, _, _ := reasonOf(err)
	p.mu.Lock()
	p.mu.failed = true
	p.mu.Unlock()
	p.push(&brokerpb.ProduceResponse{Response: &brokerpb.ProduceResponse_Error{Error: &brokerpb.SendError{SequenceId: seq, Reason: reason, Message: err.Error()}}})
}

func (p *producer) hasFailed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.failed
}

// isDisconnected reports whether the producer was disconnected.
func (p *producer) isDisconnected() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.err != nil
}

func (p *producer) next() ([]*brokerpb.ProduceResponse, error) {
	for {
		p.mu.Lock()
		q, err := p.mu.queue, p.mu.err
		p.mu.queue = nil
		p.mu.Unlock()
		if len(q) > 0 {
			return q, nil
		}
		if err != nil {
			return nil, err
		}
		select {
		case <-p.signal:
		case <-p.gone:
		}
	}
}

func (p *producer) disconnect(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.err != nil {
		return
	}
	p.mu.err = err
	close(p.gone)
}
