package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/internal/testutil"
)

// A client started after a failure, whose URL lists a dead broker first:
// one that never ran, and one just killed with SIGKILL while it owned the
// topic (its ownership lasts until its lease expires, so lookups name it
// for a while). The `magnetar client` commands (separate processes) and
// the SDK still produce and consume everything, within their operation
// timeout (correctness sweep, item 1).
func TestClientWhoseFirstBrokerIsDead(t *testing.T) {
	c := newCluster(t, 1)
	addrs, brokers, cl := c.startBrokers(2, "10s")
	const topic = "first-dead"
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte("m-0")}); err != nil {
		t.Fatal(err)
	}
	p.Close()
	owner := c.owner("public/default/" + topic)
	var live string
	for _, a := range addrs {
		if a != owner {
			live = a
		}
	}
	if brokers[owner] == nil || live == "" {
		t.Fatalf("owner %q of %v", owner, addrs)
	}

	// Never started: the client's first broker is dead from the start.
	never := testutil.DeadAddr(t)
	cli := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, binary, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("magnetar %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	out := cli("client", "produce", topic, "-m", "m-1", "--url", "magnetar://"+never+","+owner+","+live, "--log-level", "warn")
	if !strings.Contains(out, "sent ") {
		t.Fatalf("client produce printed %q", out)
	}

	// The owner dies; a client that starts now lists it first.
	brokers[owner].kill()
	url := "magnetar://" + owner + "," + live
	out = cli("client", "produce", topic, "-m", "m-2", "--url", url, "--log-level", "warn")
	if !strings.Contains(out, "sent ") {
		t.Fatalf("client produce after the owner's kill printed %q", out)
	}
	out = cli("client", "consume", topic, "-s", "reader", "-p", "earliest", "-n", "3", "--url", url, "--log-level", "warn")
	for i := 0; i < 3; i++ {
		if !strings.Contains(out, fmt.Sprintf("m-%d\t", i)) {
			t.Fatalf("client consume printed %q, want m-0, m-1 and m-2", out)
		}
	}
	sdk, err := client.NewClient(client.ClientOptions{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer sdk.Close()
	p2, err := sdk.CreateProducer(client.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatalf("SDK producer, first broker dead: %v", err)
	}
	if _, err := p2.Send(ctx, &client.ProducerMessage{Payload: []byte("m-3")}); err != nil {
		t.Fatalf("SDK send, first broker dead: %v", err)
	}
	p2.Close()
	cons, err := sdk.Subscribe(client.ConsumerOptions{Topic: topic, SubscriptionName: "sdk", SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatalf("SDK subscribe, first broker dead: %v", err)
	}
	defer cons.Close()
	for i := 0; i < 4; i++ {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("received %d of 4: %v", i, err)
		}
		if got, want := string(m.Payload()), fmt.Sprintf("m-%d", i); got != want {
			t.Fatalf("message %d is %q, want %q", i, got, want)
		}
	}
}
