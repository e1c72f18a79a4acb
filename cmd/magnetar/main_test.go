package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/internal/testutil"
)

// run executes the CLI in-process.
func run(ctx context.Context, stdout io.Writer, args ...string) error {
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(io.Discard)
	return root.ExecuteContext(ctx)
}

func TestVersion(t *testing.T) {
	var out strings.Builder
	if err := run(context.Background(), &out, "version"); err != nil || !strings.HasPrefix(out.String(), "magnetar ") {
		t.Fatalf("version: %q %v", out.String(), err)
	}
}

func TestBadConfigurationIsAClearError(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bookie"}, "no metastore"},
		{[]string{"bookie", "--metastore", "127.0.0.1:1", "--max-entry-size", "0"}, "max entry size"},
		{[]string{"bookie", "--metastore", "127.0.0.1:1", "--log-level", "loud"}, "log level"},
		{[]string{"broker", "--metastore", "127.0.0.1:1", "--dedup-producer-inactivity-timeout", "0s"}, "--dedup-producer-inactivity-timeout 0s: must be positive"},
		{[]string{"broker", "--metastore", "127.0.0.1:1", "--shutdown-timeout", "0s"}, "--shutdown-timeout 0s must be positive"},
		{[]string{"standalone", "--bookies", "0"}, "bookies 0"},
		{[]string{"standalone", "--lost-bookie-recovery-delay", "-1s"}, "--lost-bookie-recovery-delay -1s is negative"},
		{[]string{"bookie", "--metastore", "127.0.0.1:1", "--lost-bookie-recovery-delay", "-1s"}, "lost bookie recovery delay -1s is negative"},
		{[]string{"bookie", "--metastore", "127.0.0.1:1", "--autorecovery=maybe"}, "invalid argument \"maybe\" for \"--autorecovery\""},
		{[]string{"autorecovery"}, "no metastore"},
		{[]string{"autorecovery", "--metastore", "127.0.0.1:1", "--lost-bookie-recovery-delay", "-5s"}, "--lost-bookie-recovery-delay -5s is negative"},
		{[]string{"autorecovery", "--metastore", "127.0.0.1:1", "--rereplication-max-bytes-per-sec", "-1"}, "is negative"},
		{[]string{"autorecovery", "--metastore", "localhost"}, "--metastore \"localhost\""},
		{[]string{"autorecovery", "--metastor", "127.0.0.1:1"}, "unknown flag: --metastor"},
		{[]string{"standalone", "--config", "/nonexistent.yaml"}, "config file"},
		{[]string{"standalone", "extra-arg"}, "unknown command"},
		{[]string{"standalone", "--memory-budget", "12parsecs"}, `invalid argument "12parsecs" for "--memory-budget"`},
		{[]string{"standalone", "--memory-budget", "64MiB"}, "--memory-budget 64MiB: must be in 128MiB..1TiB"},
		{[]string{"standalone", "--entry-log-checkpoint-bytes", "1MiB"}, "--entry-log-checkpoint-bytes 1MiB: must be in 16MiB..64GiB"},
		{[]string{"standalone", "--entry-log-sync-interval", "5s"}, "--entry-log-sync-interval 5s: must be in 0..1s"},
		{[]string{"standalone", "--entry-log-recycle-files", "65"}, "--entry-log-recycle-files 65: must be in 0..64"},
		{[]string{"standalone", "--local-bookies=maybe"}, `invalid argument "maybe" for "--local-bookies"`},
		{[]string{"standalone", "--authentication-enabled"}, "needs a token key (--token-secret-key or --token-public-key) or client certificates"},
		{[]string{"standalone", "--tls-cert-file", "c.pem"}, "both --tls-cert-file and --tls-key-file"},
		{[]string{"client", "produce", "t", "-m", "x", "--auth-tls-cert-file", "c.pem"}, "both --auth-tls-cert-file and --auth-tls-key-file"},
		{[]string{"broker", "--metastore", "127.0.0.1:1", "--token-secret-key", "k"}, "without --authentication-enabled"},
		{[]string{"broker", "--metastore", "127.0.0.1:1", "--authentication-enabled", "--token-secret-key", "/nonexistent/key"}, "no such file"},
		{[]string{"client", "produce", "t", "-m", "x", "--auth-token", "a", "--auth-token-file", "f"}, "not both"},
		{[]string{"client", "consume", "t", "-s", "s", "-p", "first"}, `-p "first": want earliest or latest`},
		{[]string{"client", "consume", "t", "-s", "s", "-t", "exclusiv"}, `subscription type "exclusiv": want exclusive, failover, shared or key_shared`},
	} {
		err := run(context.Background(), io.Discard, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error about %q", tc.args, err, tc.want)
		}
	}
	t.Setenv("MAGNETAR_MEMORY_BUDGET", "64MiB")
	if err := run(context.Background(), io.Discard, "standalone"); err == nil || !strings.Contains(err.Error(), "--memory-budget 64MiB: must be in 128MiB..1TiB") {
		t.Errorf("MAGNETAR_MEMORY_BUDGET=64MiB: got %v", err)
	}
}

// `magnetar standalone` starts, says where it listens, and stops cleanly
// when interrupted.
func TestStandaloneCommand(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, done := startStandalone(t, ctx, "--bookies", "2", "--memory-budget", "1GiB")

	if !strings.Contains(out, "clients           magnetar://127.0.0.1:") || !strings.Contains(out, "admin (HTTP)      http://127.0.0.1:") ||
		!strings.Contains(out, "Pulsar clients    pulsar://127.0.0.1:") ||
		!strings.Contains(out, "metastore (etcd)  127.0.0.1:") || strings.Count(out, "bookie            127.0.0.1:") != 2 ||
		!strings.Contains(out, "memory budget     1GiB: broker cache 128MiB + 2 bookie(s) x (memtables 96MiB + block cache 24MiB + in-flight adds 48MiB = 168MiB) = 464MiB configured") {
		t.Fatalf("standalone printed:\n%s", out)
	}
	url := "magnetar://" + field(t, out, "clients           magnetar://")
	admin := "http://" + field(t, out, "admin (HTTP)      http://")

	// What the README shows a new user, end to end.
	var buf strings.Builder
	if err := run(ctx, &buf, "client", "produce", "first", "-m", "hello", "-n", "3", "-k", "k1", "--url", url); err != nil {
		t.Fatalf("client produce: %v", err)
	}
	if strings.Count(buf.String(), "sent ") != 3 {
		t.Fatalf("client produce printed %q", buf.String())
	}
	buf.Reset()
	if err := run(ctx, &buf, "client", "consume", "first", "-s", "sub", "-p", "earliest", "-n", "3", "--url", url); err != nil {
		t.Fatalf("client consume: %v", err)
	}
	if got := strings.Split(strings.TrimSpace(buf.String()), "\n"); len(got) != 3 || !strings.HasPrefix(got[0], "hello\t") || !strings.HasSuffix(got[2], "\tk1") {
		t.Fatalf("client consume printed %q", buf.String())
	}
	// Every subscription type from the CLI; the last as Pulsar's
	// pulsar-client spells its type and position.
	for _, tc := range []struct{ typ, pos string }{{"failover", "earliest"}, {"shared", "earliest"}, {"Key_Shared", "Earliest"}} {
		typ, pos := tc.typ, tc.pos
		buf.Reset()
		if err := run(ctx, &buf, "client", "consume", "first", "-s", "sub-"+typ, "-t", typ, "-p", pos, "-n", "3", "--url", url); err != nil {
			t.Fatalf("client consume -t %s: %v", typ, err)
		}
		if got := strings.Split(strings.TrimSpace(buf.String()), "\n"); len(got) != 3 || !strings.HasPrefix(got[0], "hello\t") {
			t.Fatalf("client consume -t %s printed %q", typ, buf.String())
		}
	}
	buf.Reset()
	if err := run(ctx, &buf, "admin", "topics", "stats", "first", "--admin-url", admin); err != nil {
		t.Fatalf("admin topics stats: %v", err)
	}
	if strings.Count(buf.String(), `"msgBacklog": 0`) != 4 {
		t.Fatalf("the consumed messages are still in the backlog:\n%s", buf.String())
	}
	if err := run(ctx, io.Discard, "admin", "topics", "stats", "no-such-topic", "--admin-url", admin); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("stats of a missing topic: %v", err)
	}
	buf.Reset()
	if err := run(ctx, &buf, "admin", "brokers", "load", "--admin-url", admin); err != nil || !strings.Contains(buf.String(), `"msgRateIn"`) {
		t.Fatalf("admin brokers load: %v\n%s", err, buf.String())
	}
	// pulsar-admin's verbs: peek-messages -n 2 shows the first two
	// messages; -n 5 the three there are.
	if err := run(ctx, io.Discard, "admin", "topics", "create-subscription", "first", "-s", "peeker", "--admin-url", admin); err != nil {
		t.Fatalf("admin topics create-subscription: %v", err)
	}
	if err := run(ctx, io.Discard, "admin", "topics", "reset-cursor", "first", "-s", "peeker", "-t", "1h", "--admin-url", admin); err != nil {
		t.Fatalf("admin topics reset-cursor: %v", err)
	}
	for n, want := range map[string]int{"2": 2, "5": 3} {
		buf.Reset()
		if err := run(ctx, &buf, "admin", "topics", "peek-messages", "first", "-s", "peeker", "-n", n, "--admin-url", admin); err != nil {
			t.Fatalf("admin topics peek-messages -n %s: %v", n, err)
		}
		if got := buf.String(); strings.Count(got, "Message ID: ") != want || strings.Count(got, "|hello|") != want || !strings.Contains(got, "Key: k1") {
			t.Fatalf("peek-messages -n %s printed %d messages, want %d:\n%s", n, strings.Count(got, "Message ID: "), want, got)
		}
	}
	if err := run(ctx, io.Discard, "admin", "topics", "clear-backlog", "first", "-s", "peeker", "--admin-url", admin); err != nil {
		t.Fatalf("admin topics clear-backlog: %v", err)
	}
	if err := run(ctx, io.Discard, "admin", "topics", "peek-messages", "first", "-s", "peeker", "--admin-url", admin); err == nil || !strings.Contains(err.Error(), "fewer unacknowledged") {
		t.Fatalf("peek after clear-backlog: %v", err)
	}
	if err := run(ctx, io.Discard, "admin", "namespaces", "set-backlog-quota", "public/default", "--limit-size", "10G", "-p", "producer_request_hold", "--admin-url", admin); err != nil {
		t.Fatalf("admin namespaces set-backlog-quota: %v", err)
	}
	buf.Reset()
	if err := run(ctx, &buf, "admin", "namespaces", "get-backlog-quotas", "public/default", "--admin-url", admin); err != nil || !strings.Contains(buf.String(), `"limitSize": 10737418240`) {
		t.Fatalf("admin namespaces get-backlog-quotas: %v\n%s", err, buf.String())
	}
	if err := run(ctx, io.Discard, "admin", "namespaces", "set-backlog-quota", "public/default", "-p", "producer_request_hold", "--admin-url", admin); err == nil || !strings.Contains(err.Error(), "--limit-size") {
		t.Fatalf("set-backlog-quota without a size: %v", err)
	}
	if err := run(ctx, io.Discard, "admin", "namespaces", "remove-backlog-quota", "public/default", "--admin-url", admin); err != nil {
		t.Fatalf("admin namespaces remove-backlog-quota: %v", err)
	}
	if err := run(ctx, io.Discard, "admin", "namespaces", "unsubscribe", "public/default", "-s", "peeker", "--admin-url", admin); err != nil {
		t.Fatalf("admin namespaces unsubscribe: %v", err)
	}
	// pulsar-admin's clusters, brokers and schemas verbs.
	for _, tc := range []struct {
		args []string
		want string // in the output
	}{
		{[]string{"clusters", "list"}, `"standalone"`},
		{[]string{"clusters", "get", "standalone"}, `"brokerServiceUrl": "pulsar://127.0.0.1:`},
		{[]string{"clusters", "get-peer-clusters", "standalone"}, `[]`},
		{[]string{"clusters", "list-failure-domains", "standalone"}, `{}`},
		{[]string{"brokers", "healthcheck"}, "ok"},
		{[]string{"brokers", "get-runtime-config"}, `"cluster-name": "standalone"`},
		{[]string{"brokers", "get-internal-config"}, `"metadataStoreUrl": "etcd:127.0.0.1:`},
		{[]string{"brokers", "list-dynamic-config"}, `[]`},
	} {
		buf.Reset()
		if err := run(ctx, &buf, append(append([]string{"admin"}, tc.args...), "--admin-url", admin)...); err != nil || !strings.Contains(buf.String(), tc.want) {
			t.Fatalf("admin %v: %v\n%s\nwant %s", tc.args, err, buf.String(), tc.want)
		}
	}
	if err := run(ctx, io.Discard, "admin", "clusters", "get", "elsewhere", "--admin-url", admin); err == nil || !strings.Contains(err.Error(), "cluster not found") {
		t.Fatalf("admin clusters get of another cluster: %v", err)
	}
	if err := run(ctx, io.Discard, "admin", "brokers", "namespaces", "standalone", "--admin-url", admin); err == nil || !strings.Contains(err.Error(), "--url") {
		t.Fatalf("admin brokers namespaces without --url: %v", err)
	}
	// More of pulsar-admin's verbs, in its spelling: each with what it
	// shows, or what the next one shows after it changed something.
	buf.Reset()
	if err := run(ctx, &buf, "admin", "topics", "last-message-id", "first", "--admin-url", admin); err != nil {
		t.Fatalf("admin topics last-message-id: %v", err)
	}
	var last struct{ LedgerID, EntryID int64 }
	if err := json.Unmarshal([]byte(buf.String()), &last); err != nil || last.EntryID < 2 {
		t.Fatalf("last-message-id printed %s (%v)", buf.String(), err)
	}
	for _, tc := range []struct {
		args []string
		want string // in the output
	}{
		{[]string{"topics", "get-message-by-id", "first", "-l", fmt.Sprint(last.LedgerID), "-e", "0"}, fmt.Sprintf("Message ID: %d:0", last.LedgerID)},
		{[]string{"topics", "create-partitioned-topic", "parted", "-p", "2"}, ""},
		{[]string{"topics", "update-partitioned-topic", "parted", "-p", "3"}, ""},
		{[]string{"topics", "get-partitioned-topic-metadata", "parted"}, `"partitions": 3`},
		{[]string{"topics", "list-partitioned-topics", "public/default"}, `"persistent://public/default/parted"`},
		{[]string{"topics", "partitioned-stats", "parted"}, `"partitions": 3`},
		{[]string{"topics", "internal-stats", "first"}, `"individuallyDeletedMessages": "[]"`},
		{[]string{"topics", "info-internal", "first"}, `"ledgers"`},
		{[]string{"topics", "grant-permission", "first", "--role", "app", "--actions", "consume"}, ""},
		{[]string{"topics", "permissions", "first"}, `"app": [`},
		{[]string{"topics", "revoke-permission", "first", "--role", "app"}, ""},
		{[]string{"topics", "permissions", "first"}, `{}`},
		{[]string{"topics", "expire-messages", "first", "-s", "sub-shared", "-t", "0"}, ""},
		{[]string{"topics", "expire-messages-all-subscriptions", "first", "-t", "0"}, ""},
		{[]string{"topics", "stats", "first"}, `"msgBacklog": 0`},
		{[]string{"namespaces", "set-retention", "public/default", "--size", "1G", "--time", "1h"}, ""},
		{[]string{"namespaces", "get-retention", "public/default"}, `"retentionTimeInMinutes": 60`},
		{[]string{"namespaces", "remove-retention", "public/default"}, ""},
		{[]string{"namespaces", "set-message-ttl", "public/default", "--ttl", "120"}, ""},
		{[]string{"namespaces", "get-message-ttl", "public/default"}, "120"},
		{[]string{"namespaces", "remove-message-ttl", "public/default"}, ""},
		{[]string{"namespaces", "policies", "public/default"}, `"retention_policies"`},
		{[]string{"tenants", "create", "acme", "-r", "ops"}, ""}, // every cluster, as pulsar-admin
		{[]string{"tenants", "update", "acme", "-r", "dev"}, ""}, // keeps the allowed clusters
		{[]string{"tenants", "get", "acme"}, `"adminRoles": [
    "dev"
  ],
  "allowedClusters": [
    "standalone"
  ]`},
		{[]string{"tenants", "update", "acme", "-c", ""}, ""}, // keeps the roles
		{[]string{"tenants", "get", "acme"}, `"adminRoles": [
    "dev"
  ],
  "allowedClusters": []`},
		{[]string{"tenants", "delete", "acme"}, ""},
	} {
		buf.Reset()
		if err := run(ctx, &buf, append(append([]string{"admin"}, tc.args...), "--admin-url", admin)...); err != nil || !strings.Contains(buf.String(), tc.want) {
			t.Fatalf("admin %v: %v\n%s\nwant %s", tc.args, err, buf.String(), tc.want)
		}
	}
	if err := run(ctx, io.Discard, "admin", "tenants", "create", "elsewhere", "-c", "other", "--admin-url", admin); err == nil || !strings.Contains(err.Error(), `cluster "other"`) {
		t.Fatalf("admin tenants create on another cluster: %v", err)
	}
	if err := run(ctx, io.Discard, "admin", "tenants", "update", "nobody", "-r", "dev", "--admin-url", admin); err == nil || !strings.Contains(err.Error(), "tenant nobody does not exist") {
		t.Fatalf("admin tenants update of a missing tenant: %v", err)
	}
	schemaFile := filepath.Join(t.TempDir(), "schema.json")
	if err := os.WriteFile(schemaFile, []byte(`{"type": "JSON", "schema": "{\"type\":\"record\",\"name\":\"R\",\"fields\":[]}", "properties": {"team": "a"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	if err := run(ctx, &buf, "admin", "schemas", "upload", "first", "-f", schemaFile, "--admin-url", admin); err != nil || !strings.Contains(buf.String(), `"version": 0`) {
		t.Fatalf("admin schemas upload: %v\n%s", err, buf.String())
	}
	buf.Reset()
	if err := run(ctx, &buf, "admin", "schemas", "get", "first", "--version", "0", "--admin-url", admin); err != nil || !strings.Contains(buf.String(), `"type": "JSON"`) || !strings.Contains(buf.String(), `"team": "a"`) {
		t.Fatalf("admin schemas get: %v\n%s", err, buf.String())
	}
	if err := run(ctx, io.Discard, "admin", "schemas", "delete", "first", "--admin-url", admin); err != nil {
		t.Fatalf("admin schemas delete: %v", err)
	}
	if err := run(ctx, io.Discard, "admin", "schemas", "get", "first", "--admin-url", admin); err == nil || !strings.Contains(err.Error(), "has no schema") {
		t.Fatalf("admin schemas get after delete: %v", err)
	}
	// pulsar-admin's terminate: the last message's id; then the topic
	// takes nothing more.
	buf.Reset()
	if err := run(ctx, &buf, "admin", "topics", "terminate", "first", "--admin-url", admin); err != nil || !strings.Contains(buf.String(), `"entryId": 2`) {
		t.Fatalf("admin topics terminate: %v\n%s", err, buf.String())
	}
	if err := run(ctx, io.Discard, "client", "produce", "first", "-m", "late", "--url", url); err == nil || !strings.Contains(err.Error(), "terminated") {
		t.Fatalf("client produce to a terminated topic: %v", err)
	}
	if err := run(ctx, io.Discard, "admin", "topics", "partitioned-terminate", "first", "--admin-url", admin); err == nil || !strings.Contains(err.Error(), "not a partitioned topic") {
		t.Fatalf("admin topics partitioned-terminate of a plain topic: %v", err)
	}
	// Non-persistent topics: the verbs take their names; lists cover both
	// domains unless --topic-domain says one; what needs stored messages is
	// refused.
	const np = "non-persistent://public/default/np-cli"
	if err := run(ctx, io.Discard, "admin", "topics", "create", np, "--admin-url", admin); err != nil {
		t.Fatalf("admin topics create %s: %v", np, err)
	}
	for _, tc := range []struct {
		args    []string
		want    string
		wantNot string
	}{
		{[]string{"topics", "list", "public/default"}, np, ""},
		{[]string{"topics", "list", "public/default"}, `"persistent://public/default/first"`, ""},
		{[]string{"topics", "list", "public/default", "--topic-domain", "non_persistent"}, np, "persistent://public/default/first"},
		{[]string{"topics", "list", "public/default", "--topic-domain", "persistent"}, "persistent://public/default/first", np},
		{[]string{"topics", "stats", np}, `"msgDropRate"`, ""},
		{[]string{"topics", "lookup", np}, `"brokerUrl"`, ""},
	} {
		buf.Reset()
		if err := run(ctx, &buf, append(append([]string{"admin"}, tc.args...), "--admin-url", admin)...); err != nil ||
			!strings.Contains(buf.String(), tc.want) || tc.wantNot != "" && strings.Contains(buf.String(), tc.wantNot) {
			t.Fatalf("admin %v: %v\n%s\nwant %s, not %q", tc.args, err, buf.String(), tc.want, tc.wantNot)
		}
	}
	if err := run(ctx, io.Discard, "admin", "topics", "list", "public/default", "--topic-domain", "both", "--admin-url", admin); err == nil || !strings.Contains(err.Error(), "--topic-domain") {
		t.Fatalf("admin topics list --topic-domain both: %v", err)
	}
	if err := run(ctx, io.Discard, "admin", "topics", "last-message-id", np, "--admin-url", admin); err == nil || !strings.Contains(err.Error(), "non-persistent") {
		t.Fatalf("admin topics last-message-id of a non-persistent topic: %v", err)
	}
	if err := run(ctx, io.Discard, "admin", "topics", "delete", np, "--admin-url", admin); err != nil {
		t.Fatalf("admin topics delete %s: %v", np, err)
	}
	buf.Reset()
	if err := run(ctx, &buf, "perf", "produce", "perf", "-n", "2000", "--rate", "0", "--url", url); err != nil {
		t.Fatalf("perf produce: %v", err)
	}
	// The summary is the last line: scripts take it with tail -1.
	if !strings.HasPrefix(lastLine(buf.String()), "produce summary: 2000 messages") || !strings.HasSuffix(buf.String(), "errors 0\n") {
		t.Fatalf("perf produce printed %q", buf.String())
	}
	// Failed sends: their reasons are printed and the run exits non-zero.
	buf.Reset()
	err := run(ctx, &buf, "perf", "produce", "perf-too-large", "-n", "3", "--rate", "0", "--size", "6000000", "--url", url)
	if err == nil || !strings.Contains(err.Error(), "3 sends failed") ||
		!strings.Contains(buf.String(), "3  "+client.ErrMessageTooLarge.Error()) || !strings.HasSuffix(buf.String(), "errors 3\n") {
		t.Fatalf("perf produce of too large messages: %v\n%s", err, buf.String())
	}
	buf.Reset()
	if err := run(ctx, &buf, "perf", "produce", "perf-unbatched", "-n", "100", "--rate", "0", "--disable-batching", "--batch-delay", "0", "--url", url); err != nil ||
		!strings.HasPrefix(lastLine(buf.String()), "produce summary: 100 messages") {
		t.Fatalf("perf produce --disable-batching: %v\n%s", err, buf.String())
	}
	buf.Reset()
	if err := run(ctx, &buf, "perf", "consume", "perf", "-s", "p", "--earliest", "-n", "2000", "--url", url); err != nil {
		t.Fatalf("perf consume: %v", err)
	}
	if !strings.HasPrefix(lastLine(buf.String()), "consume summary: 2000 messages") {
		t.Fatalf("perf consume printed %q", buf.String())
	}

	// The first broker of the URL dead, or paused (it accepts and never
	// answers): every command gets through to the next one (correctness
	// sweep, item 1).
	for _, first := range []string{testutil.DeadAddr(t), testutil.StalledAddr(t)} {
		list := "magnetar://" + first + "," + strings.TrimPrefix(url, "magnetar://")
		buf.Reset()
		if err := run(ctx, &buf, "client", "produce", "listed", "-m", "x", "-n", "2", "--url", list); err != nil || strings.Count(buf.String(), "sent ") != 2 {
			t.Fatalf("client produce, first broker %s unreachable: %v\n%s", first, err, buf.String())
		}
		if err := run(ctx, io.Discard, "client", "consume", "listed", "-s", "sub", "-p", "earliest", "-n", "2", "--url", list); err != nil {
			t.Fatalf("client consume, first broker %s unreachable: %v", first, err)
		}
		buf.Reset()
		if err := run(ctx, &buf, "perf", "produce", "listed-perf", "-n", "100", "--rate", "0", "--url", list); err != nil ||
			!strings.HasPrefix(lastLine(buf.String()), "produce summary: 100 messages") {
			t.Fatalf("perf produce, first broker %s unreachable: %v\n%s", first, err, buf.String())
		}
		if err := run(ctx, io.Discard, "perf", "consume", "listed-perf", "-s", "p", "--earliest", "-n", "100", "--url", list); err != nil {
			t.Fatalf("perf consume, first broker %s unreachable: %v", first, err)
		}
		if err := run(ctx, io.Discard, "admin", "topics", "stats", "listed", "--attempt-timeout", "2s", "--admin-url", "http://"+first+","+admin); err != nil {
			t.Fatalf("admin, first URL %s unreachable: %v", first, err)
		}
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("standalone exited with %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("standalone did not stop")
	}
}

// field returns what follows prefix on its line of out.
func field(t *testing.T, out, prefix string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if i := strings.Index(l, prefix); i >= 0 {
			return strings.Fields(l[i+len(prefix):])[0]
		}
	}
	t.Fatalf("no %q in\n%s", prefix, out)
	return ""
}

func TestPerfStamp(t *testing.T) {
	now := time.Now()
	p := make([]byte, 1024)
	stamp(p, now)
	if got, ok := stamped(p); !ok || !got.Equal(time.Unix(0, now.UnixNano())) {
		t.Fatalf("stamped = %v %v, want %v", got, ok, now)
	}
	short := make([]byte, 15)
	stamp(short, now)
	if _, ok := stamped(short); ok {
		t.Fatal("a 15-byte payload carries no stamp")
	}
	if _, ok := stamped(make([]byte, 64)); ok {
		t.Fatal("a payload without the magic has no stamp")
	}
}

// lastLine returns the last line of s, without its newline.
func lastLine(s string) string {
	s = strings.TrimSuffix(s, "\n")
	return s[strings.LastIndexByte(s, '\n')+1:]
}
