package autoscaler

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/magnetar-io/magnetar/bookie/autorecovery"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var rules = Rules{
	MinBookies: 3, MaxBookies: 5,
	ScaleUpDiskUsage: 0.75, ScaleDownDiskUsage: 0.40,
	ScaleUpWriteBytes: 100, ScaleDownWriteBytes: 10,
	Window: time.Minute, Cooldown: 5 * time.Minute,
}

// cluster is a StatefulSet of bookies that the test changes the way the
// cluster would, and observes.
type cluster struct {
	t        *testing.T
	now      time.Time
	replicas int
	ready    int
	rolling  bool
	ours     string
	bookies  map[int]*Bookie
}

func newCluster(t *testing.T, n int, write float64) *cluster {
	c := &cluster{t: t, now: time.Unix(1_000_000, 0), replicas: n, ready: n, bookies: map[int]*Bookie{}}
	for i := 0; i < n; i++ {
		c.add(i, write)
	}
	return c
}

func (c *cluster) add(i int, write float64) {
	c.bookies[i] = &Bookie{Ordinal: i, ID: fmt.Sprintf("bk-%d", i), State: autorecovery.StateWritable, Registered: true, DiskUsage: 0.5, WriteBytesPerSec: write}
}

func (c *cluster) load(write, disk float64) {
	for _, b := range c.bookies {
		b.WriteBytesPerSec, b.DiskUsage = write, disk
	}
}

// obs is what observe makes of the cluster: every ordinal below the
// replicas, known or not, and every known one above.
func (c *cluster) obs() Observation {
	o := Observation{Now: c.now, Replicas: c.replicas, ReadyReplicas: c.ready, Rolling: c.rolling, Ours: c.ours}
	for i := 0; i < 100; i++ {
		if b, ok := c.bookies[i]; ok {
			o.Bookies = append(o.Bookies, *b)
		} else if i < c.replicas {
			o.Bookies = append(o.Bookies, Bookie{Ordinal: i, ID: fmt.Sprintf("bk-%d", i)})
		}
	}
	return o
}

// step advances the clock by dt and asks d; it checks the action's kind
// and that its reason contains why.
func (c *cluster) step(d *decider, dt time.Duration, want ActionKind, why string) Action {
	c.t.Helper()
	c.now = c.now.Add(dt)
	a := d.step(c.obs())
	if a.Kind != want || !strings.Contains(a.Reason, why) {
		c.t.Fatalf("at +%v: got %v (%q), want %v with %q", c.now.Sub(time.Unix(1_000_000, 0)), a.Kind, a.Reason, want, why)
	}
	if a.Kind != Wait {
		d.acted()
	}
	return a
}

// Scale-up: the load must stay high for the window; the new bookie must
// be ready and registered before the next change; then a whole cooldown;
// never above the maximum.
func TestScaleUp(t *testing.T) {
	c := newCluster(t, 3, 500)
	d := newDecider(rules, c.now) // a new leader waits a cooldown first
	c.step(d, 0, Wait, "since 0s; acting after 1m0s")
	c.step(d, time.Minute, Wait, "cooling down")
	c.load(50, 0.5) // between the thresholds: the window starts over
	c.step(d, 30*time.Second, Wait, "within bounds")
	c.load(500, 0.5)
	c.step(d, 30*time.Second, Wait, "since 0s")
	a := c.step(d, 4*time.Minute, ScaleUp, "load high for 1m0s")
	if a.Replicas != 4 {
		t.Fatalf("scale up to %d", a.Replicas)
	}
	c.replicas = 4
	c.step(d, time.Second, Wait, "3 of 4 bookies ready")
	c.ready = 4
	c.step(d, time.Second, Wait, "bk-3 is not registered yet")
	c.add(3, 500)
	c.step(d, time.Second, Wait, "since 0s") // the cooldown starts now
	c.step(d, 2*time.Minute, Wait, "cooling down")
	c.step(d, 3*time.Minute, ScaleUp, "load high")
	c.replicas, c.ready = 5, 5
	c.add(4, 500)
	c.step(d, 10*time.Minute, Wait, "at their maximum, 5")
}

// A single full disk is enough to scale up, whatever the write rate.
func TestScaleUpOnAFullDisk(t *testing.T) {
	c := newCluster(t, 3, 0)
	d := newDecider(rules, c.now.Add(-time.Hour))
	c.bookies[1].DiskUsage = 0.8
	c.step(d, 0, Wait, "fullest disk 80%")
	c.step(d, time.Minute, ScaleUp, "fullest disk 80%")
}

// Scale-in goes through decommission of the highest ordinal; the replicas
// go down only once it holds nothing; its name is forgotten once its pod
// is gone; then a cooldown; never below the minimum.
func TestScaleDownThroughDecommission(t *testing.T) {
	c := newCluster(t, 4, 1)
	c.load(1, 0.1)
	d := newDecider(rules, c.now.Add(-time.Hour))
	c.step(d, 0, Wait, "load is low")
	a := c.step(d, time.Minute, Decommission, "load low for 1m0s")
	if a.Bookie != "bk-3" {
		t.Fatalf("decommissioning %s, want the highest ordinal", a.Bookie)
	}
	c.ours = "bk-3" // the runner records it on the StatefulSet first
	c.bookies[3].State = autorecovery.StateDraining
	c.step(d, time.Minute, Wait, "bk-3 is draining")
	c.step(d, time.Hour, Wait, "bk-3 is draining") // however long it takes
	c.bookies[3].State = autorecovery.StateDecommissioned
	a = c.step(d, time.Second, ScaleDown, "bk-3 is drained")
	if a.Replicas != 3 || a.Bookie != "bk-3" {
		t.Fatalf("scale down: %+v", a)
	}
	c.replicas = 3 // the pod is still stopping
	c.step(d, time.Second, Wait, "bk-3 (ordinal 3, above the 3 replicas) is still running")
	c.ready = 3
	c.bookies[3].Registered = false
	a = c.step(d, time.Second, Forget, "bk-3 was removed (decommissioned)")
	if a.Bookie != "bk-3" {
		t.Fatalf("forget %s", a.Bookie)
	}
	delete(c.bookies, 3)
	c.step(d, time.Second, Wait, "at their minimum, 3")
}

// A Decommission refused (too few bookies for a ledger's ensemble) is
// asked again only after a cooldown.
func TestRefusedDecommissionWaitsACooldown(t *testing.T) {
	c := newCluster(t, 4, 1)
	c.load(1, 0.1)
	d := newDecider(rules, c.now.Add(-time.Hour))
	c.step(d, 0, Wait, "load is low")
	c.step(d, time.Minute, Decommission, "load low")
	d.refused(c.now)
	d.settled = true // refused: nothing changed in the cluster
	c.step(d, time.Second, Wait, "since 0s")
	c.step(d, 2*time.Minute, Wait, "cooling down")
	c.step(d, 5*time.Minute, Decommission, "load low")
}

// Nothing is decided while something else changes the bookies: a rolling
// upgrade, a bookie down, an operator's decommission; the windows start
// over afterwards.
func TestNoDecisionWhileSomethingElseChanges(t *testing.T) {
	c := newCluster(t, 4, 500)
	d := newDecider(rules, c.now.Add(-time.Hour))
	c.step(d, 0, Wait, "load is high")
	c.rolling = true
	c.step(d, 2*time.Minute, Wait, "an upgrade is rolling")
	c.rolling = false
	c.step(d, time.Second, Wait, "since 0s")
	c.step(d, 2*time.Minute, Wait, "cooling down") // the upgrade was a change
	c.bookies[1].Registered, c.bookies[1].State = false, autorecovery.StateDown
	c.step(d, time.Hour, Wait, "bk-1 is down")
	c.bookies[1].Registered, c.bookies[1].State = true, autorecovery.StateWritable
	c.step(d, time.Second, Wait, "since 0s") // the window starts over
	c.bookies[0].State = autorecovery.StateDraining
	c.step(d, time.Hour, Wait, "bk-0 is being decommissioned by someone else")
	c.bookies[0].State = autorecovery.StateDecommissioned
	c.step(d, time.Hour, Wait, "bk-0 is being decommissioned by someone else")
}

// A leader that takes over in the middle of a scale-in carries it on from
// what it sees: no window, no cooldown for a change already under way.
func TestNewLeaderCarriesOnAScaleIn(t *testing.T) {
	c := newCluster(t, 4, 1)
	c.load(1, 0.1)
	c.bookies[3].State = autorecovery.StateDecommissioned
	c.ours = "bk-3"
	d := newDecider(rules, c.now)
	c.step(d, 0, ScaleDown, "bk-3 is drained")
	c.replicas, c.ready = 3, 3
	c.bookies[3].Registered = false
	d = newDecider(rules, c.now)
	c.step(d, 0, Forget, "bk-3")
}

// A bookie removed without a drain (the StatefulSet scaled by hand) is
// lost: forgotten only once autorecovery moved its copies (Forget
// refuses before; the runner then waits a cooldown), and meanwhile its
// name is not reused by a scale-up.
func TestBookieRemovedByHand(t *testing.T) {
	c := newCluster(t, 4, 500)
	d := newDecider(rules, c.now.Add(-time.Hour))
	c.replicas, c.ready = 3, 3
	c.bookies[3].Registered, c.bookies[3].State = false, autorecovery.StateDown
	c.step(d, 0, Wait, "load is high")
	c.step(d, time.Minute, Wait, "bk-3, the name a new bookie would take, is still known (down)")
	c.bookies[3].State = autorecovery.StateLost
	c.step(d, time.Second, Forget, "bk-3 was removed (lost)")
	delete(c.bookies, 3)
	d.settled = true
	c.step(d, 10*time.Minute, ScaleUp, "load high")
}

// An operator's decommission of the highest-ordinal bookie is not a
// scale-in: the autoscaler waits, it does not remove that bookie.
func TestOperatorDrainIsNotAScaleIn(t *testing.T) {
	c := newCluster(t, 4, 1)
	c.load(1, 0.1)
	d := newDecider(rules, c.now.Add(-time.Hour))
	c.bookies[3].State = autorecovery.StateDecommissioned
	c.step(d, 0, Wait, "bk-3 is being decommissioned by someone else")
	c.ours = "bk-1" // a stale mark naming another bookie changes nothing
	c.step(d, time.Hour, Wait, "bk-3 is being decommissioned by someone else")
}

func TestOrdinal(t *testing.T) {
	for _, c := range []struct {
		id   string
		want int
		ok   bool
	}{
		{"rel-magnetar-bookie-0", 0, true},
		{"rel-magnetar-bookie-12", 12, true},
		{"rel-magnetar-bookie-", 0, false},
		{"rel-magnetar-bookie-01", 0, false},
		{"rel-magnetar-bookie--1", 0, false},
		{"rel-magnetar-bookie-x", 0, false},
		{"other-bookie-1", 0, false},
		{"rel-magnetar-bookie-1-2", 0, false},
	} {
		got, ok := ordinal("rel-magnetar-bookie", c.id)
		if got != c.want || ok != c.ok {
			t.Errorf("ordinal(%q) = %d, %v; want %d, %v", c.id, got, ok, c.want, c.ok)
		}
	}
}
