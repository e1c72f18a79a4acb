package broker

import (
	"context"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/magnetar-io/magnetar/broker/internal/mledger"
	"github.com/magnetar-io/magnetar/proto/brokerpb"
	"github.com/magnetar-io/magnetar/proto/pulsarpb"
)

// producer is one producer connection (a Produce stream, or a producer
// of a Pulsar protocol connection). Its responses go out in the order of
// its sends, whatever order they are decided in: a send refused at once
// waits for the answers of the sends taken before it (take, answer).
// After its first failed send it refuses every later one: the client
// reconnects and resends from the failure, so that the producer's
// messages stay in order in the topic.
type producer struct {
	name         string
	t            *topic
	lastSequence int64
	// client describes the producer's client, as its topic's stats show
	// it (set before the producer is attached; not changed after).
	client clientInfo

	signal chan struct{}
	gone   chan struct{}
	// slots holds a slot per send taken: taken before it is (by the
	// Produce handler, or the Pulsar connection's publish) and given back
	// once its answer is written (sendLoop) or handed to the connection's
	// writer (the Pulsar pump). It bounds the sends being stored and the
	// answers waiting, behind an earlier send or for a client that does
	// not read them.
	slots chan struct{}

	mu struct {
		sync.Mutex
		// window holds the answers of the responses taken and not yet
		// queued, in the order taken, nil while undecided: window[0] is
		// ticket base's. Answered ones at its front move to queue, which
		// the sender takes (next): so a response is queued only after
		// every one taken before it.
		window []*brokerpb.ProduceResponse
		base   uint64
		queue  []*brokerpb.ProduceResponse
		failed bool
		err    error // disconnected
	}
}

func newProducer(name string, maxPending int) *producer {
	return &producer{name: name, signal: make(chan struct{}, 1), gone: make(chan struct{}), slots: make(chan struct{}, maxPending)}
}

// acquire takes a slot for a send, waiting while every slot is held;
// false if ctx ends or the producer is disconnected first (its sends are
// dropped: the client sends them again).
func (p *producer) acquire(ctx context.Context) bool {
	select {
	case p.slots <- struct{}{}:
		return true
	default:
	}
	if h := testHookSlotsFull.Load(); h != nil {
		(*h)()
	}
	select {
	case p.slots <- struct{}{}:
		return true
	case <-p.gone:
		return false
	case <-ctx.Done():
		return false
	}
}

// testHookSlotsFull, when set by a test, runs when a send waits for one
// of its producer's slots.
var testHookSlotsFull atomic.Pointer[func()]

// release gives back the slots of the sends r answers, once r is written
// or handed to the writer.
func (p *producer) release(r *brokerpb.ProduceResponse) {
	for range sendsAnswered(r) {
		<-p.slots
	}
}

// take reserves the place of the next response (a send's answer, told
// later with answer): it goes out after the responses of every take
// before it.
func (p *producer) take() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.err != nil {
		return 0 // disconnected: answers are dropped
	}
	p.mu.window = append(p.mu.window, nil)
	return p.mu.base + uint64(len(p.mu.window)) - 1
}

// answer decides ticket's response (from take): r, queued once the
// responses taken before it are. Dropped once the producer is
// disconnected.
func (p *producer) answer(ticket uint64, r *brokerpb.ProduceResponse) {
	p.mu.Lock()
	if p.mu.err != nil {
		p.mu.Unlock()
		return
	}
	w := p.mu.window
	w[ticket-p.mu.base] = r
	n := 0
	for n < len(w) && w[n] != nil {
		n++
	}
	if n == 0 {
		p.mu.Unlock()
		return
	}
	p.mu.queue = append(p.mu.queue, w[:n]...)
	clear(w[:n])
	p.mu.window, p.mu.base = w[n:], p.mu.base+uint64(n)
	p.mu.Unlock()
	select {
	case p.signal <- struct{}{}:
	default:
	}
}

// push queues r after the responses taken so far.
func (p *producer) push(r *brokerpb.ProduceResponse) { p.answer(p.take(), r) }

// receiptParts are the messages of a send's receipt, allocated at once.
type receiptParts struct {
	resp    brokerpb.ProduceResponse
	wrap    brokerpb.ProduceResponse_Receipt
	receipt brokerpb.SendReceipt
	id      brokerpb.MessageId
}

// newReceipt returns the receipt of the send seq of t, stored at pos.
func newReceipt(t *topic, seq uint64, pos mledger.Position, dup bool) *brokerpb.ProduceResponse {
	r := &receiptParts{}
	t.setMessageID(&r.id, pos, -1, 0)
	r.receipt.SequenceId, r.receipt.MessageId, r.receipt.Duplicate = seq, &r.id, dup
	r.wrap.Receipt = &r.receipt
	r.resp.Response = &r.wrap
	return &r.resp
}

// nextResponse returns the next response to write of those queued, and
// the rest: with together (the client asked for ProducerOpen's
// receipts_together), the receipts at the front in one Receipts.
func nextResponse(q []*brokerpb.ProduceResponse, together bool) (*brokerpb.ProduceResponse, []*brokerpb.ProduceResponse) {
	if !together { // an older client: nothing to count ahead
		return q[0], q[1:]
	}
	if n := receiptsAhead(q); n > 1 {
		return receiptsOf(q[:n]), q[n:]
	}
	return q[0], q[1:]
}

// sendLoop writes the queued responses with send, in order (receipts
// together when the client asked), giving back each answered send's slot
// once its answer is written, until the producer is disconnected and
// nothing is left to write, or send fails.
func (p *producer) sendLoop(send func(*brokerpb.ProduceResponse) error, together bool) error {
	for {
		q, err := p.next()
		if err != nil {
			return err
		}
		for len(q) > 0 {
			var r *brokerpb.ProduceResponse
			r, q = nextResponse(q, together)
			if err := send(r); err != nil {
				return err
			}
			p.release(r)
		}
	}
}

// sendsAnswered counts the sends r answers.
func sendsAnswered(r *brokerpb.ProduceResponse) int {
	switch x := r.Response.(type) {
	case *brokerpb.ProduceResponse_Receipt, *brokerpb.ProduceResponse_Error:
		return 1
	case *brokerpb.ProduceResponse_Receipts:
		return len(x.Receipts.GetReceipts())
	}
	return 0
}

// maxReceiptsTogether caps the receipts of one Receipts response.
const maxReceiptsTogether = 1024

// receiptsAhead counts the receipts at the front of q, up to
// maxReceiptsTogether.
func receiptsAhead(q []*brokerpb.ProduceResponse) int {
	n := 0
	for n < len(q) && n < maxReceiptsTogether && q[n].GetReceipt() != nil {
		n++
	}
	return n
}

// receiptsOf makes one Receipts response of receipt responses, in order.
func receiptsOf(q []*brokerpb.ProduceResponse) *brokerpb.ProduceResponse {
	rs := make([]*brokerpb.SendReceipt, len(q))
	for i, r := range q {
		rs[i] = r.GetReceipt()
	}
	return &brokerpb.ProduceResponse{Response: &brokerpb.ProduceResponse_Receipts{Receipts: &brokerpb.Receipts{Receipts: rs}}}
}

// fail marks the producer failed and answers ticket (the send seq's) with
// the send error.
func (p *producer) fail(ticket, seq uint64, err error) {
	reason, _, _ := reasonOf(err)
	p.mu.Lock()
	p.mu.failed = true
	p.mu.Unlock()
	p.answer(ticket, &brokerpb.ProduceResponse{Response: &brokerpb.ProduceResponse_Error{Error: &brokerpb.SendError{SequenceId: seq, Reason: reason, Message: err.Error()}}})
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

// clientInfo is what a producer's or consumer's client told about itself:
// Pulsar's clients send their version at CONNECT and metadata (string
// pairs an application sets) with PRODUCER and SUBSCRIBE; topic stats
// show them, as Pulsar's do.
type clientInfo struct {
	metadata map[string]string
	version  string
	address  string
}

// Caps of what a client may have kept about itself.
const (
	maxClientMetadataEntries = 256
	maxClientMetadataBytes   = 64 << 10
	maxClientVersionLength   = 256
)

// newClientInfo checks and copies a client's metadata (its keys and
// values summed) and version.
func newClientInfo(kvs []*pulsarpb.KeyValue, version, address string) (clientInfo, error) {
	if len(kvs) > maxClientMetadataEntries {
		return clientInfo{}, errorf(ErrInvalidArgument, "%d metadata entries, at most %d", len(kvs), maxClientMetadataEntries)
	}
	info := clientInfo{version: version, address: address}
	if len(info.version) > maxClientVersionLength {
		// Shown, not used: cut (at a character's start), not refused.
		cut := maxClientVersionLength
		for cut > 0 && !utf8.RuneStart(info.version[cut]) {
			cut--
		}
		info.version = info.version[:cut]
	}
	size := 0
	for _, kv := range kvs {
		size += len(kv.GetKey()) + len(kv.GetValue())
		if size > maxClientMetadataBytes {
			return clientInfo{}, errorf(ErrInvalidArgument, "metadata of more than %d bytes", maxClientMetadataBytes)
		}
		if info.metadata == nil {
			info.metadata = make(map[string]string, len(kvs))
		}
		info.metadata[kv.GetKey()] = kv.GetValue()
	}
	return info, nil
}

// metadataJSON is the metadata as stats show it: {} when there is none.
func (ci clientInfo) metadataJSON() map[string]string {
	if ci.metadata == nil {
		return map[string]string{}
	}
	return ci.metadata
}
