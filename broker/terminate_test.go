package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/internal/testutil"
)

type messageIDJSON struct {
	LedgerID       int64 `json:"ledgerId"`
	EntryID        int64 `json:"entryId"`
	PartitionIndex int64 `json:"partitionIndex"`
}

func terminate(t *testing.T, e *env, topic string) messageIDJSON {
	t.Helper()
	code, body, err := adminDo(e, http.MethodPost, "/admin/v2/persistent/public/default/"+topic+"/terminate", nil)
	if err != nil || code != http.StatusOK {
		t.Fatalf("terminate %s: %d %s %v", topic, code, body, err)
	}
	var id messageIDJSON
	if err := json.Unmarshal(body, &id); err != nil {
		t.Fatalf("terminate %s answered %s: %v", topic, body, err)
	}
	return id
}

// A terminated topic takes no more messages nor producers, through the
// SDK: the connected producer's sends fail with ErrTopicTerminated (not
// resent, not timed out), a new producer is refused with it; consumers
// read on, and are told they reached the end once they acknowledged
// everything. All of it holds after a broker restart (the termination is
// stored), and terminating again answers the same id.
func TestTerminateTopic(t *testing.T) {
	e := newEnv(t, nil)
	cl := e.client()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "term", SendTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cons, err := cl.Subscribe(client.ConsumerOptions{Topic: "term", SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	ids := produce(t, p, 0, 10)

	id := terminate(t, e, "term")
	last := ids[len(ids)-1]
	if id.LedgerID != last.LedgerID() || id.EntryID != last.EntryID() || id.PartitionIndex != -1 {
		t.Fatalf("terminate answered %+v, the last message is %v", id, last)
	}
	ctx, cancel := context.WithTimeout(ctxT(t), 30*time.Second)
	defer cancel()
	if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte("after")}); !errors.Is(err, client.ErrTopicTerminated) {
		t.Fatalf("send after terminate: %v, want ErrTopicTerminated", err)
	}
	if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte("after")}); !errors.Is(err, client.ErrTopicTerminated) {
		t.Fatalf("second send after terminate: %v, want ErrTopicTerminated", err)
	}
	if _, err := cl.CreateProducer(client.ProducerOptions{Topic: "term"}); !errors.Is(err, client.ErrTopicTerminated) {
		t.Fatalf("new producer on a terminated topic: %v, want ErrTopicTerminated", err)
	}

	msgs := receiveN(t, cons, 10)
	if cons.HasReachedEndOfTopic() {
		t.Fatal("reached the end before acknowledging")
	}
	for _, m := range msgs[:9] {
		cons.Ack(m)
	}
	// Acknowledgements are grouped; the end is told after the last.
	if err := cons.Ack(msgs[9]); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the end of the topic is told", cons.HasReachedEndOfTopic)

	stats, err := adminGetJSON[map[string]any](e, "/admin/v2/persistent/public/default/term/internalStats")
	if err != nil || stats["state"] != "Terminated" {
		t.Fatalf("internal stats: state %v, %v", stats["state"], err)
	}

	e.restart()
	if _, err := cl.CreateProducer(client.ProducerOptions{Topic: "term"}); !errors.Is(err, client.ErrTopicTerminated) {
		t.Fatalf("new producer after a restart: %v, want ErrTopicTerminated", err)
	}
	if again := terminate(t, e, "term"); again != id {
		t.Fatalf("terminate again answered %+v, want %+v", again, id)
	}
	// A subscription created after the termination reads everything and
	// reaches the end.
	late, err := cl.Subscribe(client.ConsumerOptions{Topic: "term", SubscriptionName: "late", SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	for _, m := range receiveN(t, late, 10) {
		late.Ack(m)
	}
	testutil.Eventually(t, 20*time.Second, "the end of the topic is told to a later subscription", late.HasReachedEndOfTopic)
}

// Terminating a partitioned topic terminates each partition: the answer
// maps each partition's index to its last message.
func TestTerminatePartitionedTopic(t *testing.T) {
	e := newEnv(t, nil)
	if code, body, err := adminDo(e, http.MethodPut, "/admin/v2/persistent/public/default/pterm/partitions", 2); err != nil || code != http.StatusNoContent {
		t.Fatalf("create partitioned topic: %d %s %v", code, body, err)
	}
	cl := e.client()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "pterm"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ids := produce(t, p, 0, 20)
	lastOf := map[int32]client.MessageID{}
	for _, id := range ids {
		lastOf[id.PartitionIdx()] = id
	}
	if code, _, _ := adminDo(e, http.MethodPost, "/admin/v2/persistent/public/default/pterm/terminate", nil); code != http.StatusMethodNotAllowed {
		t.Fatalf("terminate of a partitioned topic by its name: %d, want 405", code)
	}
	code, body, err := adminDo(e, http.MethodPost, "/admin/v2/persistent/public/default/pterm/terminate/partitions", nil)
	if err != nil || code != http.StatusOK {
		t.Fatalf("terminate partitions: %d %s %v", code, body, err)
	}
	var got map[string]messageIDJSON
	if err := json.Unmarshal(body, &got); err != nil || len(got) != 2 {
		t.Fatalf("terminate partitions answered %s: %v", body, err)
	}
	for i, want := range lastOf {
		g := got[string(rune('0'+i))]
		if g.LedgerID != want.LedgerID() || g.EntryID != want.EntryID() || g.PartitionIndex != int64(i) {
			t.Fatalf("partition %d: %+v, its last message is %v", i, g, want)
		}
	}
	ctx, cancel := context.WithTimeout(ctxT(t), 30*time.Second)
	defer cancel()
	if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte("after"), Key: "k1"}); !errors.Is(err, client.ErrTopicTerminated) {
		t.Fatalf("send after terminate: %v, want ErrTopicTerminated", err)
	}
	if code, _, _ := adminDo(e, http.MethodPost, "/admin/v2/persistent/public/default/term-none/terminate/partitions", nil); code != http.StatusNotFound && code != http.StatusMethodNotAllowed {
		t.Fatalf("partitions/terminate of a missing topic: %d", code)
	}
}

// Terminated while a producer sends as fast as it can, with deduplication
// on and another client trying to create producers meanwhile: the
// termination completes, and every send's outcome is exact: the messages
// reported stored are the ones the topic holds, every other one failed
// with ErrTopicTerminated and is not there.
func TestTerminateWithSendsInFlight(t *testing.T) {
	e := newEnv(t, func(c *broker.Config) { c.Deduplication = true })
	cl := e.client()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "busy", Name: "busy-writer", SendTimeout: time.Minute, BatchingMaxMessages: 20})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// Sends go on until one is refused (or a bound is reached).
	var mu sync.Mutex
	stored := map[string]bool{}
	failed, sent := 0, 0
	var done sync.WaitGroup
	firstReceipts := make(chan struct{})
	var once sync.Once
	refused := make(chan struct{})
	var refusedOnce sync.Once
	sender := make(chan struct{})
	go func() {
		defer close(sender)
		for i := 0; i < 200_000; i++ {
			select {
			case <-refused:
				return
			default:
			}
			payload := fmt.Sprintf("m-%06d", i)
			done.Add(1)
			mu.Lock()
			sent++
			mu.Unlock()
			p.SendAsync(ctxT(t), &client.ProducerMessage{Payload: []byte(payload)}, func(_ client.MessageID, _ *client.ProducerMessage, err error) {
				defer done.Done()
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					stored[payload] = true
					if len(stored) == 100 {
						once.Do(func() { close(firstReceipts) })
					}
				case errors.Is(err, client.ErrTopicTerminated):
					failed++
					refusedOnce.Do(func() { close(refused) })
				default:
					t.Errorf("%s: %v, want stored or ErrTopicTerminated", payload, err)
				}
			})
		}
	}()
	<-firstReceipts
	attach := make(chan struct{})
	go func() { // producers created while the topic is being terminated
		defer close(attach)
		for i := 0; i < 20; i++ {
			q, err := cl.CreateProducer(client.ProducerOptions{Topic: "busy"})
			if err != nil {
				if !errors.Is(err, client.ErrTopicTerminated) {
					t.Errorf("a producer created during the termination: %v", err)
				}
				return
			}
			q.Close()
		}
	}()
	terminate(t, e, "busy")
	<-sender
	done.Wait()
	<-attach
	mu.Lock()
	t.Logf("%d sent: %d stored, %d refused", sent, len(stored), failed)
	if len(stored)+failed != sent || failed == 0 {
		mu.Unlock()
		t.Fatalf("%d stored and %d refused of %d sent", len(stored), failed, sent)
	}
	mu.Unlock()
	got := readPayloads(t, cl, "busy")
	if len(got) != len(stored) {
		t.Fatalf("the topic holds %d messages, %d were reported stored", len(got), len(stored))
	}
	for _, m := range got {
		if !stored[m] {
			t.Fatalf("%s is stored, and was reported failed", m)
		}
	}
}

// A seek racing the end's notice: the notice decided before the seek is
// queued before the seek's SeekDone, so the consumer is not left "at the
// end" with the messages the seek gave back to read.
func TestTerminateEndNoticeOrderedWithSeek(t *testing.T) {
	e := newEnv(t, nil)
	cl := e.client()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "term-seek"})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := cl.Subscribe(client.ConsumerOptions{Topic: "term-seek", SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	produce(t, p, 0, 3)
	p.Close()
	for _, m := range receiveN(t, cons, 3) {
		if err := cons.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 20*time.Second, "everything acknowledged", func() bool { return statsBacklog(t, e, "term-seek", "s") == 0 })

	var once sync.Once
	sought := make(chan error, 1)
	broker.SetTestHookEndDecided(func() {
		once.Do(func() {
			go func() { sought <- cons.Seek(client.EarliestMessageID()) }()
			// The seek waits for the subscription's lock, which the
			// notice holds: it cannot be done before the notice is
			// queued. (Without that, it is done here, and the notice
			// queued after its SeekDone.)
			select {
			case err := <-sought:
				sought <- err
			case <-time.After(200 * time.Millisecond):
			}
		})
	})
	defer broker.SetTestHookEndDecided(nil)
	terminate(t, e, "term-seek")
	select {
	case err := <-sought:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the end was never decided, or the seek never answered")
	}
	receiveN(t, cons, 3) // given back by the seek
	if cons.HasReachedEndOfTopic() {
		t.Fatal("at the end of the topic after a seek gave three messages back")
	}
}
