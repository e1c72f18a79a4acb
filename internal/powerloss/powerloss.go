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
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Load returns a crashable in-memory filesystem holding a synced copy of
// dir (empty if dir does not exist), at the same path.
func Load(dir string) (*vfs.MemFS, error) {
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
	return mem, nil
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
