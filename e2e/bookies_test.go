package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/bookie/autorecovery"
	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/e2e/check"
	"github.com/magnetar-io/magnetar/internal/testutil"
	"github.com/magnetar-io/magnetar/metastore"
)

// The bookie lifecycle under load: bookies lost for good and healed by
// autorecovery, a decommission, a scale-out, a full disk. Each runs the
// fault suite's workload (workload_test.go) on a cluster of one etcd
// member, two brokers (E3/Qw3/Qa2, deduplication on) and its bookies,
// linked directly (no toxiproxy: these faults are processes and disks,
// not links), and asserts the checker's verdict (nothing lost, duplicated
// or reordered) besides its own.

// bookieCluster is the clusterOptions of these tests: ledgers roll over
// every few seconds (so that there are closed ledgers to repair and new
// ones to place), nothing is trimmed (so that every ledger ever written is
// checked at the end), autorecovery declares a bookie lost 2 s after its
// registration went away.
func bookieCluster(bookies int, brokerArgs ...string) clusterOptions {
	return clusterOptions{
		bookies: bookies, brokers: 2, etcdMembers: 1, direct: true,
		bookieArgs: []string{"--lost-bookie-recovery-delay", "2s"},
		brokerArgs: append([]string{
			"--min-ledger-rollover", "0s", "--max-ledger-rollover", "3s",
			"--retention-time=-1s", "--retention-size=-1",
		}, brokerArgs...),
	}
}

// gap is how long the load runs between two steps of a scenario: 1 s in
// CI, 40 s in the long profile.
func (p profile) gap() time.Duration {
	if p.name == "long" {
		return 40 * time.Second
	}
	return time.Second
}

// healTimeout bounds a re-replication.
func (p profile) healTimeout() time.Duration {
	if p.name == "long" {
		return 10 * time.Minute
	}
	return 2 * time.Minute
}

// adminGet decodes the answer to GET path on the first broker's admin API.
func (c *realCluster) adminGet(path string, out any) error {
	resp, err := c.adminDo("GET", c.brokers[0].http, path, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, body)
	}
	return json.Unmarshal(body, out)
}

// bookieStatuses is `magnetar admin bookies list`, by id.
func (c *realCluster) bookieStatuses() (map[string]autorecovery.BookieStatus, error) {
	var all []autorecovery.BookieStatus
	if err := c.adminGet("/admin/v2/bookies/all", &all); err != nil {
		return nil, err
	}
	out := map[string]autorecovery.BookieStatus{}
	for _, b := range all {
		out[b.ID] = b
	}
	return out, nil
}

// waitBookieState waits until the admin API shows the bookie in state
// and cond (nil: any) holds for it.
func (c *realCluster) waitBookieState(id, state string, timeout time.Duration, cond func(autorecovery.BookieStatus) bool) autorecovery.BookieStatus {
	c.t.Helper()
	var got autorecovery.BookieStatus
	deadline := time.Now().Add(timeout)
	for {
		all, err := c.bookieStatuses()
		if err == nil {
			got = all[id]
			if got.State == state && (cond == nil || cond(got)) {
				return got
			}
		}
		if time.Now().After(deadline) {
			var ur struct {
				Count int                 `json:"count"`
				Marks []autorecovery.Mark `json:"marks"`
			}
			c.adminGet("/admin/v2/bookies/under-replicated", &ur)
			if len(ur.Marks) > 20 {
				ur.Marks = ur.Marks[:20]
			}
			c.t.Fatalf("%s is not %s after %v: bookies %+v (%v); %d under-replicated marks, e.g. %+v", id, state, timeout, all, err, ur.Count, ur.Marks)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// underReplicated is the count of GET /admin/v2/bookies/under-replicated.
func (c *realCluster) underReplicated() (int, error) {
	var ur struct {
		Count int `json:"count"`
	}
	err := c.adminGet("/admin/v2/bookies/under-replicated", &ur)
	return ur.Count, err
}

// admin runs `magnetar admin --admin-url <first broker> args...` and
// returns its output (stdout and stderr) and error.
func (c *realCluster) admin(args ...string) (string, error) {
	cmd := exec.Command(binary, append([]string{"admin", "--admin-url", "http://" + c.brokers[0].http}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// loseForGood kills a bookie with SIGKILL and deletes its data directory:
// it never comes back (under that id it could not: its cookie is gone).
func (c *realCluster) loseForGood(b *bookieNode) {
	c.t.Helper()
	b.p.kill()
	if err := os.RemoveAll(b.dataDir); err != nil {
		c.t.Fatal(err)
	}
}

// mostLoaded returns the bookie, among those not excluded, with the most
// ledgers by the admin API (so one that holds data).
func (c *realCluster) mostLoaded(exclude map[string]bool) *bookieNode {
	c.t.Helper()
	all, err := c.bookieStatuses()
	if err != nil {
		c.t.Fatal(err)
	}
	var best *bookieNode
	for _, b := range c.bookies {
		if exclude[b.id] || all[b.id].State != autorecovery.StateWritable {
			continue
		}
		if best == nil || all[b.id].Ledgers > all[best.id].Ledgers {
			best = b
		}
	}
	if best == nil || all[best.id].Ledgers == 0 {
		c.t.Fatalf("no writable bookie holding a ledger: %+v", all)
	}
	return best
}

// waitClosedLedgers waits until at least n ledgers are closed.
func waitClosedLedgers(t *testing.T, cp *copies, n int) {
	t.Helper()
	testutil.Eventually(t, 2*time.Minute, fmt.Sprintf("%d closed ledgers", n), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ms, err := cp.ledgers(ctx)
		if err != nil {
			return false
		}
		closed := 0
		for _, m := range ms {
			if m.State == ledger.StateClosed {
				closed++
			}
		}
		return closed >= n
	})
}

// assertWorkload fails the test unless the checker passed and every
// partition took writes again after every fault; with noSendErrors, every
// send must have been acknowledged too.
func assertWorkload(t *testing.T, w *workload, r *check.Report, prof profile, noSendErrors bool) {
	t.Helper()
	t.Logf("checker report (%s profile):\n%s", prof.name, r.Text())
	for _, a := range r.Availability {
		if a.MaxSec < 0 {
			t.Errorf("%s of %s at %.1fs: partition %d never took a write again", a.Name, a.Target, a.StartSec, a.MaxPartition)
		}
	}
	for _, reason := range r.Failures() {
		t.Error(reason)
	}
	if r.Totals.Sends["ok"] == 0 {
		t.Error("no send was acknowledged")
	}
	if noSendErrors {
		if n := r.Totals.Sends["unknown"] + r.Totals.Sends["failed"]; n > 0 {
			t.Errorf("%d sends failed or timed out (%v); none may", n, r.Totals.Sends)
		}
	}
	if t.Failed() {
		t.Errorf("history and report kept in %s", w.dir)
	}
}

// Three bookies lost for good, one after the other, under load; then two
// fresh ones join. After each loss autorecovery copies what the lost
// bookie held to the others, until every entry of every settled segment
// (copies.go) is on its write quorum of live bookies again, each copy
// read back intact from its bookie. After the third only two bookies
// remain, fewer than the ensemble: new ledgers cannot be created
// (NOT_ENOUGH_BOOKIES, which the SDK retries), re-replication has nowhere
// to copy to and waits; the fresh bookies heal it all. Nothing
// acknowledged is lost.
func TestBookiesLostForGoodAreHealed(t *testing.T) {
	prof := currentProfile()
	c := newRealCluster(t, bookieCluster(5))
	cp := newCopies(t, c.store)
	w := newWorkload(t, c, "bookies-lost", prof)
	lost := map[string]bool{}
	report := w.run(func(context.Context) {
		waitClosedLedgers(t, cp, 2*workloadPartitions)
		for k := 0; k < 3; k++ {
			time.Sleep(prof.gap())
			b := c.mostLoaded(lost)
			start := time.Now()
			lease := c.bookieLease(b)
			c.loseForGood(b)
			lost[b.id] = true
			if k < 2 {
				st := cp.waitComplete(prof.healTimeout(), lost)
				t.Logf("%s lost for good: metadata healed in %v, every copy read back by %v (%d ledgers, %d settled segments, %d copies)",
					b.id, st.metadataAt.Sub(start).Round(time.Millisecond), time.Since(start).Round(time.Millisecond), st.ledgers, st.segments, st.copies)
				w.fault("lose-bookie", b.id, start, time.Now())
				continue
			}
			// Two bookies left, fewer than the ensemble.
			testutil.Eventually(t, time.Minute, b.id+"'s registration to expire", func() bool { return c.bookieLease(b) != lease && c.bookieLease(b) == 0 })
			probeNotEnoughBookies(t, w.cl)
			st := c.waitBookieState(b.id, autorecovery.StateLost, time.Minute, func(s autorecovery.BookieStatus) bool { return s.UnderReplicated > 0 })
			// Re-replication has nowhere to go: what the lost bookie held
			// is still named and still marked a while later.
			time.Sleep(2 * time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			p, _, err := cp.check(ctx, lost, false)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			if p.count == 0 {
				t.Fatalf("with 2 bookies left for E=3, no settled segment names the lost %s any more", b.id)
			}
			n, err := c.underReplicated()
			if err != nil || n == 0 {
				t.Fatalf("with 2 bookies left, under-replicated count %d (%v): the marks of %s went away", n, err, b.id)
			}
			t.Logf("%s lost for good, 2 bookies left: %d ledgers marked for it, %d under-replicated marks; %s",
				b.id, st.UnderReplicated, n, p)
			for range 2 {
				nb := c.addBookie()
				t.Logf("fresh bookie %s joined", nb.id)
			}
			joined := time.Now()
			cs := cp.waitComplete(prof.healTimeout(), lost)
			t.Logf("%s lost for good, then 2 fresh bookies: metadata healed %v after they joined, every copy read back by %v (%d ledgers, %d settled segments, %d copies)",
				b.id, cs.metadataAt.Sub(joined).Round(time.Millisecond), time.Since(joined).Round(time.Millisecond), cs.ledgers, cs.segments, cs.copies)
			w.fault("lose-bookie", b.id, start, time.Now())
		}
		time.Sleep(prof.gap())
	})
	assertWorkload(t, w, report, prof, false)
	// Everything written since, until the producers stopped, too.
	st := cp.waitComplete(prof.healTimeout(), lost)
	testutil.Eventually(t, time.Minute, "no under-replicated ledger", func() bool {
		n, err := c.underReplicated()
		return err == nil && n == 0
	})
	all, err := c.bookieStatuses()
	if err != nil {
		t.Fatal(err)
	}
	for id := range lost {
		if all[id].State != autorecovery.StateLost || all[id].Ledgers != 0 {
			t.Errorf("lost bookie %s: state %s, %d ledgers; want lost, 0", id, all[id].State, all[id].Ledgers)
		}
	}
	t.Logf("at the end: %d ledgers, %d settled segments, every one of %d copies read back from its bookie", st.ledgers, st.segments, st.copies)
}

// probeNotEnoughBookies: a send to a new topic (which needs a new ledger)
// fails, once its send timeout is over, naming NOT_ENOUGH_BOOKIES.
func probeNotEnoughBookies(t *testing.T, cl client.Client) {
	t.Helper()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "public/default/probe-not-enough-bookies", DisableBatching: true, SendTimeout: 3 * time.Second})
	if err != nil {
		t.Fatalf("a topic without a ledger must still load: %v", err)
	}
	defer p.Close()
	var last error
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, last = p.Send(ctx, &client.ProducerMessage{Payload: []byte("probe")})
		cancel()
		if errors.Is(last, client.ErrNotEnoughBookies) {
			t.Logf("with 2 bookies, a send to a new topic: %v", last)
			return
		}
	}
	t.Fatalf("with 2 bookies, a send to a new topic: %v; want NOT_ENOUGH_BOOKIES", last)
}

// Decommission of a bookie holding data while the producers run: it turns
// read-only, the writers move on (ensemble changes), autorecovery moves
// its copies; once no ledger names it, it is decommissioned. No send
// fails, nothing is lost, and the admin CLI shows it decommissioned with
// no ledgers. The copies check passes with it banned.
func TestBookiesDecommissionUnderLoad(t *testing.T) {
	prof := currentProfile()
	c := newRealCluster(t, bookieCluster(5))
	cp := newCopies(t, c.store)
	w := newWorkload(t, c, "bookie-decommission", prof)
	var victim *bookieNode
	report := w.run(func(context.Context) {
		waitClosedLedgers(t, cp, 2*workloadPartitions)
		time.Sleep(prof.gap())
		victim = c.mostLoaded(nil)
		all, err := c.bookieStatuses()
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if out, err := c.admin("bookies", "decommission", victim.id); err != nil {
			t.Fatalf("admin bookies decommission %s: %v\n%s", victim.id, err, out)
		}
		c.waitBookieState(victim.id, autorecovery.StateDecommissioned, prof.healTimeout(), nil)
		t.Logf("%s (%d ledgers) decommissioned in %v", victim.id, all[victim.id].Ledgers, time.Since(start).Round(time.Millisecond))
		w.fault("decommission", victim.id, start, time.Now())
		time.Sleep(prof.gap())
	})
	assertWorkload(t, w, report, prof, true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	named, err := cp.namedBy(ctx, victim.id)
	if err != nil {
		t.Fatal(err)
	}
	if len(named) > 0 {
		t.Errorf("decommissioned %s is still named by ledgers %v", victim.id, named)
	}
	out, err := c.admin("bookies", "list")
	if err != nil {
		t.Fatalf("admin bookies list: %v\n%s", err, out)
	}
	var list []autorecovery.BookieStatus
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("admin bookies list: %v\n%s", err, out)
	}
	i := slices.IndexFunc(list, func(b autorecovery.BookieStatus) bool { return b.ID == victim.id })
	if i < 0 || list[i].State != autorecovery.StateDecommissioned || list[i].Ledgers != 0 {
		t.Errorf("admin bookies list shows %s as %+v; want decommissioned with 0 ledgers\n%s", victim.id, list, out)
	}
	st := cp.waitComplete(prof.healTimeout(), map[string]bool{victim.id: true})
	t.Logf("%d ledgers, %d settled segments, every one of %d copies read back; none on %s", st.ledgers, st.segments, st.copies, victim.id)
}

// With three bookies and ledgers of ensemble 3, a decommission is refused:
// the CLI fails naming NOT_ENOUGH_BOOKIES and what would be left, the REST
// answer is 412 with that code, and the bookie stays writable. Then two
// bookies join under load: after the partitions' ledgers rolled over, the
// new ledgers spread over all five so that each bookie's share of the new
// writes is within 25% of the mean, and autorecovery copies nothing (no
// under-replication mark is ever written).
//
// The share is measured from the ledger metadata, not from the bookies'
// write rates: each new closed ledger credits its bytes to every bookie of
// its write sets. Rates in the registrations are short moving averages,
// noisy on a loaded 2-core machine; the metadata is exact. Ledgers roll
// over every 5 entries so that enough are created for a 25% bound to hold
// for random placement (3 of 5 bookies per ledger: with 200 ledgers a
// bookie's count is 120 ± 7, the bound ±30).
func TestBookiesScaleOutUnderLoad(t *testing.T) {
	prof := currentProfile()
	newLedgers := 200
	if prof.name == "long" {
		newLedgers = 1000
	}
	c := newRealCluster(t, bookieCluster(3, "--max-entries-per-ledger", "5"))
	cp := newCopies(t, c.store)
	w := newWorkload(t, c, "bookie-scale-out", prof)

	// Every under-replication mark written from now on.
	marks := watchPuts(t, c.store, metastore.UnderReplicatedPrefix)

	report := w.run(func(context.Context) {
		waitClosedLedgers(t, cp, 2*workloadPartitions)

		out, err := c.admin("bookies", "decommission", "bookie-0")
		if err == nil || !strings.Contains(out, "too few writable bookies") || !strings.Contains(out, "leaves 2 writable bookies") {
			t.Errorf("decommission with 3 bookies for E=3: %v\n%s\nwant a refusal saying 2 writable bookies would be left", err, out)
		}
		t.Logf("decommission refused: %s", strings.TrimSpace(out))
		resp, err := http.Post("http://"+c.brokers[0].http+"/admin/v2/bookies/bookie-0/decommission", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct {
			Code string `json:"errorCode"`
		}
		json.Unmarshal(body, &e)
		if resp.StatusCode != http.StatusPreconditionFailed || e.Code != "NOT_ENOUGH_BOOKIES" {
			t.Errorf("POST decommission with 3 bookies: %s %s; want 412 NOT_ENOUGH_BOOKIES", resp.Status, body)
		}
		if all, err := c.bookieStatuses(); err != nil || all["bookie-0"].State != autorecovery.StateWritable {
			t.Errorf("after a refused decommission bookie-0 is %+v (%v); want writable", all["bookie-0"], err)
		}

		time.Sleep(prof.gap())
		start := time.Now()
		c.addBookie()
		c.addBookie()
		joined := time.Now()
		t.Logf("2 bookies joined in %v", joined.Sub(start).Round(time.Millisecond))
		w.fault("scale-out", "bookie-3,bookie-4", start, joined)
		testutil.Eventually(t, prof.healTimeout(), fmt.Sprintf("%d closed ledgers created after the scale-out", newLedgers), func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ms, err := cp.ledgers(ctx)
			if err != nil {
				return false
			}
			n := 0
			for _, m := range ms {
				if m.State == ledger.StateClosed && !m.CreatedAt.Before(joined) {
					n++
				}
			}
			return n >= newLedgers
		})

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		ms, err := cp.ledgers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		share := map[string]float64{}
		for _, b := range c.bookies {
			share[b.id] = 0
		}
		n := 0
		for _, m := range ms {
			if m.State != ledger.StateClosed || m.CreatedAt.Before(joined) || m.LastEntry < 0 {
				continue
			}
			n++
			perEntry := float64(m.Length) / float64(m.LastEntry+1)
			for i, seg := range m.Segments {
				for e := seg.First; e <= m.SegmentEnd(i); e++ {
					for _, pos := range ledger.WriteSet(e, m.Ensemble, m.WriteQuorum) {
						share[seg.Bookies[pos]] += perEntry
					}
				}
			}
		}
		mean := 0.0
		for _, v := range share {
			mean += v
		}
		mean /= float64(len(share))
		ids := make([]string, 0, len(share))
		for id := range share {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		var line []string
		for _, id := range ids {
			line = append(line, fmt.Sprintf("%s %.0f B (%+.1f%%)", id, share[id], 100*(share[id]-mean)/mean))
		}
		t.Logf("new writes over %d ledgers created after the scale-out: %s", n, strings.Join(line, ", "))
		if len(share) != 5 {
			t.Errorf("new ledgers were written to %d bookies: %v", len(share), ids)
		}
		for _, id := range ids {
			if d := (share[id] - mean) / mean; d > 0.25 || d < -0.25 {
				t.Errorf("%s took %+.1f%% of the mean of new writes; want within 25%%", id, 100*d)
			}
		}
		if n := marks.Load(); n != 0 {
			t.Errorf("%d under-replication marks were written during a scale-out; want none (nothing to copy)", n)
		}

		// Then the old data: a rebalance, still under load, moves closed
		// ledgers' copies onto the new bookies until what the bookies
		// hold is within the target spread.
		time.Sleep(prof.gap())
		// Asked for 0.25, checked at 0.3: the writes go on between the
		// auditor's last measure and this one.
		const asked, target = 0.25, 0.3
		rstart := time.Now()
		if out, err := c.admin("bookies", "rebalance", "--target-spread", fmt.Sprint(asked)); err != nil {
			t.Fatalf("rebalance: %v\n%s", err, out)
		}
		testutil.Eventually(t, prof.healTimeout(), "the rebalance to finish", func() bool {
			var st autorecovery.RebalanceStatus
			return c.adminGet("/admin/v2/bookies/rebalance", &st) == nil && !st.Active && st.PendingMoves == 0
		})
		ms, err = cp.ledgers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held := map[string]float64{}
		for _, b := range c.bookies {
			held[b.id] = 0
		}
		for _, m := range ms {
			if m.State != ledger.StateClosed {
				continue
			}
			for _, b := range m.Bookies() {
				held[b] += float64(m.Length) * float64(m.WriteQuorum) / float64(m.Ensemble)
			}
		}
		lo, hi, sum := math.Inf(1), math.Inf(-1), 0.0
		for _, v := range held {
			lo, hi, sum = math.Min(lo, v), math.Max(hi, v), sum+v
		}
		spread := (hi - lo) / (sum / float64(len(held)))
		t.Logf("rebalance under load done in %v: held bytes per bookie %v, spread %.3f (target %v), %d marks in all",
			time.Since(rstart).Round(time.Millisecond), held, spread, target, marks.Load())
		if spread > target {
			t.Errorf("spread after the rebalance %.3f, want <= %v: %v", spread, target, held)
		}
		if marks.Load() == 0 {
			t.Error("the rebalance moved nothing, although the old ledgers were on 3 of 5 bookies")
		}
		time.Sleep(prof.gap())
	})
	assertWorkload(t, w, report, prof, true)
	if n, err := c.underReplicated(); err != nil || n != 0 {
		t.Errorf("under-replicated count %d (%v) after a scale-out and a rebalance; want 0", n, err)
	}
	// Every copy the moves made is where the metadata says.
	cp.waitComplete(prof.healTimeout(), nil)
}

// watchPuts counts the keys put under prefix from now until the test
// ends.
func watchPuts(t *testing.T, store *metastore.Store, prefix string) *atomic.Int64 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := store.Client().Get(ctx, store.Root()+"/")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	done := make(chan struct{})
	ch := store.Watch(ctx, prefix, resp.Header.Revision+1)
	go func() {
		defer close(done)
		for b := range ch {
			if b.Err != nil {
				if ctx.Err() == nil {
					t.Errorf("watch %s: %v", prefix, b.Err)
				}
				return
			}
			for _, e := range b.Events {
				if e.Type == metastore.EventPut {
					n.Add(1)
				}
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return &n
}

// One bookie's disk fills up under load: it turns read-only, the writers
// move to the other bookies and no send fails; once space is freed, below
// --disk-usage-low-threshold, it is writable again. Nothing is lost.
//
// Every bookie has its data directory on a tmpfs of its own, all of one
// size (placement weighs bookies by free space: a small disk among large
// ones would get no ledger at all), and the test fills one of them past
// --disk-usage-threshold with a file.
func TestBookiesFullDisk(t *testing.T) {
	prof := currentProfile()
	const bookies = 5
	var disks []string
	for range bookies {
		disks = append(disks, smallDisk(t, 256<<20))
	}
	opts := bookieCluster(bookies)
	opts.bookieDataDir = func(i int) string { return filepath.Join(disks[i], "data") }
	c := newRealCluster(t, opts)
	cp := newCopies(t, c.store)
	full, disk := c.bookies[bookies-1], disks[bookies-1]
	w := newWorkload(t, c, "bookie-full-disk", prof)
	var readOnlyAt time.Time
	report := w.run(func(context.Context) {
		testutil.Eventually(t, time.Minute, full.id+" to hold a ledger", func() bool {
			all, err := c.bookieStatuses()
			return err == nil && all[full.id].Ledgers > 0
		})
		time.Sleep(prof.gap())
		start := time.Now()
		filler := fillDisk(t, disk, 0.95)
		st := c.waitBookieState(full.id, autorecovery.StateReadOnly, time.Minute, nil)
		readOnlyAt = time.Now()
		t.Logf("%s read-only %v after its disk filled up: reasons %v", full.id, readOnlyAt.Sub(start).Round(time.Millisecond), st.ReadOnlyReasons)
		if !slices.Contains(st.ReadOnlyReasons, "disk") {
			t.Errorf("%s is read-only for %v; want disk", full.id, st.ReadOnlyReasons)
		}
		// Writes go on without it: the writers of its busy ledgers replace
		// it, new ledgers are placed elsewhere (checked below). Its
		// registration reports the bytes it stored in each interval: none
		// once the writers moved. (Not none for ever: it still takes
		// recovery adds, as it must, such as autorecovery copying back
		// the entries a writer completed without it just before it
		// turned read-only, or a new owner recovering a ledger on it.)
		testutil.Eventually(t, 30*time.Second, full.id+" to store nothing more", func() bool {
			all, err := c.bookieStatuses()
			return err == nil && all[full.id].WriteBytesPerSec == 0
		})
		time.Sleep(prof.gap())
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		c.waitBookieState(full.id, autorecovery.StateWritable, time.Minute, nil)
		w.fault("full-disk", full.id, start, time.Now())
		time.Sleep(prof.gap())
	})
	assertWorkload(t, w, report, prof, true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ms, err := cp.ledgers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.CreatedAt.After(readOnlyAt.Add(time.Second)) && m.CreatedAt.Before(readOnlyAt.Add(prof.gap())) && slices.Contains(m.Segments[0].Bookies, full.id) {
			t.Errorf("ledger %d, created %v after %s turned read-only, was placed on it", m.ID, m.CreatedAt.Sub(readOnlyAt), full.id)
		}
	}
	st := cp.waitComplete(prof.healTimeout(), nil)
	t.Logf("%d ledgers, %d settled segments, every one of %d copies read back", st.ledgers, st.segments, st.copies)
}

// smallDisk mounts a tmpfs of size bytes for the test and returns its
// path; it is unmounted when the test ends (after the processes started
// later were killed).
func smallDisk(t *testing.T, size int64) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Fatalf("mount a %d-byte tmpfs for the full-disk bookie (needs CAP_SYS_ADMIN, as root in CI): %v", size, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fillDisk writes a file in dir until the filesystem is share full (as df
// counts it) and returns its path.
func fillDisk(t *testing.T, dir string, share float64) string {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	used := (st.Blocks - st.Bfree) * uint64(st.Bsize)
	total := used + st.Bavail*uint64(st.Bsize)
	want := int64(share*float64(total)) - int64(used)
	if want <= 0 {
		t.Fatalf("%s is already %.0f%% full", dir, 100*float64(used)/float64(total))
	}
	path := dir + "/filler"
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for want > 0 {
		n := min(int64(len(chunk)), want)
		if _, err := f.Write(chunk[:n]); err != nil {
			t.Fatal(err)
		}
		want -= n
	}
	return path
}
