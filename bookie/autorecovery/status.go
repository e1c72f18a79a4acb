package autorecovery

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/metapb"
)

// The operator's view of the bookies and the admin actions on them,
// served by the broker's admin API (magnetar admin bookies ...).

var (
	// ErrUnknownBookie: no bookie with that id ever registered.
	ErrUnknownBookie = errors.New("autorecovery: unknown bookie")
	// ErrTooFewBookies: a decommission would leave fewer writable
	// bookies than the largest ensemble in use.
	ErrTooFewBookies = errors.New("autorecovery: too few writable bookies would remain")
	// ErrInvalidArgument: a bad request.
	ErrInvalidArgument = errors.New("autorecovery: invalid argument")
	// ErrNotDraining: recommission of a bookie that is not being
	// decommissioned.
	ErrNotDraining = errors.New("autorecovery: bookie is not being decommissioned")
)

// Bookie states.
const (
	StateWritable       = "writable"
	StateReadOnly       = "read-only"
	StateDraining       = "draining"
	StateDecommissioned = "decommissioned"
	StateDown           = "down" // not registered, not (yet) declared lost
	StateLost           = "lost" // declared lost: its copies are re-replicated
)

// BookieStatus is one bookie as the operator sees it.
type BookieStatus struct {
	ID              string   `json:"id"`
	Address         string   `json:"address,omitempty"`
	State           string   `json:"state"`
	ReadOnlyReasons []string `json:"readOnlyReasons,omitempty"`
	Rack            string   `json:"rack,omitempty"`
	HostLabel       string   `json:"hostLabel,omitempty"`
	DiskUsedBytes   uint64   `json:"diskUsedBytes"`
	DiskFreeBytes   uint64   `json:"diskFreeBytes"`
	// Ledgers with copies on the bookie (from the index).
	Ledgers int `json:"ledgers"`
	// UnderReplicated counts the marks naming the bookie: ledgers whose
	// copies on it are to be repaired or moved.
	UnderReplicated  int     `json:"underReplicated"`
	WriteBytesPerSec float64 `json:"writeBytesPerSec"`
}

// Bookies lists every bookie that ever registered (by its cookie) or is
// registered, with its state.
func Bookies(ctx context.Context, store *metastore.Store) ([]BookieStatus, error) {
	byID := map[string]*BookieStatus{}
	get := func(id string) *BookieStatus {
		if b, ok := byID[id]; ok {
			return b
		}
		b := &BookieStatus{ID: id, State: StateDown}
		byID[id] = b
		return b
	}
	if err := store.ListAll(ctx, metastore.BookieCookiesPrefix, metastore.ListOptions{KeysOnly: true}, func(kv metastore.KV) error {
		get(strings.TrimPrefix(kv.Key, metastore.BookieCookiesPrefix))
		return nil
	}); err != nil {
		return nil, err
	}
	if err := store.ListAll(ctx, metastore.BookieLostPrefix, metastore.ListOptions{KeysOnly: true}, func(kv metastore.KV) error {
		get(strings.TrimPrefix(kv.Key, metastore.BookieLostPrefix)).State = StateLost
		return nil
	}); err != nil {
		return nil, err
	}
	if err := store.ListAll(ctx, metastore.BookiesAvailablePrefix, metastore.ListOptions{}, func(kv metastore.KV) error {
		var info metapb.BookieInfo
		if proto.Unmarshal(kv.Value, &info) != nil {
			return nil
		}
		b := get(strings.TrimPrefix(kv.Key, metastore.BookiesAvailablePrefix))
		b.Address, b.Rack, b.HostLabel = info.Address, info.Rack, info.HostLabel
		b.DiskFreeBytes = info.FreeDiskBytes
		if info.TotalDiskBytes > info.FreeDiskBytes {
			b.DiskUsedBytes = info.TotalDiskBytes - info.FreeDiskBytes
		}
		b.WriteBytesPerSec = info.WriteBytesPerSec
		b.ReadOnlyReasons = info.ReadOnlyReasons
		b.State = StateWritable
		if info.ReadOnly {
			b.State = StateReadOnly
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := store.ListAll(ctx, metastore.BookieDrainPrefix, metastore.ListOptions{}, func(kv metastore.KV) error {
		var d metapb.BookieDrain
		if proto.Unmarshal(kv.Value, &d) != nil {
			return nil
		}
		b := get(strings.TrimPrefix(kv.Key, metastore.BookieDrainPrefix))
		b.State = StateDraining
		if d.Done {
			b.State = StateDecommissioned
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := store.ListAll(ctx, metastore.BookieLedgersPrefix, metastore.ListOptions{KeysOnly: true}, func(kv metastore.KV) error {
		if id, _, err := metastore.ParseBookieLedgerKey(kv.Key); err == nil {
			if b, ok := byID[id]; ok {
				b.Ledgers++
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := store.ListAll(ctx, metastore.UnderReplicatedPrefix, metastore.ListOptions{KeysOnly: true}, func(kv metastore.KV) error {
		if _, id, err := metastore.ParseUnderReplicatedKey(kv.Key); err == nil {
			if b, ok := byID[id]; ok {
				b.UnderReplicated++
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	out := make([]BookieStatus, 0, len(byID))
	for _, id := range sortedKeys(byID) {
		out = append(out, *byID[id])
	}
	return out, nil
}

// Mark is one under-replication mark.
type Mark struct {
	Ledger   int64     `json:"ledger"`
	Bookie   string    `json:"bookie"`
	Reason   string    `json:"reason"`
	MarkedBy string    `json:"markedBy"`
	MarkedAt time.Time `json:"markedAt"`
}

// MaxListedMarks bounds UnderReplicated's answer.
const MaxListedMarks = 10000

// UnderReplicated lists the marks, by ledger, at most MaxListedMarks; the
// count is of all of them.
func UnderReplicated(ctx context.Context, store *metastore.Store) (marks []Mark, count int, err error) {
	marks = []Mark{}
	err = store.ListAll(ctx, metastore.UnderReplicatedPrefix, metastore.ListOptions{}, func(kv metastore.KV) error {
		id, b, err := metastore.ParseUnderReplicatedKey(kv.Key)
		if err != nil {
			return nil
		}
		count++
		if len(marks) >= MaxListedMarks {
			return nil
		}
		var u metapb.UnderReplicated
		proto.Unmarshal(kv.Value, &u)
		reason := strings.ToLower(strings.TrimPrefix(u.Reason.String(), "REASON_"))
		marks = append(marks, Mark{Ledger: id, Bookie: b, Reason: reason, MarkedBy: u.MarkedBy, MarkedAt: time.UnixMilli(u.MarkedAtUnixMs).UTC()})
		return nil
	})
	return marks, count, err
}

// Decommission starts draining a bookie: it turns read-only, the auditor
// marks every ledger it holds and workers move the copies elsewhere; once
// it holds none it is decommissioned and may be removed. It is refused
// when the writable bookies left would be fewer than the largest ensemble
// in use. Decommissioning a bookie already draining is not an error.
func Decommission(ctx context.Context, store *metastore.Store, id string) error {
	known, err := knownIDs(ctx, store)
	if err != nil {
		return err
	}
	if !known[id] {
		return fmt.Errorf("%w: %s", ErrUnknownBookie, id)
	}
	kv, err := store.Get(ctx, metastore.BookieDrainKey(id))
	if err == nil {
		var d metapb.BookieDrain
		if proto.Unmarshal(kv.Value, &d) == nil {
			return nil // draining or done already
		}
	} else if !errors.Is(err, metastore.ErrNotFound) {
		return err
	}
	largest, err := largestEnsemble(ctx, store)
	if err != nil {
		return err
	}
	statuses, err := Bookies(ctx, store)
	if err != nil {
		return err
	}
	writable := 0
	for _, b := range statuses {
		if b.ID != id && b.State == StateWritable {
			writable++
		}
	}
	if writable < largest {
		return fmt.Errorf("%w: decommissioning %s leaves %d writable bookies, and ledgers use ensembles of %d", ErrTooFewBookies, id, writable, largest)
	}
	raw, _ := proto.Marshal(&metapb.BookieDrain{StartedAtUnixMs: time.Now().UnixMilli()})
	if _, err := store.Create(ctx, metastore.BookieDrainKey(id), raw); err != nil && !errors.Is(err, metastore.ErrBadVersion) {
		return err
	}
	return nil
}

// Recommission stops a drain: the bookie turns writable again and keeps
// what was not moved yet. A decommissioned bookie can be recommissioned
// too (it holds no ledger then).
func Recommission(ctx context.Context, store *metastore.Store, id string) error {
	if _, err := store.Get(ctx, metastore.BookieDrainKey(id)); errors.Is(err, metastore.ErrNotFound) {
		return fmt.Errorf("%w: %s", ErrNotDraining, id)
	} else if err != nil {
		return err
	}
	return store.Delete(ctx, metastore.BookieDrainKey(id))
}

// ErrNotDecommissioned: Forget of a bookie that still holds data (not
// drained, or lost with copies not yet re-replicated) or is registered.
var ErrNotDecommissioned = errors.New("autorecovery: bookie is not decommissioned and gone")

// Forget removes what the metastore keeps of a bookie that is gone for
// good and holds nothing: decommissioned (its drain done) or declared lost
// with every copy re-replicated; unregistered either way. It deletes its
// cookie, drain record and lost mark. A bookie started again under that
// id is then a new one: it writes a new cookie (or the old one from a
// data directory that was kept) and takes writes. Refused while the
// bookie is registered or the index still names a ledger on it; the
// deletion is one transaction that applies only if the registration is
// still absent and the drain record (or lost mark) unchanged.
func Forget(ctx context.Context, store *metastore.Store, id string) error {
	guard := metastore.BookieDrainKey(id)
	kv, err := store.Get(ctx, guard)
	switch {
	case errors.Is(err, metastore.ErrNotFound):
		guard = metastore.BookieLostKey(id)
		if kv, err = store.Get(ctx, guard); errors.Is(err, metastore.ErrNotFound) {
			return fmt.Errorf("%w: %s was neither decommissioned nor declared lost", ErrNotDecommissioned, id)
		} else if err != nil {
			return err
		}
	case err != nil:
		return err
	default:
		var d metapb.BookieDrain
		if err := proto.Unmarshal(kv.Value, &d); err != nil || !d.Done {
			return fmt.Errorf("%w: %s is still draining", ErrNotDecommissioned, id)
		}
	}
	if _, err := store.Get(ctx, metastore.BookieAvailableKey(id)); err == nil {
		return fmt.Errorf("%w: %s is still registered", ErrNotDecommissioned, id)
	} else if !errors.Is(err, metastore.ErrNotFound) {
		return err
	}
	held, _, err := store.List(ctx, metastore.BookieLedgersPrefix+id+"/", metastore.ListOptions{KeysOnly: true, Limit: 1})
	if err != nil {
		return err
	}
	if len(held) > 0 {
		return fmt.Errorf("%w: ledgers still have copies on %s", ErrNotDecommissioned, id)
	}
	_, err = store.Commit(ctx, nil,
		metastore.CheckOp(metastore.BookieAvailableKey(id), metastore.MustNotExist),
		metastore.CheckOp(guard, kv.ModRevision),
		metastore.DeleteOp(metastore.BookieCookieKey(id), metastore.AnyVersion),
		metastore.DeleteOp(metastore.BookieLostKey(id), metastore.AnyVersion),
		metastore.DeleteOp(metastore.BookieDrainKey(id), metastore.AnyVersion))
	if errors.Is(err, metastore.ErrBadVersion) {
		return fmt.Errorf("%w: %s changed meanwhile (registered again, or recommissioned)", ErrNotDecommissioned, id)
	}
	return err
}

// Draining says whether a bookie is being (or was) decommissioned.
func Draining(ctx context.Context, store *metastore.Store, id string) (bool, error) {
	_, err := store.Get(ctx, metastore.BookieDrainKey(id))
	if errors.Is(err, metastore.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

func knownIDs(ctx context.Context, store *metastore.Store) (map[string]bool, error) {
	out := map[string]bool{}
	for _, prefix := range []string{metastore.BookieCookiesPrefix, metastore.BookiesAvailablePrefix} {
		if err := store.ListAll(ctx, prefix, metastore.ListOptions{KeysOnly: true}, func(kv metastore.KV) error {
			out[strings.TrimPrefix(kv.Key, prefix)] = true
			return nil
		}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// largestEnsemble is the largest ensemble size of any ledger.
func largestEnsemble(ctx context.Context, store *metastore.Store) (int, error) {
	largest := 0
	err := store.ListAll(ctx, metastore.LedgersPrefix, metastore.ListOptions{}, func(kv metastore.KV) error {
		var p metapb.LedgerMetadata
		if proto.Unmarshal(kv.Value, &p) == nil {
			largest = max(largest, int(p.EnsembleSize))
		}
		return nil
	})
	return largest, err
}

// Collector exports the instance's work as Prometheus metrics:
// replication_worker_NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED and
// replication_worker_NUM_ENTRIES_WRITTEN (BookKeeper's names),
// magnetar_autorecovery_bytes_written_total, magnetar_autorecovery_auditor
// (1 on the instance that audits) and, on the auditor only,
// magnetar_autorecovery_under_replicated_marks: the (ledger, bookie)
// copies marked for repair, counted in etcd when scraped.
func (s *Service) Collector() prometheus.Collector { return collector{s} }

type collector struct{ s *Service }

var (
	repairedDesc = prometheus.NewDesc("replication_worker_NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED", "Ledgers whose repair this instance completed.", nil, nil)
	entriesDesc  = prometheus.NewDesc("replication_worker_NUM_ENTRIES_WRITTEN", "Entries this instance copied.", nil, nil)
	bytesDesc    = prometheus.NewDesc("magnetar_autorecovery_bytes_written_total", "Payload bytes this instance copied.", nil, nil)
	auditorDesc  = prometheus.NewDesc("magnetar_autorecovery_auditor", "1 while this instance is the auditor.", nil, nil)
	marksDesc    = prometheus.NewDesc("magnetar_autorecovery_under_replicated_marks", "Copies (ledger, bookie) marked under-replicated, waiting for repair (auditor only).", nil, nil)
)

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{repairedDesc, entriesDesc, bytesDesc, auditorDesc, marksDesc} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	ch <- prometheus.MustNewConstMetric(repairedDesc, prometheus.CounterValue, float64(s.repaired.Load()))
	ch <- prometheus.MustNewConstMetric(entriesDesc, prometheus.CounterValue, float64(s.copiedEntries.Load()))
	ch <- prometheus.MustNewConstMetric(bytesDesc, prometheus.CounterValue, float64(s.copiedBytes.Load()))
	auditor := s.auditor.Load()
	ch <- prometheus.MustNewConstMetric(auditorDesc, prometheus.GaugeValue, b2f(auditor))
	if !auditor {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, 2*time.Second)
	defer cancel()
	n := 0
	err := s.store.ListAll(ctx, metastore.UnderReplicatedPrefix, metastore.ListOptions{KeysOnly: true}, func(metastore.KV) error {
		n++
		return nil
	})
	if err != nil {
		ch <- prometheus.NewInvalidMetric(marksDesc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(marksDesc, prometheus.GaugeValue, float64(n))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
