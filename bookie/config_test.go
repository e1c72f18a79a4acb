package bookie

import (
	"reflect"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/bookie/internal/storage"
)

// Every storage option a bookie's settings reach is mapped from them,
// each to its own field; the others are the server's (filesystem,
// logger, callbacks) or the storage's defaults. A new storage option
// fails this test until it is mapped or listed as one of those.
func TestStorageOptions(t *testing.T) {
	c := DefaultConfig()
	c.DataDir = "/data/b1"
	c.ValueSeparation = true
	c.MemtableSize = 48 << 20
	c.BlockCacheSize = 96 << 20
	c.StorageCompression = true
	c.EntryLog = true
	c.EntryLogFileSize = 256 << 20
	c.EntryLogRecycleFiles = 3
	c.EntryLogCheckpointBytes = 512 << 20
	c.EntryLogDirectIO = true
	c.EntryLogSyncInterval = 3 * time.Millisecond
	c.EntryLogCompactionThreshold = 0.3
	want := storage.Options{
		Dir:                  "/data/b1",
		ValueSeparation:      true,
		MemTableSize:         48 << 20,
		MemtablesHeld:        memtablesHeld,
		CacheSize:            96 << 20,
		Compress:             true,
		EntryLog:             true,
		EntryLogFileSize:     256 << 20,
		EntryLogRecycle:      3,
		CheckpointBytes:      512 << 20,
		EntryLogDirectIO:     true,
		EntryLogSyncInterval: 3 * time.Millisecond,
		CompactionThreshold:  0.3,
	}
	got := c.storageOptions()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("storage options\n got %+v\nwant %+v", got, want)
	}
	notMapped := map[string]bool{
		"FS": true, "Logger": true, "OnSync": true, "OnWriteStall": true, // the server's
		"ValueSeparationMinSize": true, "MaxBatchBytes": true, "CheckpointInterval": true, "CheckpointIndexBytes": true, // defaults
	}
	v := reflect.ValueOf(got)
	for i := range v.NumField() {
		if f := v.Type().Field(i); f.IsExported() && !notMapped[f.Name] && v.Field(i).IsZero() {
			t.Errorf("storage option %s not set from the bookie's settings", f.Name)
		}
	}
	for name := range notMapped {
		if f := v.FieldByName(name); !f.IsValid() || !f.IsZero() {
			t.Errorf("storage option %s: listed as not mapped, but gone or set", name)
		}
	}
	// Each switch reaches its own option only.
	switches := []struct {
		set  func(*Config)
		get  func(storage.Options) bool
		name string
	}{
		{func(c *Config) { c.ValueSeparation = true }, func(o storage.Options) bool { return o.ValueSeparation }, "value separation"},
		{func(c *Config) { c.StorageCompression = true }, func(o storage.Options) bool { return o.Compress }, "compression"},
		{func(c *Config) { c.EntryLog = true }, func(o storage.Options) bool { return o.EntryLog }, "entry log"},
		{func(c *Config) { c.EntryLogDirectIO = true }, func(o storage.Options) bool { return o.EntryLogDirectIO }, "direct I/O"},
	}
	for i, sw := range switches {
		c := DefaultConfig()
		c.ValueSeparation, c.StorageCompression, c.EntryLog, c.EntryLogDirectIO = false, false, false, false
		sw.set(&c)
		o := c.storageOptions()
		for j, other := range switches {
			if got := other.get(o); got != (i == j) {
				t.Errorf("with only %s on, %s is %v", sw.name, other.name, got)
			}
		}
	}
	// --entry-log-compaction-threshold 0 means never, which the storage
	// spells with a negative threshold (its zero is the default).
	c.EntryLogCompactionThreshold = 0
	if got := c.storageOptions().CompactionThreshold; got >= 0 {
		t.Errorf("compaction threshold 0 became %v: the storage would compact at its default", got)
	}
}
