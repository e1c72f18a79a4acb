package bookie

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/magnetar-io/magnetar/bookie/wire"
)

// Reasons for a bookie to be read-only. The read-only state is a set of
// reasons: the bookie is read-only while any is set. Other components add
// their own with SetReadOnly (decommissioning sets "draining").
const (
	// ReadOnlyDisk: disk usage went above Config.DiskUsageThreshold. Set
	// and cleared by the bookie's disk check (cleared below
	// Config.DiskUsageLowThreshold).
	ReadOnlyDisk = "disk"
	// ReadOnlyNoSpace: a write failed for lack of space (ENOSPC). The
	// storage refuses every write from then on, recovery adds included,
	// until the bookie is restarted; reads go on. Never cleared.
	ReadOnlyNoSpace = "no-space"
)

// A read-only bookie:
//
//   - registers with read_only set and its reasons, so that placement
//     picks it neither for new ledgers nor as a replacement;
//   - refuses normal adds with wire.ErrReadOnly (BOOKIE_READ_ONLY), which
//     ledger writers treat as a failed bookie: they replace it by an
//     ensemble change;
//   - accepts recovery adds (AddEntryRequest.recovery: ledger recovery and
//     re-replication need them) while the storage has space, fences and
//     explicit LACs (small, and recovery needs fences);
//   - serves reads.

// DiskUsage describes the filesystem of the bookie's data directory, in
// bytes.
type DiskUsage struct {
	// Total is the filesystem's size.
	Total uint64
	// Used is what is in use (by anyone).
	Used uint64
	// Avail is what the bookie may still write (root's reserve excluded).
	Avail uint64
}

// Fraction is the share in use as df counts it: used / (used + avail).
// 0 when nothing is known.
func (u DiskUsage) Fraction() float64 {
	if u.Used+u.Avail == 0 {
		return 0
	}
	return float64(u.Used) / float64(u.Used+u.Avail)
}

// DiskUsageFunc reports the usage of the filesystem holding dir.
type DiskUsageFunc func(dir string) (DiskUsage, error)

// StatfsDiskUsage is the default DiskUsageFunc.
func StatfsDiskUsage(dir string) (DiskUsage, error) {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		return DiskUsage{}, fmt.Errorf("statfs %s: %w", dir, err)
	}
	bs := uint64(fs.Bsize)
	return DiskUsage{
		Total: fs.Blocks * bs,
		Used:  (fs.Blocks - fs.Bfree) * bs,
		Avail: fs.Bavail * bs,
	}, nil
}

// WithDiskUsage replaces how the bookie measures its disk (tests).
func WithDiskUsage(fn DiskUsageFunc) Option { return func(o *options) { o.diskUsage = fn } }

// SetReadOnly adds (on) or removes (!on) a reason for the bookie to be
// read-only, and publishes the registration at once when the set changed.
// The bookie is read-only while any reason is set. Safe for concurrent
// use. Removing ReadOnlyNoSpace does not make the storage writable again.
func (s *Server) SetReadOnly(reason string, on bool) {
	s.ro.Lock()
	has := slices.Contains(s.ro.reasons, reason)
	if has == on {
		s.ro.Unlock()
		return
	}
	if on {
		s.ro.reasons = append(s.ro.reasons, reason)
		slices.Sort(s.ro.reasons)
	} else {
		s.ro.reasons = slices.DeleteFunc(s.ro.reasons, func(r string) bool { return r == reason })
	}
	reasons := slices.Clone(s.ro.reasons)
	if len(reasons) == 0 {
		s.ro.refusal.Store(nil)
	} else {
		err := fmt.Errorf("%w: bookie %s refuses normal adds (%s)", wire.ErrReadOnly, s.id, strings.Join(reasons, ", "))
		s.ro.refusal.Store(&err)
	}
	s.ro.Unlock()
	if on {
		s.log.Warn("bookie read-only", zap.String("reason", reason), zap.Strings("reasons", reasons))
	} else {
		s.log.Info("read-only reason cleared", zap.String("reason", reason), zap.Strings("reasons", reasons))
	}
	select {
	case s.republish <- struct{}{}:
	default:
	}
}

// ReadOnly returns the reasons the bookie is read-only, sorted; empty when
// it is writable.
func (s *Server) ReadOnly() []string {
	s.ro.Lock()
	defer s.ro.Unlock()
	return slices.Clone(s.ro.reasons)
}

// refuseNormalAdd is the error a normal add gets while the bookie is
// read-only, nil while it is writable.
func (s *Server) refuseNormalAdd() error {
	if p := s.ro.refusal.Load(); p != nil {
		return *p
	}
	return nil
}

// diskLoop checks disk usage every DiskCheckInterval, and watches the
// storage for a write that failed for lack of space. It is the only caller
// of the DiskUsageFunc once the server runs; the registration reports its
// last measure.
func (s *Server) diskLoop() {
	defer s.wg.Done()
	tick := time.NewTicker(s.cfg.DiskCheckInterval)
	defer tick.Stop()
	noSpace := s.db.NoSpace()
	for {
		select {
		case <-s.stop:
			return
		case <-noSpace:
			noSpace = nil
			s.SetReadOnly(ReadOnlyNoSpace, true)
		case <-tick.C:
			s.checkDisk()
		}
	}
}

// checkDisk turns the bookie read-only above DiskUsageThreshold and
// writable below DiskUsageLowThreshold; in between nothing changes.
func (s *Server) checkDisk() {
	u, err := s.diskUsage(s.cfg.DataDir)
	if err != nil {
		s.log.Warn("disk usage unknown", zap.Error(err))
		return
	}
	s.lastUsage.Store(&u)
	f := u.Fraction()
	switch {
	case f > s.cfg.DiskUsageThreshold:
		if !slices.Contains(s.ReadOnly(), ReadOnlyDisk) {
			s.log.Warn("disk usage above the threshold: refusing normal adds", zap.Float64("usage", f), zap.Float64("threshold", s.cfg.DiskUsageThreshold), zap.Uint64("avail-bytes", u.Avail))
		}
		s.SetReadOnly(ReadOnlyDisk, true)
	case f < s.cfg.DiskUsageLowThreshold:
		if slices.Contains(s.ReadOnly(), ReadOnlyDisk) {
			s.log.Info("disk usage below the low threshold: writable again", zap.Float64("usage", f), zap.Float64("low-threshold", s.cfg.DiskUsageLowThreshold))
		}
		s.SetReadOnly(ReadOnlyDisk, false)
	}
}

// state is the bookie's state, "writable", "read-only" or "draining",
// with the read-only reasons.
func (s *Server) state() (string, []string) {
	reasons := s.ReadOnly()
	switch {
	case slices.Contains(reasons, ReadOnlyDraining):
		return "draining", reasons
	case len(reasons) > 0:
		return "read-only", reasons
	}
	return "writable", reasons
}
