package testutil

import (
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// StallFS is the default filesystem with writes that can be held: while
// a directory is stalled, writes to log files under it (Pebble's WAL, a
// bookie's entry log) wait until Release. A disk that hangs, for a
// bookie started with bookie.WithFS.
type StallFS struct {
	vfs.FS
	mu      sync.Mutex
	dir     string        // stalled: writes under it wait; "" none
	release chan struct{} // closed by Release
	held    int           // writes waiting
}

// NewStallFS returns a StallFS with nothing stalled.
func NewStallFS() *StallFS {
	f := &StallFS{}
	f.FS = errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind != errorfs.OpFileWrite && op.Kind != errorfs.OpFileWriteAt || !strings.HasSuffix(op.Path, ".log") {
			return nil
		}
		f.mu.Lock()
		dir, release := f.dir, f.release
		f.mu.Unlock()
		if dir != "" && strings.HasPrefix(op.Path, dir+"/") {
			f.mu.Lock()
			f.held++
			f.mu.Unlock()
			<-release
			f.mu.Lock()
			f.held--
			f.mu.Unlock()
		}
		return nil
	}))
	return f
}

// Stall holds the writes under dir from now on, until Release (one
// directory at a time: those held under another are let go).
func (f *StallFS) Stall(dir string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dir != "" {
		close(f.release)
	}
	f.dir, f.release = dir, make(chan struct{})
}

// Held is how many writes are waiting.
func (f *StallFS) Held() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.held
}

// Release lets the held writes go, and stalls nothing more.
func (f *StallFS) Release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dir != "" {
		close(f.release)
		f.dir = ""
	}
}
