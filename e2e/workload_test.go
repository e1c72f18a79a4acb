package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/e2e/check"
)

// profile sizes a fault scenario. The short one runs in `make test` (and
// CI); the long one in `make test-e2e-long` (MAGNETAR_E2E_PROFILE=long).
type profile struct {
	name      string
	duration  time.Duration // faults are injected during this long
	interval  time.Duration // one fault per interval
	producers int
	rate      int           // sends per second per producer
	churn     time.Duration // how long a churning consumer stays
}

var (
	shortProfile = profile{name: "short", duration: 20 * time.Second, interval: 10 * time.Second, producers: 4, rate: 25, churn: 7 * time.Second}
	longProfile  = profile{name: "long", duration: 5 * time.Minute, interval: 10 * time.Second, producers: 4, rate: 25, churn: 7 * time.Second}
)

func currentProfile() profile {
	if os.Getenv("MAGNETAR_E2E_PROFILE") == "long" {
		return longProfile
	}
	return shortProfile
}

const (
	workloadTopic      = "public/default/jepsen"
	workloadPartitions = 10
	workloadKeys       = 20
)

// The subscriptions that must each receive every acknowledged value; all
// are created before the first send. "drain" has no consumer until the
// end, when one reads it whole.
var workloadSubs = []struct {
	name      string
	typ       client.SubscriptionType
	kind      string // as the history names it
	consumers int
}{
	{"exclusive", client.Exclusive, "exclusive", 1},
	{"failover", client.Failover, "failover", 2},
	{"shared", client.Shared, "shared", 2},
	{"key_shared", client.KeyShared, "key_shared", 2},
	{"drain", client.Exclusive, "drain", 0},
}

// workload runs Jepsen-style producers and consumers against a cluster and
// records every operation in a history (package check).
type workload struct {
	t    *testing.T
	c    workloadTarget
	prof profile
	cl   client.Client
	hist *check.Writer
	dir  string

	mu struct {
		sync.Mutex
		ok       map[string]bool            // values acknowledged to a producer
		received map[string]map[string]bool // subscription -> values received
		lastOK   map[int32]time.Time        // partition -> last acknowledged send
	}
}

// historyDir is where a scenario's history and report go: under
// $MAGNETAR_E2E_OUT, kept; else under the temporary directory, kept only
// if the scenario fails.
func historyDir(t *testing.T, scenario string) string {
	root := os.Getenv("MAGNETAR_E2E_OUT")
	keep := root != ""
	if !keep {
		root = filepath.Join(os.TempDir(), "magnetar-e2e")
	}
	dir := filepath.Join(root, time.Now().Format("20060102-150405")+"-"+scenario)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !keep && !t.Failed() {
			os.RemoveAll(dir)
		}
	})
	return dir
}

// workloadTarget is what a workload runs against: a cluster of processes
// (realCluster) or of containers (composeCluster).
type workloadTarget interface {
	clientOptions() client.ClientOptions
	createPartitionedTopic(topic string, n int)
}

func newWorkload(t *testing.T, c workloadTarget, scenario string, prof profile) *workload {
	w := &workload{t: t, c: c, prof: prof, dir: historyDir(t, scenario)}
	w.mu.ok = map[string]bool{}
	w.mu.received = map[string]map[string]bool{}
	w.mu.lastOK = map[int32]time.Time{}
	c.createPartitionedTopic(workloadTopic, workloadPartitions)
	cl, err := client.NewClient(c.clientOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	w.cl = cl
	f, err := os.Create(filepath.Join(w.dir, "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var subs []string
	for _, s := range workloadSubs {
		subs = append(subs, s.name)
		w.mu.received[s.name] = map[string]bool{}
	}
	w.hist, err = check.NewWriter(f, check.Meta{Scenario: scenario, Partitions: workloadPartitions, Dedup: true, Subscriptions: subs, Started: time.Now().UnixNano()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.hist.Close(); f.Close() })
	t.Logf("history and report: %s", w.dir)
	return w
}

// run creates the subscriptions, starts the consumers and producers, calls
// nemesis during the profile's duration, stops the producers, waits until
// every subscription has every acknowledged value (or a minute without
// progress), drains "drain", and checks the history.
func (w *workload) run(nemesis func(ctx context.Context)) *check.Report {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var consumers sync.WaitGroup
	for _, s := range workloadSubs {
		n := s.consumers
		if n == 0 {
			n = 1 // creates the subscription; closed at once
		}
		for i := 0; i < n; i++ {
			cons, err := w.cl.Subscribe(client.ConsumerOptions{Topic: workloadTopic, SubscriptionName: s.name, Type: s.typ,
				SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
			if err != nil {
				w.t.Fatalf("subscribe %s: %v", s.name, err)
			}
			if s.consumers == 0 {
				cons.Close()
				continue
			}
			consumers.Add(1)
			if i == 0 {
				go func() {
					defer consumers.Done()
					defer cons.Close()
					w.consume(ctx, cons, s.name, s.kind, fmt.Sprintf("%s-%d", s.name, i))
				}()
				continue
			}
			// The second consumer of a subscription leaves (without
			// acknowledging what it holds) and comes back under a new
			// name every churn interval: failover switches, shared
			// redelivers, key_shared moves keys.
			go func() {
				defer consumers.Done()
				for gen := 0; ; gen++ {
					cctx, ccancel := context.WithTimeout(ctx, w.prof.churn)
					w.consume(cctx, cons, s.name, s.kind, fmt.Sprintf("%s-%d.%d", s.name, i, gen))
					ccancel()
					cons.Close()
					if ctx.Err() != nil {
						return
					}
					for {
						cons, err = w.cl.Subscribe(client.ConsumerOptions{Topic: workloadTopic, SubscriptionName: s.name, Type: s.typ})
						if err == nil {
							break
						}
						select {
						case <-ctx.Done():
							return
						case <-time.After(time.Second):
						}
					}
				}
			}()
		}
	}

	stopProducers := make(chan struct{})
	var producers sync.WaitGroup
	for i := 0; i < w.prof.producers; i++ {
		p, err := w.cl.CreateProducer(client.ProducerOptions{Topic: workloadTopic, Name: fmt.Sprintf("jepsen-%d", i),
			DisableBatching: true, SendTimeout: 10 * time.Second})
		if err != nil {
			w.t.Fatal(err)
		}
		producers.Add(1)
		go func() {
			defer producers.Done()
			defer p.Close()
			w.produce(p, i, stopProducers)
		}()
	}

	nctx, ncancel := context.WithTimeout(ctx, w.prof.duration)
	nemesis(nctx)
	ncancel()
	// The producers go on until every partition has taken a write since
	// the last fault healed (at most a minute: the liveness check then
	// reports the partition), then stop.
	healed := time.Now()
	deadline := healed.Add(time.Minute)
	for time.Now().Before(deadline) {
		w.mu.Lock()
		n := 0
		for _, at := range w.mu.lastOK {
			if at.After(healed) {
				n++
			}
		}
		w.mu.Unlock()
		if n == workloadPartitions {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second)
	close(stopProducers)
	producers.Wait()

	w.waitDelivered(func(sub string) bool { return sub != "drain" })
	cons, err := w.cl.Subscribe(client.ConsumerOptions{Topic: workloadTopic, SubscriptionName: "drain", Type: client.Exclusive})
	if err != nil {
		w.t.Fatalf("drain: %v", err)
	}
	dctx, dcancel := context.WithCancel(ctx)
	consumers.Add(1)
	go func() {
		defer consumers.Done()
		defer cons.Close()
		w.consume(dctx, cons, "drain", "drain", "drain-0")
	}()
	w.waitDelivered(func(sub string) bool { return sub == "drain" })
	dcancel()
	cancel()
	consumers.Wait()
	return w.check()
}

// produce sends unique values with keys at the profile's rate until stop,
// without waiting for each outcome: a partition whose owner is down does
// not hold back the sends to the others. A send that fails with a timeout
// or a lost connection may still have been written: it is "unknown"; only
// errors raised before anything was sent are "failed". produce returns
// when every send has its outcome.
func (w *workload) produce(p client.Producer, id int, stop <-chan struct{}) {
	name := fmt.Sprintf("jepsen-%d", id)
	tick := time.NewTicker(time.Second / time.Duration(w.prof.rate))
	defer tick.Stop()
	rng := rand.New(rand.NewPCG(uint64(id), uint64(time.Now().UnixNano())))
	var pending sync.WaitGroup
	defer pending.Wait()
	for seq := int64(1); ; seq++ {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		key := fmt.Sprintf("k%02d", rng.IntN(workloadKeys))
		value := fmt.Sprintf("%s-%d", name, seq)
		start := time.Now()
		pending.Add(1)
		p.SendAsync(context.Background(), &client.ProducerMessage{Key: key, Payload: []byte(value)}, func(id client.MessageID, _ *client.ProducerMessage, err error) {
			defer pending.Done()
			ev := check.Event{Producer: name, Seq: seq, Key: key, Value: value, Start: start.UnixNano(), End: time.Now().UnixNano()}
			switch {
			case err == nil:
				ev.Result = "ok"
				if id.LedgerID() >= 0 { // -1:-1: a duplicate whose first position the broker no longer knows
					ev.ID = msgID(id)
				}
				w.mu.Lock()
				w.mu.ok[value] = true
				w.mu.lastOK[id.PartitionIdx()] = time.Now()
				w.mu.Unlock()
			case errors.Is(err, client.ErrMessageTooLarge), errors.Is(err, client.ErrInvalidOptions):
				ev.Result, ev.Error = "failed", err.Error()
			default:
				ev.Result, ev.Error = "unknown", err.Error()
			}
			if err := w.hist.Send(ev); err != nil {
				w.t.Error(err)
			}
		})
	}
}

func msgID(id client.MessageID) *check.MsgID {
	return &check.MsgID{Partition: id.PartitionIdx(), Ledger: id.LedgerID(), Entry: id.EntryID(), Batch: id.BatchIdx()}
}

// consume records and acknowledges every message until ctx ends.
func (w *workload) consume(ctx context.Context, cons client.Consumer, sub, kind, name string) {
	for {
		m, err := cons.Receive(ctx)
		if err != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		value := string(m.Payload())
		if err := w.hist.Recv(check.Event{Sub: sub, SubType: kind, Consumer: name, Time: time.Now().UnixNano(),
			Redelivery: m.RedeliveryCount(), Key: m.Key(), Value: value, ID: msgID(m.ID())}); err != nil {
			w.t.Error(err)
			return
		}
		w.mu.Lock()
		w.mu.received[sub][value] = true
		w.mu.Unlock()
		cons.Ack(m)
	}
}

// waitDelivered waits until the chosen subscriptions have received every
// acknowledged value, or nothing new arrived for a minute (the checker then
// reports what is lost).
func (w *workload) waitDelivered(which func(sub string) bool) {
	const quiet = time.Minute
	progress, lastCount := time.Now(), -1
	for {
		w.mu.Lock()
		missing, count := 0, 0
		for sub, got := range w.mu.received {
			if !which(sub) {
				continue
			}
			count += len(got)
			for v := range w.mu.ok {
				if !got[v] {
					missing++
				}
			}
		}
		w.mu.Unlock()
		if missing == 0 {
			return
		}
		if count != lastCount {
			progress, lastCount = time.Now(), count
		}
		if time.Since(progress) > quiet {
			w.t.Logf("%d acknowledged values still missing after %v without progress", missing, quiet)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// check closes the history, reads it back, runs the checker and writes its
// report next to the history.
func (w *workload) check() *check.Report {
	w.t.Helper()
	if err := w.hist.Close(); err != nil {
		w.t.Fatal(err)
	}
	h, err := check.ReadFile(filepath.Join(w.dir, "history.jsonl"))
	if err != nil {
		w.t.Fatal(err)
	}
	r := check.Check(h)
	if err := check.WriteReport(w.dir, r); err != nil {
		w.t.Fatal(err)
	}
	return r
}

// fault records one injected fault in the history.
func (w *workload) fault(name, target string, start, end time.Time) {
	if err := w.hist.Fault(check.Event{Name: name, Target: target, Start: start.UnixNano(), End: end.UnixNano()}); err != nil {
		w.t.Error(err)
	}
}
