package broker_test

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"testing"

	"github.com/magnetar-io/magnetar/client"
)

// The bodies Pulsar's admin clients send to create a subscription:
// pulsar-client-go's pulsaradmin utils.MessageID (Earliest, Latest) and the
// Java admin's ResetCursorData.
var (
	goEarliest = map[string]any{"ledgerId": -1, "entryId": -1, "partitionedIndex": -1}
	goLatest   = map[string]any{"ledgerId": int64(math.MaxInt64), "entryId": int64(math.MaxInt64), "partitionedIndex": -1}
	javaAt     = func(id client.MessageID) map[string]any {
		return map[string]any{"ledgerId": id.LedgerID(), "entryId": id.EntryID(), "partitionIndex": -1, "isExcluded": false, "batchIndex": -1}
	}
)

// PUT .../subscription/{sub} starts the subscription where the body says,
// as Pulsar does: earliest, latest (also with no body), or at a message id
// (that message included); a body that is not a message id is 400 and
// creates nothing.
func TestAdminCreateSubscriptionAtPosition(t *testing.T) {
	e := newEnv(t, nil)
	cl := e.client()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "subpos", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ids := produce(t, p, 0, 10)
	base := "/admin/v2/persistent/public/default/subpos/subscription/"
	for _, tc := range []struct {
		sub     string
		body    any
		backlog int64
		first   string // the first message a consumer receives
	}{
		{"early", goEarliest, 10, "m-00000"},
		{"late", goLatest, 0, ""},
		{"nobody", nil, 0, ""},
		{"mid", javaAt(ids[4]), 6, "m-00004"},
		{"last", javaAt(ids[9]), 1, "m-00009"},
		{"past-the-end", map[string]any{"ledgerId": ids[9].LedgerID() + 1000, "entryId": 0}, 0, ""},
	} {
		if code, body, err := adminDo(e, "PUT", base+tc.sub, tc.body); err != nil || code != http.StatusNoContent {
			t.Fatalf("create %s: %d %s %v", tc.sub, code, body, err)
		}
		if got := statsBacklog(t, e, "subpos", tc.sub); got != tc.backlog {
			t.Errorf("%s: backlog %d, want %d", tc.sub, got, tc.backlog)
		}
		if tc.first == "" {
			continue
		}
		cons, err := cl.Subscribe(client.ConsumerOptions{Topic: "subpos", SubscriptionName: tc.sub})
		if err != nil {
			t.Fatal(err)
		}
		if m := receiveN(t, cons, 1)[0]; string(m.Payload()) != tc.first {
			t.Errorf("%s: first message %q, want %q", tc.sub, m.Payload(), tc.first)
		}
		cons.Close()
	}
	if code, reason := adminError(t, e, "PUT", base+"early", goEarliest); code != http.StatusConflict {
		t.Errorf("create an existing subscription: %d %s", code, reason)
	}
	for _, bad := range []string{`"earliest"`, `{"ledgerId":-5,"entryId":3}`, `{"ledgerId":3,"entryId":-2}`, `{"entryId":3}`, `{"ledgerId":1,"entryId":`, `[1,2]`} {
		req, _ := http.NewRequest("PUT", "http://"+e.b.HTTPAddr()+base+"bad", bytes.NewReader([]byte(bad)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("body %s: %s, want 400", bad, resp.Status)
		}
	}
	subs, err := adminGetJSON[[]string](e, "/admin/v2/persistent/public/default/subpos/subscriptions")
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(subs, "bad") {
		t.Errorf("a refused request created its subscription: %v", subs)
	}
}

// On a partitioned topic the subscription is created on every partition,
// at the position asked, whichever broker owns each partition; asking
// again is 409.
func TestAdminCreateSubscriptionOnPartitionedTopic(t *testing.T) {
	e := newEnv(t, nil)
	other := e.startAnother(nil)
	cl := clientOf(t, e.b, other)
	const parts, msgs = 4, 12
	topic, p := spreadPartitionedTopic(t, e, cl, "psub-", parts, msgs)
	p.Close()
	base := "/admin/v2/persistent/public/default/" + topic
	for sub, want := range map[string]int64{"early": msgs, "late": 0} {
		body := goEarliest
		if sub == "late" {
			body = goLatest
		}
		if code, out, err := adminDo(e, "PUT", base+"/subscription/"+sub, body); err != nil || code != http.StatusNoContent {
			t.Fatalf("create %s: %d %s %v", sub, code, out, err)
		}
		st, err := adminGetJSON[struct {
			Partitions map[string]struct {
				Subscriptions map[string]struct {
					MsgBacklog int64 `json:"msgBacklog"`
				} `json:"subscriptions"`
			} `json:"partitions"`
		}](e, base+"/stats")
		if err != nil {
			t.Fatal(err)
		}
		var backlog int64
		for name, p := range st.Partitions {
			s, ok := p.Subscriptions[sub]
			if !ok {
				t.Errorf("%s: no subscription %s", name, sub)
			}
			backlog += s.MsgBacklog
		}
		if len(st.Partitions) != parts || backlog != want {
			t.Errorf("%s: %d partitions, backlog %d, want %d and %d", sub, len(st.Partitions), backlog, parts, want)
		}
	}
	// Asked through the other broker, it exists on every partition: 409.
	resp, err := http.DefaultClient.Do(func() *http.Request {
		r, _ := http.NewRequest("PUT", "http://"+other.HTTPAddr()+base+"/subscription/early", nil)
		return r
	}())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("create an existing subscription: %s", resp.Status)
	}
}

// The subscription calls Pulsar takes on a partitioned topic reach every
// partition, whichever broker owns it, as do the namespace-wide ones; the
// partitioned stats sum them.
func TestAdminPartitionedCallsAcrossBrokers(t *testing.T) {
	e := newEnv(t, nil)
	other := e.startAnother(nil)
	cl := clientOf(t, e.b, other)
	const parts, msgs = 4, 12
	topic, p := spreadPartitionedTopic(t, e, cl, "pcalls-", parts, msgs)
	p.Close()
	base := "/admin/v2/persistent/public/default/" + topic
	do := func(method, path string, want int) {
		t.Helper()
		if code, out, err := adminDo(e, method, path, nil); err != nil || code != want {
			t.Fatalf("%s %s: %d %s %v, want %d", method, path, code, out, err, want)
		}
	}
	backlog := func() int64 {
		t.Helper()
		st, err := adminGetJSON[struct {
			MsgInCounter int64 `json:"msgInCounter"`
			Metadata     struct {
				Partitions int `json:"partitions"`
			} `json:"metadata"`
			Subscriptions map[string]struct {
				MsgBacklog int64 `json:"msgBacklog"`
			} `json:"subscriptions"`
			Partitions map[string]json.RawMessage `json:"partitions"`
		}](e, base+"/partitioned-stats")
		if err != nil {
			t.Fatal(err)
		}
		if st.Metadata.Partitions != parts || len(st.Partitions) != parts || st.MsgInCounter != msgs {
			t.Fatalf("partitioned stats: %d partitions, %d with stats, %d messages in; want %d, %d, %d",
				st.Metadata.Partitions, len(st.Partitions), st.MsgInCounter, parts, parts, msgs)
		}
		return st.Subscriptions["s"].MsgBacklog
	}
	do("PUT", base+"/subscription/s", http.StatusNoContent) // at the end
	do("POST", base+"/subscription/s/resetcursor/0", http.StatusNoContent)
	if got := backlog(); got != msgs {
		t.Fatalf("after a reset to time 0: backlog %d, want %d", got, msgs)
	}
	if subs, err := adminGetJSON[[]string](e, base+"/subscriptions"); err != nil || !slices.Equal(subs, []string{"s"}) {
		t.Fatalf("subscriptions: %v %v", subs, err)
	}
	do("POST", base+"/subscription/s/expireMessages/3600", http.StatusNoContent)
	if got := backlog(); got != msgs {
		t.Fatalf("after expiring what is older than an hour: backlog %d, want %d", got, msgs)
	}
	do("POST", base+"/subscription/s/skip_all", http.StatusNoContent)
	if got := backlog(); got != 0 {
		t.Fatalf("after clearing the backlog: %d", got)
	}
	do("POST", base+"/subscription/s/resetcursor/0", http.StatusNoContent)
	do("POST", base+"/all_subscription/expireMessages/0", http.StatusNoContent)
	if got := backlog(); got != 0 {
		t.Fatalf("after expiring everything: %d", got)
	}
	do("POST", base+"/subscription/s/resetcursor/0", http.StatusNoContent)
	do("POST", "/admin/v2/namespaces/public/default/clearBacklog/s", http.StatusNoContent)
	if got := backlog(); got != 0 {
		t.Fatalf("after clearing the namespace's backlog of s: %d", got)
	}
	do("POST", base+"/subscription/nobody/skip_all", http.StatusNotFound)
	do("POST", "/admin/v2/namespaces/public/default/unsubscribe/nobody", http.StatusNoContent)
	do("POST", "/admin/v2/namespaces/public/default/unsubscribe/s", http.StatusNoContent)
	if subs, err := adminGetJSON[[]string](e, base+"/subscriptions"); err != nil || len(subs) != 0 {
		t.Fatalf("subscriptions after unsubscribing: %v %v", subs, err)
	}
	do("DELETE", base+"/subscription/s", http.StatusNotFound)
}
