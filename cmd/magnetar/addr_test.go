package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every address flag of every command is checked before anything starts:
// a bad one is an error that names the flag and the value.
func TestBadAddressFlags(t *testing.T) {
	const etcd = "127.0.0.1:1" // not dialed: the checks come first
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"broker", "--metastore", etcd, "--listen", "127.0.0.1"}, `--listen "127.0.0.1": missing port`},
		{[]string{"broker", "--metastore", etcd, "--listen", "127.0.0.1:65536"}, `--listen "127.0.0.1:65536": port 65536 is out of range 0..65535`},
		{[]string{"broker", "--metastore", etcd, "--http", "localhost"}, `--http "localhost": missing port`},
		{[]string{"broker", "--metastore", etcd, "--advertised-address", "127.0.0.1"}, `--advertised-address "127.0.0.1": missing port`},
		{[]string{"broker", "--metastore", etcd, "--advertised-address", "127.0.0.1:0"}, `--advertised-address "127.0.0.1:0": port 0 is out of range 1..65535`},
		{[]string{"broker", "--metastore", etcd, "--advertised-address", ":6650"}, `--advertised-address ":6650": missing host`},
		{[]string{"broker", "--metastore", etcd + ",etcd-1"}, `--metastore "etcd-1": missing port`},
		{[]string{"broker", "--metastore", "http://127.0.0.1"}, `--metastore "http://127.0.0.1": missing port`},
		{[]string{"broker", "--metastore", etcd, "--bookie-addresses", "b1=10.0.0.1"}, `--bookie-addresses b1="10.0.0.1": missing port`},
		{[]string{"broker", "--metastore", etcd, "--listen", "0.0.0.0:6650"}, `--listen "0.0.0.0:6650" binds every interface: set --advertised-address`},
		{[]string{"broker", "--metastore", etcd, "--advertised-http-address", "broker-1"}, `--advertised-http-address "broker-1": missing port`},

		{[]string{"bookie", "--data-dir", dir, "--metastore", etcd, "--listen", "127.0.0.1"}, `--listen "127.0.0.1": missing port`},
		{[]string{"bookie", "--data-dir", dir, "--metastore", etcd, "--advertised-address", "bookie-1"}, `--advertised-address "bookie-1": missing port`},
		{[]string{"bookie", "--data-dir", dir, "--metastore", etcd, "--advertised-address", "bookie-1:99999"}, `--advertised-address "bookie-1:99999": port 99999 is out of range`},
		{[]string{"bookie", "--data-dir", dir, "--metastore", "127.0.0.1:x"}, `--metastore "127.0.0.1:x": port "x" is not a number`},
		{[]string{"bookie", "--data-dir", dir, "--metastore", etcd, "--listen", ":3181"}, `--listen ":3181" binds every interface: set --advertised-address`},
		{[]string{"bookie", "--data-dir", dir, "--metastore", etcd, "--http", "8000"}, `--http "8000": missing port`},
		{[]string{"autorecovery", "--metastore", etcd, "--http", "localhost"}, `--http "localhost": missing port`},
		{[]string{"standalone", "--data-dir", dir, "--advertised-address", "localhost"}, `--advertised-address "localhost": missing port`},

		{[]string{"standalone", "--data-dir", dir, "--metastore-listen", "127.0.0.1"}, `--metastore-listen "127.0.0.1": missing port`},
		{[]string{"standalone", "--data-dir", dir, "--bookie-listen", "127.0.0.1:-1"}, `--bookie-listen "127.0.0.1:-1": port -1 is out of range`},
		{[]string{"standalone", "--data-dir", dir, "--bookies", "3", "--bookie-listen", "127.0.0.1:65534"}, `--bookie-listen "127.0.0.1:65534": bookie 2 would listen on port 65536`},
		{[]string{"standalone", "--data-dir", dir, "--broker-listen", "6650"}, `--broker-listen "6650": missing port`},
		{[]string{"standalone", "--data-dir", dir, "--http", "::1:8080"}, `--http "::1:8080": too many colons`},

		{[]string{"client", "produce", "t", "-m", "x", "--url", "magnetar://127.0.0.1"}, `--url "magnetar://127.0.0.1": broker "127.0.0.1": missing port`},
		{[]string{"client", "consume", "t", "-s", "s", "--url", "magnetar://127.0.0.1:1,127.0.0.1:0"}, `broker "127.0.0.1:0": port 0 is out of range 1..65535`},
		{[]string{"client", "produce", "t", "-m", "x", "--url", "127.0.0.1:6650"}, `--url "127.0.0.1:6650": want magnetar://HOST:PORT`},
		{[]string{"perf", "produce", "t", "--url", "magnetar://127.0.0.1:1,broker-2"}, `--url "magnetar://127.0.0.1:1,broker-2": broker "broker-2": missing port`},
		{[]string{"perf", "consume", "t", "-s", "s", "--url", "magnetar://:6650"}, `broker ":6650": missing host`},

		{[]string{"admin", "brokers", "list", "--admin-url", "127.0.0.1:8080"}, `--admin-url "127.0.0.1:8080": want http://HOST:PORT`},
		{[]string{"admin", "brokers", "list", "--admin-url", "http://127.0.0.1"}, `--admin-url "http://127.0.0.1": missing port`},
		{[]string{"admin", "tenants", "list", "--admin-url", "http://127.0.0.1:1,http://b:0"}, `--admin-url "http://b:0": port 0 is out of range 1..65535`},
	} {
		err := run(context.Background(), io.Discard, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}

// Addresses from the environment and the YAML file are checked like flags.
func TestBadAddressFromEnvAndFile(t *testing.T) {
	t.Run("env", func(t *testing.T) {
		t.Setenv("MAGNETAR_ADVERTISED_ADDRESS", "10.0.0.1")
		err := run(context.Background(), io.Discard, "broker", "--metastore", "127.0.0.1:1")
		if err == nil || !strings.Contains(err.Error(), `--advertised-address "10.0.0.1": missing port`) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("yaml", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "bookie.yaml")
		if err := os.WriteFile(file, []byte("metastore: [127.0.0.1:1]\ndata-dir: "+filepath.ToSlash(t.TempDir())+"\nadvertised-address: bookie-0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		err := run(context.Background(), io.Discard, "bookie", "--config", file)
		if err == nil || !strings.Contains(err.Error(), `--advertised-address "bookie-0": missing port`) {
			t.Fatalf("got %v", err)
		}
	})
}

// The broker's replication flags are checked together, by name.
func TestBadReplicationFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--ensemble", "3", "--write-quorum", "2", "--ack-quorum", "3"},
		{"--ensemble", "1"}, // below the default write quorum of 2
		{"--ensemble", "0", "--write-quorum", "0", "--ack-quorum", "0"},
	} {
		err := run(context.Background(), io.Discard, append([]string{"broker", "--metastore", "127.0.0.1:1"}, args...)...)
		if err == nil || !strings.Contains(err.Error(), "--ensemble") || !strings.Contains(err.Error(), "--write-quorum") || !strings.Contains(err.Error(), "--ack-quorum") {
			t.Errorf("%v: got %v", args, err)
		}
	}
}
