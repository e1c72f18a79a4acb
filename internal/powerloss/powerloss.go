// Package powerloss lets a real bookie process lose power. The process
// keeps its data directory in Pebble's crashable in-memory filesystem,
// loaded from disk at start. On a simulated power loss only what was
// synced is written back to disk (the page cache is "lost") and the
// process exits at once; a clean stop writes everything back. Killing a
// process never tests fsync, since the kernel keeps its page cache; this
// does. It exists for the e2e fault suite (`magnetar bookie
// --simulate-power-loss`), not for production.
package powerloss

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// FS is a crashable in-memory filesystem whose power can be cut at one
// instant: PowerLoss lets the syncs in progress finish, blocks every later
// one for good (so nothing synced after the instant is acknowledged), and
// returns what was synced.
type FS struct {
	*vfs.MemFS
	// mu is held shared by each sync for its whole length and exclusively
	// by PowerLoss to set frozen.
	mu     sync.RWMutex
	frozen bool
	// released is closed by Release: the frozen syncs return.
	released    chan struct{}
	releaseOnce sync.Once
}

// ErrPowerOff is what a sync frozen by PowerLoss returns once Release
// lets it go: it never completed.
var ErrPowerOff = errors.New("powerloss: the power is off: sync not done")

// Release lets the syncs frozen by PowerLoss return ErrPowerOff, so that
// their goroutines end (a test; a process about to exit need not).
func (fs *FS) Release() {
	fs.releaseOnce.Do(func() { close(fs.released) })
}

// PowerLoss returns the filesystem as it would be after a power loss now;
// every sync from now on blocks forever.
func (fs *FS) PowerLoss() *vfs.MemFS {
	fs.mu.Lock()
	fs.frozen = true
	fs.mu.Unlock()
	return fs.MemFS.CrashClone(vfs.CrashCloneCfg{})
}

func (fs *FS) sync(do func() error) error {
	fs.mu.RLock()
	if fs.frozen {
		fs.mu.RUnlock()
		<-fs.released // the power is off: this sync never completes
		return ErrPowerOff
	}
	defer fs.mu.RUnlock()
	return do()
}

func (fs *FS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return file{File: f, fs: fs}, nil
}

// Create, Open, OpenReadWrite, OpenDir and ReuseForWrite hand out files
// whose syncs PowerLoss can stop.
func (fs *FS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.wrap(fs.MemFS.Create(name, c))
}

func (fs *FS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	return fs.wrap(fs.MemFS.Open(name, opts...))
}

func (fs *FS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return fs.wrap(fs.MemFS.OpenReadWrite(name, c, opts...))
}

func (fs *FS) OpenDir(name string) (vfs.File, error) { return fs.wrap(fs.MemFS.OpenDir(name)) }

func (fs *FS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.wrap(fs.MemFS.ReuseForWrite(oldname, newname, c))
}

type file struct {
	vfs.File
	fs *FS
}

func (f file) Sync() error     { return f.fs.sync(f.File.Sync) }
func (f file) SyncData() error { return f.fs.sync(f.File.SyncData) }
func (f file) SyncTo(length int64) (fullSync bool, err error) {
	err = f.fs.sync(func() error {
		var e error
		fullSync, e = f.File.SyncTo(length)
		return e
	})
	return fullSync, err
}

// Load returns a crashable in-memory filesystem holding a synced copy of
// dir (empty if dir does not exist), at the same path.
func Load(dir string) (*FS, error) {
	mem := vfs.NewCrashableMem()
	dir = filepath.Clean(dir)
	if err := mem.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := copyTree(vfs.Default, dir, mem, dir); err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("powerloss: load %s: %w", dir, err)
	}
	if err := syncDirs(mem, dir); err != nil {
		return nil, err
	}
	return &FS{MemFS: mem, released: make(chan struct{})}, nil
}

// Save replaces dir on disk with the files under dir in mem. It writes a
// sibling directory first and renames it into place.
func Save(mem *vfs.MemFS, dir string) error {
	dir = filepath.Clean(dir)
	tmp := dir + ".saving"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	if err := copyTree(mem, dir, vfs.Default, tmp); err != nil {
		return fmt.Errorf("powerloss: save %s: %w", dir, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

// copyTree copies the files under src on from to dst on to. Each copied
// file is synced.
func copyTree(from vfs.FS, src string, to vfs.FS, dst string) error {
	names, err := from.List(src)
	if err != nil {
		return err
	}
	for _, name := range names {
		s, d := from.PathJoin(src, name), to.PathJoin(dst, name)
		st, err := from.Stat(s)
		if err != nil {
			return err
		}
		if st.IsDir() {
			if err := to.MkdirAll(d, 0o755); err != nil {
				return err
			}
			if err := copyTree(from, s, to, d); err != nil {
				return err
			}
			continue
		}
		if err := copyFile(from, s, to, d); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(from vfs.FS, src string, to vfs.FS, dst string) error {
	in, err := from.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := to.Create(dst, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// syncDirs syncs dir and every directory under it (and its parents), so
// that the loaded files survive a crash of the in-memory filesystem.
func syncDirs(fs vfs.FS, dir string) error {
	names, err := fs.List(dir)
	if err != nil {
		return err
	}
	for _, name := range names {
		p := fs.PathJoin(dir, name)
		if st, err := fs.Stat(p); err == nil && st.IsDir() {
			if err := syncDirs(fs, p); err != nil {
				return err
			}
		}
	}
	for d := dir; ; d = fs.PathDir(d) {
		f, err := fs.OpenDir(d)
		if err != nil {
			return err
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return err
		}
		if fs.PathDir(d) == d {
			return nil
		}
	}
}
