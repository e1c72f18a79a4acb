package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/magnetar-io/magnetar/internal/testutil"
	"github.com/magnetar-io/magnetar/proto/brokerpb"
)

func TestMain(m *testing.M) {
	poisonReleased = true // a batch buffer used after its release sends garbage
	goleak.VerifyTestMain(m, testutil.GoleakIgnores()...)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func newTestClient(t *testing.T, opts ClientOptions) *client {
	t.Helper()
	c, err := NewClient(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.(*client)
}

// Every call that may go to any broker tries the next one when the first
// of the URL is dead (connection refused) or paused (connected, silent):
// partitioned metadata, lookups, and the first connection of producers,
// consumers and readers.
func TestFirstBrokerOfTheURLUnreachable(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first func(testing.TB) string
	}{
		{"dead", deadAddr},
		{"paused", stalledAddr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFakeBroker(t, fakeOptions{})
			c := newTestClient(t, ClientOptions{URL: "magnetar://" + tc.first(t) + "," + f.addr})
			if names, err := c.TopicPartitions("t"); err != nil || len(names) != 1 {
				t.Fatalf("partitions: %v, %v", names, err)
			}
			p, err := c.CreateProducer(ProducerOptions{Topic: "t"})
			if err != nil {
				t.Fatalf("create producer: %v", err)
			}
			if _, err := p.Send(ctxT(t), &ProducerMessage{Payload: []byte("x")}); err != nil {
				t.Fatalf("send: %v", err)
			}
			cons, err := c.Subscribe(ConsumerOptions{Topic: "t", SubscriptionName: "s"})
			if err != nil {
				t.Fatalf("subscribe: %v", err)
			}
			cons.Close()
			r, err := c.CreateReader(ReaderOptions{Topic: "t", StartMessageID: EarliestMessageID()})
			if err != nil {
				t.Fatalf("reader: %v", err)
			}
			if !r.HasNext() {
				t.Fatal("HasNext: false with a message stored")
			}
			r.Close()
			p.Close()
		})
	}
}

// The only broker of the URL is not listening yet when the producer is
// created: the client keeps trying, with backoff, until it is.
func TestBrokerNotListeningYet(t *testing.T) {
	addr := deadAddr(t)
	c := newTestClient(t, ClientOptions{URL: "magnetar://" + addr})
	failed := make(chan struct{})
	var once sync.Once
	c.onBrokerFailed = func(string, error) { once.Do(func() { close(failed) }) }
	type result struct {
		p   Producer
		err error
	}
	res := make(chan result, 1)
	go func() {
		p, err := c.CreateProducer(ProducerOptions{Topic: "t"})
		res <- result{p, err}
	}()
	select {
	case <-failed:
	case r := <-res:
		t.Fatalf("create producer gave up before the broker listened: %v", r.err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on the broker's address: %v", err)
	}
	startFakeBroker(t, fakeOptions{ln: ln})
	r := <-res
	if r.err != nil {
		t.Fatalf("create producer: %v", r.err)
	}
	defer r.p.Close()
	if _, err := r.p.Send(ctxT(t), &ProducerMessage{Payload: []byte("x")}); err != nil {
		t.Fatalf("send: %v", err)
	}
}

// A lookup may name an owner that just died (its ownership lasts until its
// lease expires): the first connection looks the partition up again until
// a live broker owns it.
func TestFirstConnectionRetriesADeadOwner(t *testing.T) {
	f := startFakeBroker(t, fakeOptions{})
	dead := deadAddr(t)
	f.tell(dead, dead, dead)
	c := newTestClient(t, ClientOptions{URL: "magnetar://" + f.addr})
	p, err := c.CreateProducer(ProducerOptions{Topic: "t"})
	if err != nil {
		t.Fatalf("create producer: %v", err)
	}
	defer p.Close()
	if n := f.lookups(); n < 4 {
		t.Fatalf("%d lookups: want the dead owner's 3, then the live one", n)
	}
	cons, err := func() (Consumer, error) {
		f.tell(dead, dead)
		return c.Subscribe(ConsumerOptions{Topic: "t", SubscriptionName: "s"})
	}()
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	cons.Close()
}

// With no broker reachable, the client retries until the operation
// timeout, then fails with ErrUnavailable naming a broker.
func TestGivesUpAtTheOperationTimeout(t *testing.T) {
	a, b := deadAddr(t), deadAddr(t)
	c := newTestClient(t, ClientOptions{URL: "magnetar://" + a + "," + b, OperationTimeout: time.Second})
	var attempts atomic.Int32
	c.onBrokerFailed = func(string, error) { attempts.Add(1) }
	_, err := c.CreateProducer(ProducerOptions{Topic: "t"})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("create producer with no broker: %v, want ErrUnavailable", err)
	}
	if !strings.Contains(err.Error(), a) && !strings.Contains(err.Error(), b) {
		t.Fatalf("error %q names no broker", err)
	}
	if n := attempts.Load(); n <= 2 {
		t.Fatalf("%d attempts: want every broker tried more than once", n)
	}
}

// A message over the broker's limit fails alone, at once, with
// ErrMessageTooLarge, even when the client's own limit is raised above
// the broker's: the broker tells its limit when the producer connects.
func TestMessageTooLargeFailsAloneAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		limit   int
		noBatch bool
	}{
		{"client limit raised, batching", 16 << 20, false},
		{"client limit raised, no batching", 16 << 20, true},
		{"default client limit", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFakeBroker(t, fakeOptions{maxMessage: 64 << 10})
			c := newTestClient(t, ClientOptions{URL: "magnetar://" + f.addr, MaxMessageSize: tc.limit})
			// The send timeout is long: a message that waited for it would
			// hold the test up until the guard below.
			p, err := c.CreateProducer(ProducerOptions{Topic: "t", SendTimeout: time.Hour, DisableBatching: tc.noBatch})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			errs := make([]chan error, 3)
			for i, size := range []int{1 << 10, 2 << 20, 1 << 10} { // 2 MiB: over the transport limit too
				errs[i] = make(chan error, 1)
				p.SendAsync(ctxT(t), &ProducerMessage{Payload: bytes.Repeat([]byte{'x'}, size)}, func(_ MessageID, _ *ProducerMessage, err error) { errs[i] <- err })
			}
			for i, want := range []error{nil, ErrMessageTooLarge, nil} {
				select {
				case err := <-errs[i]:
					if !errors.Is(err, want) && !(want == nil && err == nil) {
						t.Fatalf("message %d: %v, want %v", i, err, want)
					}
				case <-time.After(30 * time.Second):
					t.Fatalf("message %d: no outcome", i)
				}
			}
			if n := len(f.stored()); n < 1 {
				t.Fatalf("%d entries stored", n)
			}
		})
	}
}

// A broker that does not tell its limit (an older one) cannot even read a
// send over its transport limit; it ends the stream with
// MESSAGE_TOO_LARGE. The SDK fails that message, and the others go on.
func TestSendOverTheTransportLimit(t *testing.T) {
	f := startFakeBroker(t, fakeOptions{maxMessage: 64 << 20, recvLimit: 256 << 10, silent: true})
	c := newTestClient(t, ClientOptions{URL: "magnetar://" + f.addr})
	p, err := c.CreateProducer(ProducerOptions{Topic: "t", SendTimeout: time.Hour, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Send(ctxT(t), &ProducerMessage{Payload: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(ctxT(t), &ProducerMessage{Payload: bytes.Repeat([]byte{'x'}, 1<<20)}); !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("1 MiB send over a 256 KiB transport: %v, want ErrMessageTooLarge", err)
	}
	if _, err := p.Send(ctxT(t), &ProducerMessage{Payload: []byte("after")}); err != nil {
		t.Fatalf("send after the refused one: %v", err)
	}
}

// Batches are cut at the broker's limit when it is below BatchingMaxSize.
func TestBatchesStayUnderTheBrokerLimit(t *testing.T) {
	const limit = 16 << 10
	f := startFakeBroker(t, fakeOptions{maxMessage: limit})
	c := newTestClient(t, ClientOptions{URL: "magnetar://" + f.addr})
	p, err := c.CreateProducer(ProducerOptions{Topic: "t", BatchingMaxPublishDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var failed atomic.Int32
	for i := 0; i < 64; i++ {
		p.SendAsync(ctxT(t), &ProducerMessage{Payload: bytes.Repeat([]byte{'x'}, 1<<10)}, func(_ MessageID, _ *ProducerMessage, err error) {
			if err != nil {
				failed.Add(1)
			}
		})
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of 64 messages failed", n)
	}
	for _, b := range f.stored() {
		if len(b) > limit {
			t.Fatalf("a batch of %d bytes, over the broker's %d", len(b), limit)
		}
	}
}

// The broker's limit is on the whole entry (metadata included): a message
// the SDK lets through always fits, and one of exactly the limit fails in
// the SDK, without a round trip.
func TestMessageAtTheLimitFailsInTheSDK(t *testing.T) {
	const limit = 64 << 10
	f := startFakeBroker(t, fakeOptions{maxMessage: limit})
	c := newTestClient(t, ClientOptions{URL: "magnetar://" + f.addr})
	for _, noBatch := range []bool{true, false} {
		p, err := c.CreateProducer(ProducerOptions{Topic: "t", DisableBatching: noBatch, Properties: map[string]string{"k": "v"}})
		if err != nil {
			t.Fatal(err)
		}
		sent := f.sends()
		if _, err := p.Send(ctxT(t), &ProducerMessage{Payload: make([]byte, limit)}); !errors.Is(err, ErrMessageTooLarge) {
			t.Fatalf("a message of the broker's limit (batching %v): %v, want ErrMessageTooLarge", !noBatch, err)
		}
		if n := f.sends() - sent; n != 0 {
			t.Fatalf("the SDK sent %d sends for it", n)
		}
		big := &ProducerMessage{Payload: make([]byte, limit-entryOverhead-100), Key: "key", Properties: map[string]string{"p": "q"}}
		if _, err := p.Send(ctxT(t), big); err != nil {
			t.Fatalf("the largest message the SDK takes (batching %v): %v", !noBatch, err)
		}
		p.Close()
	}
}

// The first attempt to open a producer times out after the broker took
// it; the next finds the name busy (the broker still holds the first):
// the SDK tries again rather than failing the creation.
func TestBusyAfterATimedOutFirstAttempt(t *testing.T) {
	f := startFakeBroker(t, fakeOptions{stallFirst: true})
	c := newTestClient(t, ClientOptions{URL: "magnetar://" + f.addr})
	p, err := c.CreateProducer(ProducerOptions{Topic: "t", Name: "fixed"})
	if err != nil {
		t.Fatalf("create producer: %v", err)
	}
	p.Close()
	// A name busy from the start is an answer: no retry.
	f.mu.Lock()
	f.mu.busy = true
	f.mu.Unlock()
	if _, err := c.CreateProducer(ProducerOptions{Topic: "t", Name: "fixed"}); !errors.Is(err, ErrProducerBusy) {
		t.Fatalf("busy name: %v, want ErrProducerBusy at once", err)
	}
}

// A send the broker refuses because too few bookies are writable is
// resent (the refusal is retriable), with backoff, and succeeds once the
// broker takes it, stored once.
func TestSendRetriedWhileNotEnoughBookies(t *testing.T) {
	f := startFakeBroker(t, fakeOptions{})
	f.refuseSends(brokerpb.ErrorReason_NOT_ENOUGH_BOOKIES)
	c := newTestClient(t, ClientOptions{URL: "magnetar://" + f.addr})
	p, err := c.CreateProducer(ProducerOptions{Topic: "t", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	done := make(chan error, 1)
	p.SendAsync(ctxT(t), &ProducerMessage{Payload: []byte("x")}, func(_ MessageID, _ *ProducerMessage, err error) { done <- err })
	testutil.Eventually(t, 20*time.Second, "the refused send to be resent", func() bool { return f.sends() >= 3 })
	select {
	case err := <-done:
		t.Fatalf("send completed while refused: %v", err)
	default:
	}
	f.refuseSends(brokerpb.ErrorReason_UNKNOWN)
	if err := <-done; err != nil {
		t.Fatalf("send once the broker takes it: %v", err)
	}
	if got := f.stored(); len(got) != 1 || string(got[0]) != "x" {
		t.Fatalf("stored %q", got)
	}
}

// Refused until its SendTimeout ends, a send fails with ErrSendTimeout
// naming the cause: ErrNotEnoughBookies (also an ErrUnavailable), with
// the broker's reason and message.
func TestSendTimeoutNamesNotEnoughBookies(t *testing.T) {
	f := startFakeBroker(t, fakeOptions{})
	f.refuseSends(brokerpb.ErrorReason_NOT_ENOUGH_BOOKIES)
	c := newTestClient(t, ClientOptions{URL: "magnetar://" + f.addr})
	p, err := c.CreateProducer(ProducerOptions{Topic: "t", SendTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, err = p.Send(ctxT(t), &ProducerMessage{Payload: []byte("x")})
	var be *Error
	if !errors.Is(err, ErrSendTimeout) || !errors.Is(err, ErrNotEnoughBookies) || !errors.Is(err, ErrUnavailable) ||
		!errors.As(err, &be) || be.Reason != brokerpb.ErrorReason_NOT_ENOUGH_BOOKIES || !strings.Contains(err.Error(), "NOT_ENOUGH_BOOKIES") {
		t.Fatalf("send refused until its timeout: %v", err)
	}
	if n := f.sends(); n < 2 {
		t.Fatalf("the send was tried %d times within its timeout", n)
	}
}

// A reason this client does not know (a newer broker's) is retriable:
// resent until the send timeout rather than failed at once.
func TestUnknownReasonIsRetriable(t *testing.T) {
	if err := reasonError(brokerpb.ErrorReason(1000), "new"); !retriable(err) {
		t.Fatalf("unknown reason: %v not retriable", err)
	}
	if err := reasonError(brokerpb.ErrorReason_INVALID_MESSAGE, "bad"); retriable(err) {
		t.Fatalf("INVALID_MESSAGE retriable")
	}
}

// The broker goes away with sends in flight, unanswered: after the
// producer reconnects it sends every one of them again, the oldest first,
// and each is acknowledged once, in order.
func TestProducerResendsInFlightAfterReconnect(t *testing.T) {
	f := startFakeBroker(t, fakeOptions{})
	f.cutAfterSends(3)
	c := newTestClient(t, ClientOptions{URL: "magnetar://" + f.addr})
	// A short send timeout: a send that is never resent fails soon.
	p, err := c.CreateProducer(ProducerOptions{Topic: "t", DisableBatching: true, SendTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	type result struct {
		payload string
		err     error
	}
	results := make(chan result, 3)
	for _, v := range []string{"a", "b", "c"} {
		p.SendAsync(ctxT(t), &ProducerMessage{Payload: []byte(v)}, func(_ MessageID, m *ProducerMessage, err error) {
			results <- result{string(m.Payload), err}
		})
	}
	// The last one stored: the resends are done.
	testutil.Eventually(t, 20*time.Second, "the resends", func() bool {
		got := f.stored()
		return len(got) > 0 && string(got[len(got)-1]) == "c"
	})
	if got := f.stored(); len(got) != 3 || string(got[0]) != "a" || string(got[1]) != "b" {
		t.Fatalf("stored after the reconnection: %q; want [a b c]", got)
	}
	for _, want := range []string{"a", "b", "c"} {
		if r := <-results; r.payload != want || r.err != nil {
			t.Fatalf("acknowledged %q (%v); want %q", r.payload, r.err, want)
		}
	}
	if n := f.sends(); n != 6 {
		t.Fatalf("%d sends reached the broker; want 3 and their 3 resends", n)
	}
}

// Close returns only after the broker has ended the producer's stream,
// which it does once it has let go of the producer: a topic deleted or a
// producer name reused right after Close must not find it still there.
func TestProducerCloseWaitsForTheBroker(t *testing.T) {
	f, p := startProducerToClose(t, ClientOptions{})
	if _, err := p.Send(ctxT(t), &ProducerMessage{Payload: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	seen, release := f.holdProducerEnd()
	closed := closeInBackground(p)
	<-seen
	select {
	case <-closed:
		t.Fatal("Close returned before the broker ended the producer's stream")
	default:
	}
	close(release)
	<-closed
}

// A broker that never ends a closed producer's stream (stalled) holds
// Close for the operation timeout, and no longer.
func TestProducerCloseBoundedWhenTheBrokerStalls(t *testing.T) {
	const opTimeout = time.Second
	f, p := startProducerToClose(t, ClientOptions{OperationTimeout: opTimeout})
	seen, release := f.holdProducerEnd()
	defer close(release)
	start := time.Now()
	closed := closeInBackground(p)
	<-seen
	select {
	case <-closed:
		if took := time.Since(start); took < opTimeout {
			t.Fatalf("Close returned after %v, before the broker ended the stream or the %v operation timeout", took, opTimeout)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("Close still waiting for a stalled broker after 20 s; want the %v operation timeout", opTimeout)
	}
}

// A client's Close closes its producers at once, not one after another:
// each may wait for its broker.
func TestClientClosesProducersAtOnce(t *testing.T) {
	f := startFakeBroker(t, fakeOptions{})
	c := newTestClient(t, ClientOptions{URL: "magnetar://" + f.addr})
	for _, topic := range []string{"a", "b"} {
		if _, err := c.CreateProducer(ProducerOptions{Topic: topic}); err != nil {
			t.Fatal(err)
		}
	}
	seen, release := f.holdProducerEnd()
	closed := make(chan struct{})
	go func() {
		c.Close()
		close(closed)
	}()
	<-seen
	select {
	case <-seen: // both half-closed while the first is still held
	case <-time.After(5 * time.Second):
		t.Fatal("the second producer was not closed while the first one waited for its broker")
	}
	close(release)
	<-closed
}

// startProducerToClose starts a fake broker and a producer on it.
func startProducerToClose(t *testing.T, opts ClientOptions) (*fakeBroker, Producer) {
	t.Helper()
	f := startFakeBroker(t, fakeOptions{})
	opts.URL = "magnetar://" + f.addr
	c := newTestClient(t, opts)
	p, err := c.CreateProducer(ProducerOptions{Topic: "t"})
	if err != nil {
		t.Fatal(err)
	}
	return f, p
}

// closeInBackground closes p; the channel is closed when Close returns.
func closeInBackground(p Producer) <-chan struct{} {
	closed := make(chan struct{})
	go func() {
		p.Close()
		close(closed)
	}()
	return closed
}

// unbatchedProducer starts a fake broker and a producer on it without
// batching, closed at the end of the test; pp is its partition's.
func unbatchedProducer(t *testing.T, o fakeOptions) (*fakeBroker, Producer, *partitionProducer) {
	t.Helper()
	f := startFakeBroker(t, o)
	c := newTestClient(t, ClientOptions{URL: "magnetar://" + f.addr})
	p, err := c.CreateProducer(ProducerOptions{Topic: "t", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return f, p, p.(*producer).parts[0]
}

// Sends queued while the sender writes go out together in one request to
// a broker that takes them (ProducerOpened.sends_together), and their
// receipts come back in one Receipts; to a broker that does not say so (an
// older one), every request holds one send. Either way every message is
// stored once, in order, and acknowledged.
func TestSendsTogetherOnlyToABrokerThatTakesThem(t *testing.T) {
	for _, together := range []bool{false, true} {
		t.Run(fmt.Sprintf("together=%v", together), func(t *testing.T) {
			f, p, pp := unbatchedProducer(t, fakeOptions{together: together})
			// Hold the sender at its write: what is sent meanwhile
			// queues, and goes out at once when released.
			pp.sendMu.Lock()
			const n = 50
			acked := make(chan string, n)
			for i := range n {
				p.SendAsync(ctxT(t), &ProducerMessage{Payload: []byte(fmt.Sprint(i))}, func(_ MessageID, m *ProducerMessage, err error) {
					if err != nil {
						t.Errorf("message %s: %v", m.Payload, err)
					}
					acked <- string(m.Payload)
				})
			}
			pp.sendMu.Unlock()
			for i := range n {
				select {
				case got := <-acked:
					if got != fmt.Sprint(i) {
						t.Fatalf("acknowledgement %d is of message %s", i, got)
					}
				case <-time.After(20 * time.Second):
					t.Fatalf("%d of %d messages acknowledged", i, n)
				}
			}
			stored := f.stored()
			if len(stored) != n {
				t.Fatalf("%d messages stored, want %d", len(stored), n)
			}
			for i, b := range stored {
				if string(b) != fmt.Sprint(i) {
					t.Fatalf("stored %d is %q", i, b)
				}
			}
			reqs, receiptsTogether := f.requests()
			if !receiptsTogether {
				t.Fatal("the producer did not ask for its receipts together")
			}
			// What the sender took before it reached the held write, and
			// all the rest: two requests at most.
			most := slices.Max(reqs)
			if together && len(reqs) > 2 {
				t.Fatalf("sends per request %v: want what queued behind the held write in one", reqs)
			}
			if !together && most != 1 {
				t.Fatalf("sends per request %v to a broker that takes one at a time", reqs)
			}
		})
	}
}

// Sends together stay under what the broker's transport takes (its
// maximum message size plus 1 MiB) when the messages' metadata, not their
// payloads, make them large: what is counted is each send's encoding.
func TestSendsTogetherCountTheirMetadata(t *testing.T) {
	f, p, pp := unbatchedProducer(t, fakeOptions{together: true}) // takes requests of up to 2 MiB
	pp.sendMu.Lock()
	const n = 60 // 60 x 40 KiB of properties: 2.4 MB in one request
	big := map[string]string{"k": strings.Repeat("v", 40<<10)}
	errs := make(chan error, n)
	for i := range n {
		p.SendAsync(ctxT(t), &ProducerMessage{Payload: []byte{byte(i)}, Properties: big}, func(_ MessageID, _ *ProducerMessage, err error) {
			errs <- err
		})
	}
	pp.sendMu.Unlock()
	for i := range n {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%d of %d messages acknowledged", i, n)
		}
	}
	if got := len(f.stored()); got != n {
		t.Fatalf("%d stored, want %d", got, n)
	}
	reqs, _ := f.requests()
	if len(reqs) < 3 {
		t.Fatalf("sends per request %v: 2.4 MB of sends in fewer than 3 requests of at most 1 MiB", reqs)
	}
}
