package check

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// MaxExamples is how many examples of each kind a Report keeps; Text
// prints the first TextExamples of them.
const (
	MaxExamples  = 100
	TextExamples = 20
)

// Report is what Check found. Each anomaly kind has a count and sorted
// examples; see the package documentation for the rules.
type Report struct {
	Meta   Meta   `json:"meta"`
	Totals Totals `json:"totals"`

	Lost          Anomaly    `json:"lost"`          // fails
	Unexpected    Anomaly    `json:"unexpected"`    // fails
	Duplicated    Duplicates `json:"duplicated"`    // fails only with Meta.Dedup
	Redelivered   Anomaly    `json:"redelivered"`   // allowed
	Conflicting   Anomaly    `json:"conflicting"`   // fails
	Reordered     Anomaly    `json:"reordered"`     // fails
	ProducerOrder Anomaly    `json:"producerOrder"` // fails
	FailedRead    Anomaly    `json:"failedRead"`    // reported only

	Availability []Availability `json:"availability"`
}

// Anomaly is the count of one kind of anomaly and some examples.
type Anomaly struct {
	Count    int            `json:"count"`
	BySub    map[string]int `json:"bySub,omitempty"` // per subscription, for the kinds seen by one
	Examples []string       `json:"examples,omitempty"`
}

// Duplicates are values read at two or more distinct positions.
type Duplicates struct {
	Anomaly
	OfOK      int `json:"ofOk"`      // the value's send was ok
	OfUnacked int `json:"ofUnacked"` // the value's send was unknown or failed
}

// Totals summarise the history.
type Totals struct {
	Sends       map[string]int `json:"sends"` // by result
	Recvs       int            `json:"recvs"`
	RecvsBySub  map[string]int `json:"recvsBySub"`
	ValuesRead  int            `json:"valuesRead"` // distinct values read by anyone
	Faults      int            `json:"faults"`
	DurationSec float64        `json:"durationSec"`
}

// Availability is how long the partitions took to accept writes again
// after one fault.
type Availability struct {
	Name         string            `json:"name"`
	Target       string            `json:"target"`
	StartSec     float64           `json:"startSec"`     // fault start, from the run's start
	HealedSec    float64           `json:"healedSec"`    // fault end, from the run's start; -1: never healed
	MaxSec       float64           `json:"maxSec"`       // slowest partition; -1: one never recovered
	MaxPartition int32             `json:"maxPartition"` // the slowest (or first unrecovered) partition
	MeanSec      float64           `json:"meanSec"`      // -1: a partition never recovered
	Partitions   map[int32]float64 `json:"partitions"`   // per partition; -1: never recovered
	// MaxGapSec is the longest a partition went without a write
	// acknowledged, from the fault's start until the next fault (or the
	// last acknowledged write): a fault that takes effect late, such as a
	// broker cut off from etcd that serves until its lease ends, shows
	// here rather than in MaxSec.
	MaxGapSec    float64 `json:"maxGapSec"`
	GapPartition int32   `json:"gapPartition"`
}

// Pass reports whether the history shows no failing anomaly.
func (r *Report) Pass() bool { return len(r.Failures()) == 0 }

// Failures returns one line per failing anomaly kind; none when the
// history passes.
func (r *Report) Failures() []string {
	var f []string
	if n := r.Lost.Count; n > 0 {
		f = append(f, fmt.Sprintf("lost: %d (acknowledged values a subscription never read: %s)", n, bySub(r.Lost.BySub)))
	}
	if n := r.Unexpected.Count; n > 0 {
		f = append(f, fmt.Sprintf("unexpected: %d (values read that no send attempted: %s)", n, bySub(r.Unexpected.BySub)))
	}
	if n := r.Duplicated.Count; n > 0 && r.Meta.Dedup {
		f = append(f, fmt.Sprintf("duplicated: %d (values written twice with deduplication on: %d of ok sends, %d of unknown or failed sends)",
			n, r.Duplicated.OfOK, r.Duplicated.OfUnacked))
	}
	if n := r.Conflicting.Count; n > 0 {
		f = append(f, fmt.Sprintf("conflicting ids: %d (positions with two values, or ok sends acknowledged where their value was not read)", n))
	}
	if n := r.Reordered.Count; n > 0 {
		f = append(f, fmt.Sprintf("reordered: %d (messages received after a later one of the same stream: %s)", n, bySub(r.Reordered.BySub)))
	}
	if n := r.ProducerOrder.Count; n > 0 {
		f = append(f, fmt.Sprintf("producer order: %d (ok sends acknowledged at a position not after their producer's previous ok send to the partition)", n))
	}
	return f
}

// Text returns a human summary: totals, the verdict, each kind's count
// with up to TextExamples examples, then availability.
func (r *Report) Text() string {
	var b strings.Builder
	dedup := "off"
	if r.Meta.Dedup {
		dedup = "on"
	}
	fmt.Fprintf(&b, "scenario %q: %d partitions, dedup %s, %.1fs\n", r.Meta.Scenario, r.Meta.Partitions, dedup, r.Totals.DurationSec)
	fmt.Fprintf(&b, "sends: %d (%s)\n", sum(r.Totals.Sends), byResult(r.Totals.Sends))
	fmt.Fprintf(&b, "recvs: %d (%s), distinct values read: %d\n", r.Totals.Recvs, bySub(r.Totals.RecvsBySub), r.Totals.ValuesRead)
	fmt.Fprintf(&b, "faults: %d\n", r.Totals.Faults)
	if fails := r.Failures(); len(fails) == 0 {
		b.WriteString("result: PASS\n")
	} else {
		b.WriteString("result: FAIL\n")
		for _, f := range fails {
			fmt.Fprintf(&b, "  %s\n", f)
		}
	}
	b.WriteString("\n")

	dupNote := "allowed: dedup off"
	if r.Meta.Dedup {
		dupNote = "fails: dedup on"
	}
	kinds := []struct {
		name string
		a    Anomaly
		note string
	}{
		{"lost", r.Lost, ""},
		{"unexpected", r.Unexpected, ""},
		{"duplicated", r.Duplicated.Anomaly, fmt.Sprintf("%d of ok sends, %d of unknown or failed sends; %s", r.Duplicated.OfOK, r.Duplicated.OfUnacked, dupNote)},
		{"redelivered", r.Redelivered, "allowed"},
		{"conflicting ids", r.Conflicting, ""},
		{"reordered", r.Reordered, ""},
		{"producer order", r.ProducerOrder, ""},
		{"failed sends read", r.FailedRead, "reported only"},
	}
	for _, k := range kinds {
		fmt.Fprintf(&b, "%s: %d", k.name, k.a.Count)
		var notes []string
		if len(k.a.BySub) > 0 {
			notes = append(notes, bySub(k.a.BySub))
		}
		if k.note != "" && k.a.Count > 0 {
			notes = append(notes, k.note)
		}
		if len(notes) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(notes, "; "))
		}
		b.WriteString("\n")
		for i, ex := range k.a.Examples {
			if i == TextExamples {
				fmt.Fprintf(&b, "  ... %d more\n", k.a.Count-TextExamples)
				break
			}
			fmt.Fprintf(&b, "  %s\n", ex)
		}
	}

	if len(r.Availability) > 0 {
		b.WriteString("\navailability (seconds from fault start to the first ok send completed, per partition; longest time a partition had no write acknowledged until the next fault):\n")
		for _, a := range r.Availability {
			healed := "never healed"
			if a.HealedSec >= 0 {
				healed = fmt.Sprintf("healed %.1fs", a.HealedSec)
			}
			fmt.Fprintf(&b, "  %s %s at %.1fs (%s): ", a.Name, a.Target, a.StartSec, healed)
			if a.MaxSec < 0 {
				fmt.Fprintf(&b, "partition %d never recovered\n", a.MaxPartition)
			} else {
				fmt.Fprintf(&b, "max %.2fs (partition %d), mean %.2fs; longest gap %.2fs (partition %d)\n", a.MaxSec, a.MaxPartition, a.MeanSec, a.MaxGapSec, a.GapPartition)
			}
		}
	}
	return b.String()
}

// Check runs every rule over the history.
func Check(h *History) *Report {
	c := &checker{
		h:           h,
		r:           &Report{Meta: h.Meta},
		sends:       make(map[string][]int),
		readAt:      make(map[string][]MsgID),
		idValue:     make(map[MsgID]string),
		idConflicts: make(map[MsgID][]string),
		subValues:   make(map[string]map[string]struct{}),
	}
	c.totals()
	c.indexSends()
	c.recvs()
	c.acks()
	c.lost()
	c.duplicates()
	c.producerOrder()
	c.availability()
	for _, ex := range c.examples {
		ex.finish()
	}
	return c.r
}

// checker holds the indexes the rules share.
type checker struct {
	h     *History
	r     *Report
	start int64 // the run's start: Meta.Started, else the first timestamp

	sends       map[string][]int               // value -> indexes in h.Sends
	readAt      map[string][]MsgID             // value -> distinct positions it was read at, by anyone
	idValue     map[MsgID]string               // position -> first value seen there (recv or ok send)
	idConflicts map[MsgID][]string             // position -> every distinct value, for conflicting positions
	subValues   map[string]map[string]struct{} // subscription -> values it read

	examples []*examples
}

// examples gathers an anomaly's count and examples; finish sorts and
// trims the examples.
type examples struct {
	a   *Anomaly
	all []string
}

func (c *checker) kind(a *Anomaly) *examples {
	e := &examples{a: a}
	c.examples = append(c.examples, e)
	return e
}

// add counts one anomaly, for subscription sub if not empty.
func (e *examples) add(sub, format string, args ...any) {
	e.a.Count++
	if sub != "" {
		if e.a.BySub == nil {
			e.a.BySub = make(map[string]int)
		}
		e.a.BySub[sub]++
	}
	e.all = append(e.all, fmt.Sprintf(format, args...))
}

func (e *examples) finish() {
	slices.Sort(e.all)
	if len(e.all) > MaxExamples {
		e.all = e.all[:MaxExamples]
	}
	e.a.Examples = slices.Clip(e.all)
}

func (c *checker) totals() {
	t := &c.r.Totals
	t.Sends = make(map[string]int)
	t.RecvsBySub = make(map[string]int)
	t.Recvs = len(c.h.Recvs)
	t.Faults = len(c.h.Faults)
	var first, last int64
	see := func(ts int64) {
		if ts == 0 {
			return
		}
		if first == 0 || ts < first {
			first = ts
		}
		last = max(last, ts)
	}
	for _, s := range c.h.Sends {
		t.Sends[s.Result]++
		see(s.Start)
		see(s.End)
	}
	for _, e := range c.h.Recvs {
		t.RecvsBySub[e.Sub]++
		see(e.Time)
	}
	for _, f := range c.h.Faults {
		see(f.Start)
		see(f.End)
	}
	if c.h.Meta.Started != 0 {
		first = c.h.Meta.Started
	}
	c.start = first
	if last > first {
		t.DurationSec = seconds(last - first)
	}
}

func (c *checker) indexSends() {
	for i, s := range c.h.Sends {
		c.sends[s.Value] = append(c.sends[s.Value], i)
	}
}

// sendResult is the best result among a value's sends: ok, else unknown,
// else failed; "" when no send attempted it.
func (c *checker) sendResult(value string) string {
	best := ""
	for _, i := range c.sends[value] {
		switch r := c.h.Sends[i].Result; {
		case r == ResultOK:
			return ResultOK
		case r == ResultUnknown || best == "":
			best = r
		}
	}
	return best
}

// setID records that position id carries value, noting conflicts.
func (c *checker) setID(id MsgID, value string) {
	old, ok := c.idValue[id]
	if !ok {
		c.idValue[id] = value
		return
	}
	if old == value {
		return
	}
	vs := c.idConflicts[id]
	if len(vs) == 0 {
		vs = []string{old}
	}
	if !slices.Contains(vs, value) {
		vs = append(vs, value)
	}
	c.idConflicts[id] = vs
}

// subID is a position within a subscription.
type subID struct {
	sub string
	id  MsgID
}

// subValue is a value within a subscription.
type subValue struct{ sub, value string }

// consumerID is a position within one consumer's reads.
type consumerID struct {
	sub, consumer string
	id            MsgID
}

// stream is one ordered stream of a consumer: a partition, or for
// key_shared a key within a partition.
type stream struct {
	sub, consumer, key string
	partition          int32
}

// recvs walks the reads in record order: positions, values per
// subscription, redeliveries, unexpected values and reorders.
func (c *checker) recvs() {
	var (
		redelivered = c.kind(&c.r.Redelivered)
		reordered   = c.kind(&c.r.Reordered)
		unexpected  = c.kind(&c.r.Unexpected)
		subSeen     = make(map[subID]struct{}, len(c.h.Recvs))
		highest     = make(map[stream]MsgID)
		unexpSeen   = make(map[subValue]struct{})
	)
	for _, e := range c.h.Recvs {
		id := *e.ID
		if !slices.Contains(c.readAt[e.Value], id) {
			c.readAt[e.Value] = append(c.readAt[e.Value], id)
		}
		c.setID(id, e.Value)
		vals := c.subValues[e.Sub]
		if vals == nil {
			vals = make(map[string]struct{})
			c.subValues[e.Sub] = vals
		}
		vals[e.Value] = struct{}{}

		if _, ok := c.sends[e.Value]; !ok {
			k := subValue{e.Sub, e.Value}
			if _, dup := unexpSeen[k]; !dup {
				unexpSeen[k] = struct{}{}
				unexpected.add(e.Sub, "%s: value %q at %s, consumer %s", e.Sub, e.Value, id, e.Consumer)
			}
		}

		sk := subID{e.Sub, id}
		_, seenBySub := subSeen[sk]
		if seenBySub {
			redelivered.add(e.Sub, "%s: %s (value %q) again, consumer %s, redelivery count %d", e.Sub, id, e.Value, e.Consumer, e.Redelivery)
		}
		subSeen[sk] = struct{}{}

		st := stream{sub: e.Sub, consumer: e.Consumer, partition: id.Partition}
		switch e.SubType {
		case SubExclusive, SubFailover, SubDrain:
		case SubKeyShared:
			st.key = e.Key
		default:
			continue // shared and unknown types: no order
		}
		top, ok := highest[st]
		switch {
		case !ok || top.Less(id):
			highest[st] = id
		case seenBySub:
			// A redelivery or rewind: the subscription had this message
			// (perhaps at another consumer, whose acknowledgement was
			// lost with its broker), not a reorder.
		case id.Less(top):
			what := fmt.Sprintf("partition %d", id.Partition)
			if e.SubType == SubKeyShared {
				what = fmt.Sprintf("key %q", e.Key)
			}
			reordered.add(e.Sub, "%s/%s %s: %s (value %q) after %s", e.Sub, e.Consumer, what, id, e.Value, top)
		}
	}
	c.r.Totals.ValuesRead = len(c.readAt)
}

// acks checks the ok sends' positions against what was read, then
// reports every conflicting position.
func (c *checker) acks() {
	conflicting := c.kind(&c.r.Conflicting)
	for _, s := range c.h.Sends {
		if s.Result != ResultOK || s.ID == nil {
			continue
		}
		c.setID(*s.ID, s.Value)
		if read := c.readAt[s.Value]; len(read) > 0 && !slices.Contains(read, *s.ID) {
			conflicting.add("", "value %q (%s seq %d) acknowledged at %s but read at %s", s.Value, s.Producer, s.Seq, *s.ID, ids(read))
		}
	}
	for id, vs := range c.idConflicts {
		q := make([]string, len(vs))
		for i, v := range vs {
			q[i] = fmt.Sprintf("%q", v)
		}
		slices.Sort(q)
		conflicting.add("", "position %s carries values %s", id, strings.Join(q, ", "))
	}
}

// lost checks that every subscription created before the first send read
// every ok value.
func (c *checker) lost() {
	lost := c.kind(&c.r.Lost)
	failedRead := c.kind(&c.r.FailedRead)
	var okValues []string
	for v, idx := range c.sends {
		switch c.sendResult(v) {
		case ResultOK:
			okValues = append(okValues, v)
		case ResultFailed:
			if read := c.readAt[v]; len(read) > 0 {
				s := c.h.Sends[idx[0]]
				failedRead.add("", "value %q (%s seq %d, %s) read at %s", v, s.Producer, s.Seq, s.Error, ids(read))
			}
		}
	}
	subs := slices.Clone(c.h.Meta.Subscriptions)
	slices.Sort(subs)
	for _, sub := range slices.Compact(subs) {
		read := c.subValues[sub]
		for _, v := range okValues {
			if _, ok := read[v]; !ok {
				s := c.h.Sends[c.okSend(v)]
				lost.add(sub, "%s: value %q (%s seq %d, acknowledged at %s)", sub, v, s.Producer, s.Seq, idString(s.ID))
			}
		}
	}
}

// okSend returns the index of the value's first ok send.
func (c *checker) okSend(value string) int {
	for _, i := range c.sends[value] {
		if c.h.Sends[i].Result == ResultOK {
			return i
		}
	}
	return -1
}

// duplicates finds values read at more than one position.
func (c *checker) duplicates() {
	d := &c.r.Duplicated
	dup := c.kind(&d.Anomaly)
	for v, read := range c.readAt {
		if len(read) < 2 {
			continue
		}
		result := c.sendResult(v)
		if result == ResultOK {
			d.OfOK++
		} else {
			d.OfUnacked++
		}
		if result == "" {
			result = "no send"
		}
		dup.add("", "value %q (send %s) read at %s", v, result, ids(read))
	}
}

// producerOrder checks that each producer's ok sends to a partition were
// acknowledged at increasing positions, in the order they were issued
// (per key for the producers of Meta.KeyOrdered).
func (c *checker) producerOrder() {
	type prodPart struct {
		producer  string
		partition int32
		key       string // Meta.KeyOrdered producers only
	}
	order := c.kind(&c.r.ProducerOrder)
	streams := make(map[prodPart][]*Event)
	for i := range c.h.Sends {
		s := &c.h.Sends[i]
		if s.Result == ResultOK && s.ID != nil {
			k := prodPart{producer: s.Producer, partition: s.ID.Partition}
			if slices.Contains(c.h.Meta.KeyOrdered, s.Producer) {
				k.key = s.Key
			}
			streams[k] = append(streams[k], s)
		}
	}
	for _, ss := range streams {
		slices.SortStableFunc(ss, func(a, b *Event) int { return cmp.Compare(a.Seq, b.Seq) })
		for i := 1; i < len(ss); i++ {
			prev, s := ss[i-1], ss[i]
			if !prev.ID.Less(*s.ID) {
				scope := ""
				if slices.Contains(c.h.Meta.KeyOrdered, s.Producer) {
					scope = fmt.Sprintf(" key %q", s.Key)
				}
				order.add("", "%s partition %d%s: seq %d (value %q) at %s, not after seq %d (value %q) at %s",
					s.Producer, s.ID.Partition, scope, s.Seq, s.Value, *s.ID, prev.Seq, prev.Value, *prev.ID)
			}
		}
	}
}

// availability measures, for each fault and partition, the time from the
// fault's start to the earliest end of an ok send to that partition
// started at or after it.
func (c *checker) availability() {
	type span struct{ start, end int64 }
	byPart := make(map[int32][]span)
	for _, s := range c.h.Sends {
		if s.Result == ResultOK && s.ID != nil {
			byPart[s.ID.Partition] = append(byPart[s.ID.Partition], span{s.Start, s.End})
		}
	}
	// For each partition: sends by start, and the earliest end among
	// each suffix, so one binary search answers a fault.
	firstEnd := make(map[int32][]int64, len(byPart))
	for p, spans := range byPart {
		slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.start, b.start) })
		ends := make([]int64, len(spans))
		for i := len(spans) - 1; i >= 0; i-- {
			ends[i] = spans[i].end
			if i+1 < len(spans) {
				ends[i] = min(ends[i], ends[i+1])
			}
		}
		firstEnd[p] = ends
	}
	var parts []int32
	if n := c.h.Meta.Partitions; n > 0 {
		for p := range n {
			parts = append(parts, int32(p))
		}
	} else {
		parts = slices.Sorted(maps.Keys(byPart))
	}

	// Acknowledgement times per partition, sorted, for the gaps.
	acked := make(map[int32][]int64, len(byPart))
	var lastAck int64
	for p, spans := range byPart {
		ends := make([]int64, len(spans))
		for i, sp := range spans {
			ends[i] = sp.end
			lastAck = max(lastAck, sp.end)
		}
		slices.Sort(ends)
		acked[p] = ends
	}

	faults := slices.Clone(c.h.Faults)
	slices.SortStableFunc(faults, func(a, b Event) int { return cmp.Compare(a.Start, b.Start) })
	for fi, f := range faults {
		windowEnd := lastAck
		if fi+1 < len(faults) {
			windowEnd = min(windowEnd, faults[fi+1].Start)
		}
		a := Availability{
			Name:       f.Name,
			Target:     f.Target,
			StartSec:   seconds(f.Start - c.start),
			HealedSec:  -1,
			Partitions: make(map[int32]float64, len(parts)),
		}
		if f.End != 0 {
			a.HealedSec = seconds(f.End - c.start)
		}
		var (
			total           float64
			slowest         = -1.0
			slowestP, downP int32
			down            bool
		)
		for _, p := range parts {
			spans := byPart[p]
			i, _ := slices.BinarySearchFunc(spans, f.Start, func(s span, t int64) int { return cmp.Compare(s.start, t) })
			d := -1.0
			if i < len(spans) {
				d = seconds(firstEnd[p][i] - f.Start)
			}
			a.Partitions[p] = d
			switch {
			case d < 0:
				if !down {
					down, downP = true, p
				}
			case d > slowest:
				slowest, slowestP = d, p
			}
			total += d
		}
		a.GapPartition = -1
		for _, p := range parts {
			prev := f.Start
			ends := acked[p]
			i, _ := slices.BinarySearch(ends, f.Start)
			for ; i < len(ends) && ends[i] <= windowEnd; i++ {
				if g := seconds(ends[i] - prev); g > a.MaxGapSec {
					a.MaxGapSec, a.GapPartition = g, p
				}
				prev = ends[i]
			}
			if g := seconds(windowEnd - prev); g > a.MaxGapSec { // still without a write at the window's end
				a.MaxGapSec, a.GapPartition = g, p
			}
		}
		switch {
		case len(parts) == 0:
			a.MaxSec, a.MaxPartition, a.MeanSec = -1, -1, -1
		case down:
			a.MaxSec, a.MaxPartition, a.MeanSec = -1, downP, -1
		default:
			a.MaxSec, a.MaxPartition, a.MeanSec = slowest, slowestP, total/float64(len(parts))
		}
		c.r.Availability = append(c.r.Availability, a)
	}
}

func seconds(ns int64) float64 { return float64(ns) / 1e9 }

func idString(id *MsgID) string {
	if id == nil {
		return "-"
	}
	return id.String()
}

// ids formats positions sorted.
func ids(read []MsgID) string {
	s := slices.Clone(read)
	slices.SortFunc(s, func(a, b MsgID) int {
		switch {
		case a.Less(b):
			return -1
		case b.Less(a):
			return 1
		}
		return 0
	})
	q := make([]string, len(s))
	for i, id := range s {
		q[i] = id.String()
	}
	return strings.Join(q, ", ")
}

// bySub formats per-subscription counts, sorted by name.
func bySub(m map[string]int) string {
	q := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		q = append(q, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(q, ", ")
}

// byResult formats send counts: ok, unknown, failed, then any other.
func byResult(m map[string]int) string {
	var q []string
	for _, k := range []string{ResultOK, ResultUnknown, ResultFailed} {
		q = append(q, fmt.Sprintf("%s %d", k, m[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if k != ResultOK && k != ResultUnknown && k != ResultFailed {
			q = append(q, fmt.Sprintf("%s %d", k, m[k]))
		}
	}
	return strings.Join(q, ", ")
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// WriteReport writes r to dir as report.json (indented) and report.txt
// (Text).
func WriteReport(dir string, r *Report) error {
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "report.txt"), []byte(r.Text()), 0o644)
}
