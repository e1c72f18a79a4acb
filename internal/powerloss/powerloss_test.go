package powerloss

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// A power loss keeps what was on disk before and what was synced since,
// and drops what was written but not synced.
func TestSaveAfterCrashKeepsOnlySynced(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub", "old"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	mem, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, sync bool) {
		f, err := mem.Create(filepath.Join(dir, name), vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte(name)); err != nil {
			t.Fatal(err)
		}
		if sync {
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
		}
		f.Close()
	}
	write("synced", true)
	write("unsynced", false)
	d, err := mem.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil { // both names are durable, one body is not
		t.Fatal(err)
	}
	d.Close()

	if err := Save(mem.PowerLoss(), dir); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"sub/old": "old", "synced": "synced", "unsynced": ""} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s after the power loss: %q, want %q", name, got, want)
		}
	}

	// A clean save keeps everything.
	mem2, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := mem2.Create(filepath.Join(dir, "late"), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("late"))
	f.Close()
	if err := Save(mem2.MemFS, dir); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "late")); string(got) != "late" {
		t.Fatalf("clean save lost a file: %q", got)
	}
	if _, err := os.Stat(dir + ".saving"); !os.IsNotExist(err) {
		t.Fatalf("temporary directory left behind: %v", err)
	}
}

// After the power loss no sync completes: a sync would acknowledge data
// the saved state does not have.
func TestNoSyncAfterPowerLoss(t *testing.T) {
	mem, err := Load(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f, err := mem.Create("/late", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	mem.PowerLoss()
	synced := make(chan error, 1)
	go func() { synced <- f.Sync() }()
	select {
	case err := <-synced:
		t.Fatalf("a sync completed after the power loss: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	// Released (the test ends), the sync fails: it never succeeds.
	mem.Release()
	if err := <-synced; !errors.Is(err, ErrPowerOff) {
		t.Fatalf("a frozen sync released: %v, want ErrPowerOff", err)
	}
}
