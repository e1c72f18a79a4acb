package broker

import (
	"fmt"
	"slices"
	"sort"
	"strconv"

	"github.com/twmb/murmur3"

	"github.com/magnetar-io/magnetar/proto/brokerpb"
	"github.com/magnetar-io/magnetar/proto/pulsarpb"
)

// Key hashes are in 0..hashRangeSize-1, as Pulsar's sticky key hashes:
// murmur3_32 of the key, made non-negative, modulo 65536.
const hashRangeSize = 1 << 16

// pointsPerConsumer is how many points each consumer has on the
// consistent-hashing ring (Pulsar's default).
const pointsPerConsumer = 100

// noneKey is the sticky key of messages without a key (Pulsar's NONE_KEY).
var noneKey = []byte("NONE_KEY")

// stickyKey is the key an entry is dispatched by: its ordering key, else
// its partition key, else noneKey. A batch is dispatched by the key of its
// metadata, which the client sets only when every message of the batch
// has that key (key-based batching).
func stickyKey(md *pulsarpb.MessageMetadata) []byte {
	switch {
	case md == nil:
		return noneKey
	case len(md.OrderingKey) > 0:
		return md.OrderingKey
	case md.PartitionKey != nil && *md.PartitionKey != "":
		return []byte(*md.PartitionKey)
	}
	return noneKey
}

func stickyKeyHash(key []byte) int32 {
	return int32((murmur3.Sum32(key) & 0x7fffffff) % hashRangeSize)
}

// hashRange is start..end inclusive.
type hashRange struct{ start, end int32 }

func (r hashRange) String() string { return fmt.Sprintf("[%d, %d]", r.start, r.end) }

// keySelector maps key hashes to the consumers of a Key_Shared
// subscription. Not safe for concurrent use (the subscription's lock
// guards it).
type keySelector interface {
	add(c *consumer) error
	remove(c *consumer)
	// pick returns the consumer of hash h, nil if none.
	pick(h int32) *consumer
	// ranges lists the hashes c is given.
	ranges(c *consumer) []hashRange
}

// The broker's --key-shared-selector values.
const (
	KeySharedConsistentHashing = "consistent-hashing"
	KeySharedAutoSplit         = "auto-split"
)

// newKeySelector returns the selector for a subscription's first
// consumer's mode; auto-split consumers share the hashes as the broker's
// --key-shared-selector says.
func newKeySelector(mode brokerpb.KeySharedMode, selector string) keySelector {
	switch {
	case mode == brokerpb.KeySharedMode_STICKY:
		return &stickySelector{}
	case selector == KeySharedAutoSplit:
		return &splitSelector{}
	}
	return &ringSelector{}
}

// checkHashRanges validates the ranges a sticky consumer asks for.
func checkHashRanges(meta *brokerpb.KeySharedMeta) ([]hashRange, error) {
	if len(meta.GetHashRanges()) == 0 {
		return nil, errorf(ErrInvalidArgument, "a sticky key_shared consumer must give hash ranges")
	}
	if len(meta.HashRanges) > 1024 {
		return nil, errorf(ErrInvalidArgument, "%d hash ranges, at most 1024", len(meta.HashRanges))
	}
	var rs []hashRange
	for _, r := range meta.HashRanges {
		if r.Start < 0 || r.End < r.Start || r.End >= hashRangeSize {
			return nil, errorf(ErrInvalidArgument, "hash range [%d, %d] is not within 0..%d", r.Start, r.End, hashRangeSize-1)
		}
		rs = append(rs, hashRange{r.Start, r.End})
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].start < rs[j].start })
	for i := 1; i < len(rs); i++ {
		if rs[i].start <= rs[i-1].end {
			return nil, errorf(ErrInvalidArgument, "hash ranges %v and %v overlap", rs[i-1], rs[i])
		}
	}
	return rs, nil
}

// stickySelector gives each consumer the ranges it asked for; ranges of
// different consumers may not overlap. Hashes nobody asked for wait.
type stickySelector struct {
	owned []stickyRange // sorted by start
}

type stickyRange struct {
	hashRange
	c *consumer
}

func (s *stickySelector) add(c *consumer) error {
	if c.keyShared.GetMode() != brokerpb.KeySharedMode_STICKY {
		return errorf(ErrConsumerBusy, "the subscription's key_shared consumers are sticky; this one is not")
	}
	rs, err := checkHashRanges(c.keyShared)
	if err != nil {
		return err
	}
	for _, r := range rs {
		for _, o := range s.owned {
			if r.start <= o.end && o.start <= r.end {
				return errorf(ErrInvalidArgument, "hash range %v overlaps range %v of consumer %q", r, o.hashRange, o.c.name)
			}
		}
	}
	for _, r := range rs {
		s.owned = append(s.owned, stickyRange{r, c})
	}
	sort.Slice(s.owned, func(i, j int) bool { return s.owned[i].start < s.owned[j].start })
	return nil
}

func (s *stickySelector) remove(c *consumer) {
	s.owned = slices.DeleteFunc(s.owned, func(r stickyRange) bool { return r.c == c })
}

func (s *stickySelector) pick(h int32) *consumer {
	i := sort.Search(len(s.owned), func(i int) bool { return s.owned[i].end >= h })
	if i < len(s.owned) && s.owned[i].start <= h {
		return s.owned[i].c
	}
	return nil
}

func (s *stickySelector) ranges(c *consumer) []hashRange {
	var out []hashRange
	for _, r := range s.owned {
		if r.c == c {
			out = append(out, r.hashRange)
		}
	}
	return out
}

// ringSelector is consistent hashing: every consumer has
// pointsPerConsumer points on a ring of the hash space, placed by the hash
// of its name (and an index among consumers of the same name), so that a
// consumer that reconnects gets the same hashes back and a consumer that
// joins or leaves moves only about 1/n of the hashes. A hash belongs to
// the first point at or after it.
type ringSelector struct {
	points []ringPoint // sorted by hash, then by consumer key
	keys   map[*consumer]string
}

type ringPoint struct {
	hash int32
	key  string
	c    *consumer
}

func (s *ringSelector) add(c *consumer) error {
	if c.keyShared.GetMode() != brokerpb.KeySharedMode_AUTO_SPLIT {
		return errorf(ErrConsumerBusy, "the subscription's key_shared consumers use consistent hashing; this one is sticky")
	}
	if s.keys == nil {
		s.keys = map[*consumer]string{}
	}
	used := map[string]bool{}
	for _, k := range s.keys {
		used[k] = true
	}
	key := c.name
	for i := 1; used[key]; i++ {
		key = c.name + "#" + strconv.Itoa(i)
	}
	s.keys[c] = key
	for i := 0; i < pointsPerConsumer; i++ {
		s.points = append(s.points, ringPoint{hash: stickyKeyHash([]byte(key + "_" + strconv.Itoa(i))), key: key, c: c})
	}
	slices.SortFunc(s.points, func(a, b ringPoint) int {
		if a.hash != b.hash {
			return int(a.hash - b.hash)
		}
		return cmpString(a.key, b.key)
	})
	return nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (s *ringSelector) remove(c *consumer) {
	delete(s.keys, c)
	s.points = slices.DeleteFunc(s.points, func(p ringPoint) bool { return p.c == c })
}

func (s *ringSelector) pick(h int32) *consumer {
	if len(s.points) == 0 {
		return nil
	}
	i := sort.Search(len(s.points), func(i int) bool { return s.points[i].hash >= h })
	if i == len(s.points) {
		i = 0
	}
	return s.points[i].c
}

func (s *ringSelector) ranges(c *consumer) []hashRange {
	var out []hashRange
	for i, p := range s.points {
		if p.c != c {
			continue
		}
		var start int32
		if i > 0 {
			start = s.points[i-1].hash + 1
		}
		if start <= p.hash {
			out = append(out, hashRange{start, p.hash})
		}
	}
	// Hashes after the last point wrap to the first point.
	if n := len(s.points); n > 0 && s.points[0].c == c && s.points[n-1].hash < hashRangeSize-1 {
		out = append(out, hashRange{s.points[n-1].hash + 1, hashRangeSize - 1})
	}
	// Merge adjacent arcs.
	sort.Slice(out, func(i, j int) bool { return out[i].start < out[j].start })
	merged := out[:0]
	for _, r := range out {
		if k := len(merged); k > 0 && merged[k-1].end+1 >= r.start {
			merged[k-1].end = max(merged[k-1].end, r.end)
			continue
		}
		merged = append(merged, r)
	}
	return merged
}

// splitSelector is Pulsar's hash range auto-split
// (HashRangeAutoSplitStickyKeyConsumerSelector): the first consumer has
// every hash; each one that joins takes the lower half of the largest
// range (the first of equal ones); one that leaves gives its range to the
// consumer of the range above it, or, if it had the top range, to the one
// below. Which consumer gets a key depends only on the order consumers
// joined and left, as in Pulsar, so tests written against Pulsar's
// assignment see the same one here.
//
// Ranges are kept as Pulsar keeps them, by their upper keys in
// 1..hashRangeSize: a hash h belongs to the first key >= h, so the first
// range is 0..key and each other prev+1..key (the top one ends at
// hashRangeSize-1). Its split arithmetic is Pulsar's, on those keys.
type splitSelector struct {
	bounds []splitBound // ascending keys; the last is hashRangeSize
}

type splitBound struct {
	key int32
	c   *consumer
}

func (s *splitSelector) add(c *consumer) error {
	if c.keyShared.GetMode() != brokerpb.KeySharedMode_AUTO_SPLIT {
		return errorf(ErrConsumerBusy, "the subscription's key_shared consumers split the hash range; this one is sticky")
	}
	if len(s.bounds) == 0 {
		s.bounds = []splitBound{{hashRangeSize, c}}
		return nil
	}
	// The largest range, as Pulsar measures it (key minus the key below,
	// or minus 0); the first of equal ones.
	best, size := 0, int32(0)
	for i, b := range s.bounds {
		if n := b.key - s.lower(i); n > size {
			best, size = i, n
		}
	}
	if size <= 1 {
		return errorf(ErrConsumerBusy, "no hash range left to split for another consumer (%d consumers)", len(s.bounds))
	}
	// The new consumer takes the lower half.
	split := s.bounds[best].key - size>>1
	s.bounds = slices.Insert(s.bounds, best, splitBound{split, c})
	return nil
}

// lower is the key below the i-th (0 for the first).
func (s *splitSelector) lower(i int) int32 {
	if i == 0 {
		return 0
	}
	return s.bounds[i-1].key
}

func (s *splitSelector) remove(c *consumer) {
	i := slices.IndexFunc(s.bounds, func(b splitBound) bool { return b.c == c })
	switch {
	case i < 0:
	case i == len(s.bounds)-1 && i > 0:
		// The top range goes to the consumer below, whose own range
		// joins it.
		s.bounds[i].c = s.bounds[i-1].c
		s.bounds = slices.Delete(s.bounds, i-1, i)
	default:
		// The range goes to the consumer above.
		s.bounds = slices.Delete(s.bounds, i, i+1)
	}
}

func (s *splitSelector) pick(h int32) *consumer {
	i := sort.Search(len(s.bounds), func(i int) bool { return s.bounds[i].key >= h })
	if i == len(s.bounds) {
		return nil
	}
	return s.bounds[i].c
}

func (s *splitSelector) ranges(c *consumer) []hashRange {
	for i, b := range s.bounds {
		if b.c == c {
			start := s.lower(i) + 1
			if i == 0 {
				start = 0
			}
			if end := min(b.key, hashRangeSize-1); start <= end {
				return []hashRange{{start, end}}
			}
			return nil // the top key, split down to past the last hash
		}
	}
	return nil
}
