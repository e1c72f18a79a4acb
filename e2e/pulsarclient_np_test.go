package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/internal/testutil"
)

// npPermitsGranted reports whether every subscription of a non-persistent
// topic has its consumers (want per subscription) with permits: the
// official client sends its FLOW after its Subscribe returns, and a
// non-persistent topic drops what no consumer has permits for.
func npPermitsGranted(t *testing.T, httpAddr, local string, want map[string]int) bool {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/admin/v2/non-persistent/public/default/" + local + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Subscriptions map[string]struct {
			Consumers []struct {
				AvailablePermits int `json:"availablePermits"`
			} `json:"consumers"`
		} `json:"subscriptions"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&st) != nil {
		return false
	}
	for sub, n := range want {
		cs := st.Subscriptions[sub].Consumers
		if len(cs) != n {
			return false
		}
		for _, c := range cs {
			if c.AvailablePermits <= 0 {
				return false
			}
		}
	}
	return true
}

// Non-persistent topics with Pulsar's official Go client and admin
// library: an exclusive consumer gets every message in order, its
// individual and cumulative acknowledgements accepted, and keeps
// receiving after a cumulative one (with Pulsar's 0:0 ids the library
// would skip every later message); two Shared consumers split the
// messages; Magnetar's SDK, on the same topic, gets them with their keys
// and properties; a reader gets what is published after it; seek is
// refused. pulsaradmin creates, lists, reads the stats of and deletes
// non-persistent topics, partitioned ones too.
func TestPulsarClientNonPersistent(t *testing.T) {
	s := startStandalone(t, t.TempDir(), freePorts(t, 4))
	t.Cleanup(func() { s.stop() })
	pc := officialClient(t, "pulsar://"+s.brokerAddr)
	sdk, err := client.NewClient(client.ClientOptions{URL: "magnetar://" + s.brokerAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer sdk.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const local = "np-official"
	const topic = "non-persistent://public/default/" + local

	excl, err := pc.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "excl", Type: pulsar.Exclusive})
	if err != nil {
		t.Fatal(err)
	}
	defer excl.Close()
	var shared []pulsar.Consumer
	for _, name := range []string{"a", "b"} {
		c, err := pc.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "shared", Name: name, Type: pulsar.Shared})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		shared = append(shared, c)
	}
	mine, err := sdk.Subscribe(client.ConsumerOptions{Topic: topic, SubscriptionName: "sdk"})
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Close()
	reader, err := pc.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.LatestMessageID(), SubscriptionName: "reader"})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	testutil.Eventually(t, 20*time.Second, "the consumers' permits", func() bool {
		return npPermitsGranted(t, s.httpAddr, local, map[string]int{"excl": 1, "shared": 2, "sdk": 1, "reader": 1})
	})

	p, err := pc.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const n = 40
	var ids []pulsar.MessageID
	for i := 0; i < n; i++ {
		id, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprint("m-", i)), Key: fmt.Sprint("k", i%3),
			Properties: map[string]string{"i": fmt.Sprint(i)}})
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && id.EntryID() != ids[i-1].EntryID()+1 {
			t.Fatalf("receipt %d: %v after %v", i, id, ids[i-1])
		}
		ids = append(ids, id)
	}
	for i := 0; i < n; i++ {
		m, err := excl.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Payload()) != fmt.Sprint("m-", i) || m.ID().EntryID() != ids[i].EntryID() {
			t.Fatalf("exclusive %d: %q at %v", i, m.Payload(), m.ID())
		}
		if i == n/2 {
			if err := excl.AckCumulative(m); err != nil {
				t.Fatal(err)
			}
		} else if err := excl.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]bool{}
	for len(got) < n {
		for _, c := range shared {
			rctx, rcancel := context.WithTimeout(ctx, 50*time.Millisecond)
			m, err := c.Receive(rctx)
			rcancel()
			if err != nil {
				continue // the other has the rest
			}
			if got[string(m.Payload())] {
				t.Fatalf("%q twice on the Shared subscription", m.Payload())
			}
			got[string(m.Payload())] = true
			c.Ack(m)
		}
		if ctx.Err() != nil {
			t.Fatalf("Shared: %d of %d", len(got), n)
		}
	}
	for i, m := range receiveAll(t, mine, n) {
		if string(m.Payload()) != fmt.Sprint("m-", i) || m.Key() != fmt.Sprint("k", i%3) || m.Properties()["i"] != fmt.Sprint(i) {
			t.Fatalf("SDK %d: %q key %q properties %v", i, m.Payload(), m.Key(), m.Properties())
		}
	}
	for i := 0; i < n; i++ {
		m, err := reader.Next(ctx)
		if err != nil || string(m.Payload()) != fmt.Sprint("m-", i) {
			t.Fatalf("reader %d: %v %v", i, m, err)
		}
	}
	// After the cumulative acknowledgement, more still come.
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("after")}); err != nil {
		t.Fatal(err)
	}
	if m, err := excl.Receive(ctx); err != nil || string(m.Payload()) != "after" {
		t.Fatalf("after the acknowledgements: %v %v", m, err)
	}
	if err := excl.Seek(ids[0]); err == nil {
		t.Fatal("seek on a non-persistent topic: no error")
	}

	admin, err := pulsaradmin.NewClient(&pulsaradmin.Config{WebServiceURL: "http://" + s.httpAddr})
	if err != nil {
		t.Fatal(err)
	}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	tn, err := utils.GetTopicName(topic)
	must("GetTopicName", err)
	st, err := admin.Topics().GetStats(*tn)
	must("GetStats", err)
	if st.MsgCounterIn != n+1 || len(st.Subscriptions) != 4 || st.Subscriptions["excl"].MsgBacklog != 0 {
		t.Fatalf("GetStats: in %d, subscriptions %v", st.MsgCounterIn, st.Subscriptions)
	}
	parts, err := utils.GetTopicName("non-persistent://public/default/np-admin-parts")
	must("GetTopicName", err)
	must("Create partitioned", admin.Topics().Create(*parts, 3))
	single, err := utils.GetTopicName("non-persistent://public/default/np-admin-single")
	must("GetTopicName", err)
	must("Create", admin.Topics().Create(*single, 0))
	ns, err := utils.GetNamespaceName("public/default")
	must("GetNamespaceName", err)
	partitioned, nonPartitioned, err := admin.Topics().List(*ns)
	must("List", err)
	if !slices.Contains(partitioned, parts.String()) || !slices.Contains(nonPartitioned, single.String()) || !slices.Contains(nonPartitioned, topic) ||
		!slices.Contains(nonPartitioned, parts.String()+"-partition-2") {
		t.Fatalf("List: partitioned %v, non-partitioned %v", partitioned, nonPartitioned)
	}
	meta, err := admin.Topics().GetMetadata(*parts)
	must("GetMetadata", err)
	if meta.Partitions != 3 {
		t.Fatalf("GetMetadata: %+v", meta)
	}
	must("Delete", admin.Topics().Delete(*single, false, true))
	must("Delete partitioned", admin.Topics().Delete(*parts, false, false))
	partitioned, nonPartitioned, err = admin.Topics().List(*ns)
	must("List", err)
	if slices.Contains(partitioned, parts.String()) || slices.Contains(nonPartitioned, single.String()) {
		t.Fatalf("List after the deletes: partitioned %v, non-partitioned %v", partitioned, nonPartitioned)
	}
}
