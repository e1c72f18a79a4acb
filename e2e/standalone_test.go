package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/internal/testutil"
)

// freePorts finds n free 127.0.0.1 ports. A restarted standalone must
// come back on the same addresses, so they are chosen up front.
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	seen := map[string]bool{}
	var out []string
	for len(out) < n {
		addr, err := testutil.FreePortOn("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if !seen[addr] {
			seen[addr] = true
			out = append(out, addr)
		}
	}
	return out
}

// standalone runs `magnetar standalone` as a process.
type standalone struct {
	*proc
	brokerAddr, httpAddr string
	starts               int // runs so far (each prints one ready line)
}

func startStandalone(t *testing.T, dir string, ports []string, extra ...string) *standalone {
	t.Helper()
	p := startProc(t, "standalone", append([]string{"standalone", "--data-dir", dir,
		"--metastore-listen", ports[0], "--bookie-listen", ports[1],
		"--broker-listen", ports[2], "--http", ports[3], "--log-level", "warn"}, extra...)...)
	s := &standalone{proc: p, brokerAddr: ports[2], httpAddr: ports[3], starts: 1}
	s.waitReady(t)
	return s
}

// waitReady waits for the standalone's "Press Ctrl-C" line.
func (s *standalone) waitReady(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.ready(ctx); err != nil {
		t.Fatal(err)
	}
}

func (s *standalone) ready(ctx context.Context) error {
	for {
		if f, err := os.Open(s.log); err == nil {
			sc := bufio.NewScanner(f)
			n := 0
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), "Press Ctrl-C") {
					n++
				}
			}
			f.Close()
			if n >= s.starts {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("standalone not ready: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// restart starts the killed standalone again on its data (any goroutine).
func (s *standalone) restart(ctx context.Context) error {
	if err := s.startErr(); err != nil {
		return err
	}
	s.starts++
	return s.ready(ctx)
}

// Produce 100,000 messages over a 4-partition topic while the standalone
// process is killed with SIGKILL and restarted; a consumer reads all along.
// Every message whose send succeeded is delivered, in order per partition,
// and the subscription resumes near where it was (it redelivers only what
// was acknowledged in the last moments before the kill).
func TestKill9StandaloneMidStream(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	ports := freePorts(t, 4)
	s := startStandalone(t, dir, ports)
	req, _ := http.NewRequest(http.MethodPut, "http://"+s.httpAddr+"/admin/v2/persistent/public/default/events/partitions", strings.NewReader("4"))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("create partitioned topic: %v %v", resp, err)
	}
	c, err := client.NewClient(client.ClientOptions{URL: "magnetar://" + s.brokerAddr, OperationTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cons, err := c.Subscribe(client.ConsumerOptions{Topic: "events", SubscriptionName: "checker", SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	p, err := c.CreateProducer(client.ProducerOptions{Topic: "events", SendTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	const total = 100_000
	var (
		mu          sync.Mutex
		acked       = map[int]bool{}
		failed      int
		seen        = map[int]int{} // deliveries per message
		lastInPart  = map[int32]int{}
		orderErr    error
		seenAtKill  int
		killed      = make(chan struct{})
		consumeDone = make(chan struct{})
		wg          sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	go func() { // the consumer
		defer close(consumeDone)
		for {
			m, err := cons.Receive(ctx)
			if err != nil {
				return
			}
			v, err := strconv.Atoi(string(m.Payload()))
			mu.Lock()
			if err != nil {
				orderErr = fmt.Errorf("unexpected payload %q", m.Payload())
			}
			part := m.ID().PartitionIdx()
			if seen[v] == 0 {
				if last, ok := lastInPart[part]; ok && v < last && orderErr == nil {
					orderErr = fmt.Errorf("partition %d: %d delivered after %d", part, v, last)
				}
				lastInPart[part] = v
			}
			seen[v]++
			mu.Unlock()
			cons.Ack(m)
		}
	}()
	go func() { // the fault: kill -9 once a third is stored, then restart
		defer close(killed)
		for {
			mu.Lock()
			n := len(acked)
			mu.Unlock()
			if n >= total/3 {
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		s.kill()
		mu.Lock()
		seenAtKill = len(seen)
		mu.Unlock()
		if err := s.restart(ctx); err != nil {
			t.Error(err)
		}
	}()
	start := time.Now()
	for i := 0; i < total; i++ {
		// About 10,000 messages a second: the kill comes after a few
		// seconds, several cursor persist intervals in.
		if wait := time.Until(start.Add(time.Duration(i) * 100 * time.Microsecond)); wait > 0 {
			time.Sleep(wait)
		}
		wg.Add(1)
		p.SendAsync(ctx, &client.ProducerMessage{Payload: []byte(strconv.Itoa(i)), Key: fmt.Sprint("key-", i%16)},
			func(_ client.MessageID, _ *client.ProducerMessage, err error) {
				defer wg.Done()
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed++
					return
				}
				acked[i] = true
			})
	}
	wg.Wait()
	<-killed
	deadline := time.Now().Add(3 * time.Minute)
	for {
		mu.Lock()
		var missing []int
		for i := range acked {
			if seen[i] == 0 {
				missing = append(missing, i)
			}
		}
		mu.Unlock()
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			resp, err := http.Get("http://" + s.httpAddr + "/admin/v2/persistent/public/default/events/stats")
			var stats []byte
			if err == nil {
				stats, _ = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			sort.Ints(missing)
			s.dump()
			t.Fatalf("%d acknowledged messages never delivered, first %v; stats: %s", len(missing), missing[:min(10, len(missing))], stats)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	<-consumeDone
	mu.Lock()
	defer mu.Unlock()
	if orderErr != nil {
		t.Fatal(orderErr)
	}
	redelivered := 0
	for _, n := range seen {
		redelivered += n - 1
	}
	t.Logf("%d sends acknowledged, %d failed; %d messages consumed before the kill, %d delivered twice after it", len(acked), failed, seenAtKill, redelivered)
	if seenAtKill > 1000 && redelivered >= seenAtKill {
		t.Fatalf("the subscription restarted from the beginning: %d redelivered, %d consumed before the kill", redelivered, seenAtKill)
	}
}
