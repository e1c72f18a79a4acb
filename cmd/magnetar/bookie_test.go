package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/internal/standalone"
)

// Every field of each server's configuration has a flag named by its
// mapstructure tag (embedded ",squash" structs' fields too), so that flags,
// MAGNETAR_* variables and the YAML file can all set it.
func TestServerFlagsCoverConfig(t *testing.T) {
	for _, tc := range []struct {
		cmd *cobra.Command
		cfg any
	}{
		{newBookieCmd(&globals{}), bookie.Config{}},
		{newBrokerCmd(&globals{}), broker.Config{}},
		{newStandaloneCmd(&globals{}), standalone.Config{}},
	} {
		flags := tc.cmd.Flags()
		var check func(typ reflect.Type)
		check = func(typ reflect.Type) {
			for i := 0; i < typ.NumField(); i++ {
				f := typ.Field(i)
				name := f.Tag.Get("mapstructure")
				switch {
				case name == ",squash":
					check(f.Type)
				case name == "":
					t.Errorf("%s.%s has no mapstructure tag", typ, f.Name)
				case flags.Lookup(name) == nil:
					t.Errorf("%s.%s has no --%s flag on %q", typ, f.Name, name, tc.cmd.Name())
				}
			}
		}
		check(reflect.TypeOf(tc.cfg))
	}
}

// The disk and placement settings are read from flags, the environment
// and the YAML file alike.
func TestBookieDiskAndPlacementSettings(t *testing.T) {
	const etcd = "127.0.0.1:1"
	load := func(t *testing.T, path string, args ...string) bookie.Config {
		t.Helper()
		cmd := newBookieCmd(&globals{})
		if err := cmd.Flags().Parse(append([]string{"--metastore", etcd}, args...)); err != nil {
			t.Fatal(err)
		}
		cfg, err := loadBookieConfig(cmd.Flags(), path)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	if cfg := load(t, ""); cfg.DiskUsageThreshold != 0.90 || cfg.DiskUsageLowThreshold != 0.85 || cfg.DiskCheckInterval != time.Second || cfg.Rack != "" || cfg.HostLabel != "" || !cfg.EntryLog || cfg.EntryLogCompactionThreshold != 0.5 || !cfg.EntryLogDirectIO || cfg.EntryLogRecycleFiles != 0 || cfg.EntryLogCheckpointBytes != 64<<20 || cfg.EntryLogSyncInterval != 0 {
		t.Fatalf("defaults: %+v", cfg)
	}
	t.Run("flags", func(t *testing.T) {
		cfg := load(t, "", "--disk-usage-threshold", "0.95", "--disk-usage-low-threshold", "0.9", "--disk-check-interval", "3s", "--rack", "zone-a", "--host-label", "node-1", "--max-inflight-bytes", "67108864",
			"--memtable-size", "16MiB", "--block-cache-size", "33554432", "--entry-log=false", "--entry-log-file-size", "64MiB", "--entry-log-compaction-threshold", "0.25", "--entry-log-direct-io=false", "--entry-log-recycle-files", "3", "--entry-log-checkpoint-bytes", "256MiB", "--entry-log-sync-interval", "4ms")
		if cfg.DiskUsageThreshold != 0.95 || cfg.DiskUsageLowThreshold != 0.9 || cfg.DiskCheckInterval != 3*time.Second || cfg.Rack != "zone-a" || cfg.HostLabel != "node-1" || cfg.MaxInflightBytes != 64<<20 ||
			cfg.MemtableSize != 16<<20 || cfg.BlockCacheSize != 32<<20 || cfg.EntryLog || cfg.EntryLogFileSize != 64<<20 || cfg.EntryLogCompactionThreshold != 0.25 || cfg.EntryLogDirectIO || cfg.EntryLogRecycleFiles != 3 || cfg.EntryLogCheckpointBytes != 256<<20 || cfg.EntryLogSyncInterval != 4*time.Millisecond {
			t.Fatalf("%+v", cfg)
		}
	})
	t.Run("env", func(t *testing.T) {
		t.Setenv("MAGNETAR_DISK_USAGE_THRESHOLD", "0.8")
		t.Setenv("MAGNETAR_DISK_USAGE_LOW_THRESHOLD", "0.7")
		t.Setenv("MAGNETAR_RACK", "zone-b")
		t.Setenv("MAGNETAR_HOST_LABEL", "node-2")
		t.Setenv("MAGNETAR_MEMTABLE_SIZE", "8MiB")
		t.Setenv("MAGNETAR_ENTRY_LOG", "false")
		t.Setenv("MAGNETAR_ENTRY_LOG_DIRECT_IO", "false")
		t.Setenv("MAGNETAR_ENTRY_LOG_RECYCLE_FILES", "5")
		t.Setenv("MAGNETAR_ENTRY_LOG_CHECKPOINT_BYTES", "2GiB")
		t.Setenv("MAGNETAR_ENTRY_LOG_SYNC_INTERVAL", "2ms")
		cfg := load(t, "")
		if cfg.DiskUsageThreshold != 0.8 || cfg.DiskUsageLowThreshold != 0.7 || cfg.Rack != "zone-b" || cfg.HostLabel != "node-2" || cfg.MemtableSize != 8<<20 || cfg.BlockCacheSize != 64<<20 || cfg.EntryLog || cfg.EntryLogFileSize != 128<<20 || cfg.EntryLogDirectIO || cfg.EntryLogRecycleFiles != 5 || cfg.EntryLogCheckpointBytes != 2<<30 || cfg.EntryLogSyncInterval != 2*time.Millisecond {
			t.Fatalf("%+v", cfg)
		}
	})
	t.Run("yaml", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "bookie.yaml")
		body := "disk-usage-threshold: 0.97\ndisk-usage-low-threshold: 0.5\nrack: zone-c\nhost-label: node-3\nmemtable-size: 4MiB\nblock-cache-size: 2097152\nentry-log: false\nentry-log-file-size: 1GiB\nentry-log-direct-io: false\nentry-log-recycle-files: 7\nentry-log-checkpoint-bytes: 512MiB\nentry-log-sync-interval: 1500us\n"
		if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg := load(t, file)
		if cfg.DiskUsageThreshold != 0.97 || cfg.DiskUsageLowThreshold != 0.5 || cfg.Rack != "zone-c" || cfg.HostLabel != "node-3" || cfg.MemtableSize != 4<<20 || cfg.BlockCacheSize != 2<<20 || cfg.EntryLog || cfg.EntryLogFileSize != 1<<30 || cfg.EntryLogDirectIO || cfg.EntryLogRecycleFiles != 7 || cfg.EntryLogCheckpointBytes != 512<<20 || cfg.EntryLogSyncInterval != 1500*time.Microsecond {
			t.Fatalf("%+v", cfg)
		}
	})
}

// A bad disk threshold or label, from a flag, the environment or the YAML
// file, is an error that names the setting, before anything starts.
func TestBadDiskSettingsAreClearErrors(t *testing.T) {
	const etcd = "127.0.0.1:1" // not dialed: the checks come first
	dir := t.TempDir()
	base := []string{"bookie", "--metastore", etcd, "--data-dir", dir}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--disk-usage-threshold", "1.5"}, "--disk-usage-threshold 1.5 must be in (0, 1]"},
		{[]string{"--disk-usage-threshold", "0"}, "--disk-usage-threshold 0 must be in (0, 1]"},
		{[]string{"--disk-usage-threshold", "NaN"}, "--disk-usage-threshold NaN must be in (0, 1]"},
		{[]string{"--disk-usage-low-threshold", "-0.5"}, "--disk-usage-low-threshold -0.5 must be in (0, 1]"},
		{[]string{"--disk-usage-low-threshold", "0.95"}, "--disk-usage-low-threshold 0.95 must be below --disk-usage-threshold 0.9"},
		{[]string{"--disk-usage-threshold", "0.8", "--disk-usage-low-threshold", "0.8"}, "--disk-usage-low-threshold 0.8 must be below --disk-usage-threshold 0.8"},
		{[]string{"--disk-usage-threshold", "lots"}, `invalid argument "lots" for "--disk-usage-threshold"`},
		{[]string{"--disk-check-interval", "0s"}, "--disk-check-interval 0s must be positive"},
		{[]string{"--rack", "rack 1"}, `--rack "rack 1": contains ' '`},
		{[]string{"--host-label", "a\tb"}, `--host-label "a\tb": contains '\t'`},
		{[]string{"--memtable-size", "512KiB"}, "--memtable-size 512KiB: must be in 1MiB..1GiB"},
		{[]string{"--memtable-size", "2GiB"}, "--memtable-size 2GiB: must be in 1MiB..1GiB"},
		{[]string{"--block-cache-size", "0"}, "--block-cache-size 0: must be at least 1MiB"},
		{[]string{"--entry-log-file-size", "64KiB"}, "--entry-log-file-size 64KiB: must be in 1MiB..4GiB"},
		{[]string{"--entry-log-checkpoint-bytes", "1MiB"}, "--entry-log-checkpoint-bytes 1MiB: must be in 16MiB..64GiB"},
		{[]string{"--entry-log-checkpoint-bytes", "65GiB"}, "--entry-log-checkpoint-bytes 65GiB: must be in 16MiB..64GiB"},
		{[]string{"--entry-log-recycle-files", "65"}, "--entry-log-recycle-files 65: must be in 0..64"},
		{[]string{"--entry-log-sync-interval", "2s"}, "--entry-log-sync-interval 2s: must be in 0..1s"},
		{[]string{"--entry-log-sync-interval", "-1ms"}, "--entry-log-sync-interval -1ms: must be in 0..1s"},
		{[]string{"--entry-log-sync-interval", "4"}, `invalid argument "4" for "--entry-log-sync-interval"`},
		{[]string{"--entry-log-recycle-files", "-1"}, "--entry-log-recycle-files -1: must be in 0..64"},
		{[]string{"--entry-log-compaction-threshold", "1"}, "--entry-log-compaction-threshold 1: must be in [0, 1)"},
		{[]string{"--entry-log-compaction-threshold", "NaN"}, "--entry-log-compaction-threshold NaN: must be in [0, 1)"},
		{[]string{"--block-cache-size", "lots"}, `invalid argument "lots" for "--block-cache-size"`},
	} {
		err := run(context.Background(), io.Discard, append(base, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error with %q", tc.args, err, tc.want)
		}
	}
	t.Run("env", func(t *testing.T) {
		t.Setenv("MAGNETAR_DISK_USAGE_LOW_THRESHOLD", "0.99")
		err := run(context.Background(), io.Discard, base...)
		if err == nil || !strings.Contains(err.Error(), "--disk-usage-low-threshold 0.99 must be below --disk-usage-threshold 0.9") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("yaml", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "bookie.yaml")
		if err := os.WriteFile(file, []byte("disk-usage-threshold: 2\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		err := run(context.Background(), io.Discard, append(base, "--config", file)...)
		if err == nil || !strings.Contains(err.Error(), "--disk-usage-threshold 2 must be in (0, 1]") {
			t.Fatalf("got %v", err)
		}
	})
}
