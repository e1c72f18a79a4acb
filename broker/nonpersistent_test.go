package broker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/internal/testutil"
	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/entry"
	"github.com/magnetar-io/magnetar/proto/pulsarpb"
)

// npStats is what the tests read of a non-persistent topic's stats.
type npStats struct {
	StorageSize    int64  `json:"storageSize"`
	MsgInCounter   int64  `json:"msgInCounter"`
	MsgDropCounter *int64 `json:"msgDropCounter"`
	Subscriptions  map[string]struct {
		Type           string `json:"type"`
		MsgBacklog     int64  `json:"msgBacklog"`
		MsgDropCounter *int64 `json:"msgDropCounter"`
		Durable        bool   `json:"isDurable"`
		Consumers      []struct {
			Name             string `json:"consumerName"`
			AvailablePermits int    `json:"availablePermits"`
			MsgOutCounter    int64  `json:"msgOutCounter"`
		} `json:"consumers"`
	} `json:"subscriptions"`
}

func npStatsOf(t *testing.T, e *env, local string) npStats {
	t.Helper()
	st, err := adminGetJSON[npStats](e, "/admin/v2/non-persistent/public/default/"+url.PathEscape(local)+"/stats")
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// waitPermits waits until every consumer of sub has been granted permits
// (the SDK grants them right after it subscribes): a non-persistent topic
// drops what a consumer without permits would get.
func waitPermits(t *testing.T, e *env, local, sub string, consumers int) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, "permits granted on "+sub, func() bool {
		s, ok := npStatsOf(t, e, local).Subscriptions[sub]
		if !ok || len(s.Consumers) != consumers {
			return false
		}
		for _, c := range s.Consumers {
			if c.AvailablePermits <= 0 {
				return false
			}
		}
		return true
	})
}

// A non-persistent topic delivers each message, as it is published, to
// one consumer of each subscription: all of them in order to an
// exclusive one, each once across a shared one's consumers, each key to
// one consumer of a Key_Shared one. Receipts and deliveries carry
// distinct, increasing ids; acknowledgements are accepted; nothing is
// stored, and a consumer that comes later gets only what is published
// after it.
func TestNonPersistentDelivery(t *testing.T) {
	e := newEnv(t, nil)
	cl := e.client()
	const local, topic = "np", "non-persistent://public/default/np"
	sub := func(name string, typ client.SubscriptionType, consumer string) client.Consumer {
		c, err := cl.Subscribe(client.ConsumerOptions{Topic: topic, SubscriptionName: name, Type: typ, Name: consumer, ReceiverQueueSize: 1000})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	excl := sub("excl", client.Exclusive, "e")
	sh1, sh2 := sub("shared", client.Shared, "s1"), sub("shared", client.Shared, "s2")
	ks1, ks2 := sub("keys", client.KeyShared, "k1"), sub("keys", client.KeyShared, "k2")
	waitPermits(t, e, local, "excl", 1)
	waitPermits(t, e, local, "shared", 2)
	waitPermits(t, e, local, "keys", 2)

	p, err := cl.CreateProducer(client.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const n = 100
	ids := produce(t, p, 0, n)
	for i := 1; i < n; i++ {
		if ids[i].LedgerID() != ids[0].LedgerID() || ids[i].EntryID() != ids[i-1].EntryID()+1 {
			t.Fatalf("receipt %d: %v after %v", i, ids[i], ids[i-1])
		}
	}

	got := receiveN(t, excl, n)
	for i, m := range got {
		if string(m.Payload()) != fmt.Sprintf("m-%05d", i) || m.ID().EntryID() != ids[i].EntryID() || m.ID().LedgerID() != ids[i].LedgerID() {
			t.Fatalf("exclusive message %d: %q at %v, sent at %v", i, m.Payload(), m.ID(), ids[i])
		}
		if err := excl.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	// Shared: each once over both consumers; Key_Shared: also each key to
	// one consumer.
	for _, pair := range [][2]client.Consumer{{sh1, sh2}, {ks1, ks2}} {
		seen := map[string]int{}
		keyOwner := map[string]int{}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		for len(seen) < n {
			var m client.Message
			var which int
			select {
			case cm := <-pair[0].Chan():
				m, which = cm.Message, 0
			case cm := <-pair[1].Chan():
				m, which = cm.Message, 1
			case <-ctx.Done():
				t.Fatalf("%s: received %d of %d", pair[0].Subscription(), len(seen), n)
			}
			seen[string(m.Payload())]++
			if o, ok := keyOwner[m.Key()]; ok && o != which && pair[0].Subscription() == "keys" {
				t.Fatalf("key %s went to both consumers", m.Key())
			}
			keyOwner[m.Key()] = which
		}
		cancel()
		for k, c := range seen {
			if c != 1 {
				t.Fatalf("%s: %s received %d times", pair[0].Subscription(), k, c)
			}
		}
	}

	// Nothing stored: no managed ledger for either form of the name, and
	// no backlog.
	for _, path := range []string{"public/default/non-persistent/np", "public/default/np"} {
		if _, err := e.c.Store.Get(ctxT(t), metastore.ManagedLedgerKey(path)); !errors.Is(err, metastore.ErrNotFound) {
			t.Fatalf("managed ledger of %s: %v", path, err)
		}
	}
	st := npStatsOf(t, e, local)
	if st.StorageSize != 0 || st.MsgInCounter != n || st.Subscriptions["excl"].MsgBacklog != 0 || st.MsgDropCounter == nil || *st.MsgDropCounter != 0 {
		t.Fatalf("stats: %+v", st)
	}

	// A consumer that comes now gets only what is published after it,
	// whatever its initial position.
	late, err := cl.Subscribe(client.ConsumerOptions{Topic: topic, SubscriptionName: "late", SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	waitPermits(t, e, local, "late", 1)
	produce(t, p, n, 1)
	if m := receiveN(t, late, 1)[0]; string(m.Payload()) != fmt.Sprintf("m-%05d", n) {
		t.Fatalf("late consumer got %q first", m.Payload())
	}
}

// What a consumer has no permits for is dropped, for its subscription
// only, and counted: nothing waits to be sent later. Exclusive and
// Shared alike.
func TestNonPersistentDropsWithoutPermits(t *testing.T) {
	e := newEnv(t, func(c *broker.Config) {
		c.StatsInterval = time.Hour // the stats windows are closed by the test (RefreshStats)
	})
	cl := e.client()
	const local, topic = "np-drops", "non-persistent://public/default/np-drops"
	subscribe := func(sub string, typ client.SubscriptionType, queue int) client.Consumer {
		c, err := cl.Subscribe(client.ConsumerOptions{Topic: topic, SubscriptionName: sub, Type: typ, ReceiverQueueSize: queue})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		waitPermits(t, e, local, sub, 1)
		return c
	}
	slow := map[string]client.Consumer{"slow": subscribe("slow", client.Exclusive, 5), "slow-shared": subscribe("slow-shared", client.Shared, 5)}
	fast := subscribe("fast", client.Exclusive, 1000)
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const n = 50
	e.b.RefreshStats()  // the stats window starts here
	produce(t, p, 0, n) // the slow ones do not receive meanwhile
	receiveN(t, fast, n)
	e.b.RefreshStats()

	st := npStatsOf(t, e, local)
	var dropped int64
	for name, c := range slow {
		s := st.Subscriptions[name]
		delivered := s.Consumers[0].MsgOutCounter
		// The SDK takes what its queue and its channel's buffer hold (twice
		// ReceiverQueueSize) before it stops granting permits.
		if s.MsgDropCounter == nil || *s.MsgDropCounter+delivered != n || delivered > n/2 || delivered < 1 {
			t.Fatalf("%s: delivered %d, dropped %s of %d", name, delivered, fmtPtr(s.MsgDropCounter), n)
		}
		dropped += *s.MsgDropCounter
		// It gets what it had permits for, in order (with gaps where it
		// had none: the SDK grants more as it moves messages to its
		// channel), then what is published once it has permits again: the
		// dropped ones are gone.
		prev := ""
		for i, m := range receiveN(t, c, int(delivered)) {
			if p := string(m.Payload()); p <= prev {
				t.Fatalf("%s message %d: %q after %q", name, i, p, prev)
			}
			prev = string(m.Payload())
		}
	}
	if f := st.Subscriptions["fast"]; f.MsgDropCounter == nil || *f.MsgDropCounter != 0 {
		t.Fatalf("fast dropped %s", fmtPtr(f.MsgDropCounter))
	}
	if *st.MsgDropCounter != dropped {
		t.Fatalf("topic dropped %d, subscriptions %d", *st.MsgDropCounter, dropped)
	}
	// The same in /metrics: the broker's total, each subscription's rate.
	m := testutil.Scrape(t, e.b.HTTPAddr())
	m.Want(t, float64(dropped), "magnetar_broker_msg_dropped_total", "cluster", e.cfg.ClusterName)
	for _, sub := range []string{"slow", "slow-shared", "fast"} {
		rate, ok := m.Value(t, "pulsar_subscription_msg_drop_rate", "cluster", e.cfg.ClusterName, "namespace", "public/default", "topic", topic, "subscription", sub)
		if !ok || (rate > 0) != (sub != "fast") {
			t.Errorf("%s: pulsar_subscription_msg_drop_rate %v (found %v)", sub, rate, ok)
		}
	}
	waitPermits(t, e, local, "slow", 1)
	waitPermits(t, e, local, "slow-shared", 1)
	produce(t, p, n, 1)
	for name, c := range slow {
		if m := receiveN(t, c, 1)[0]; string(m.Payload()) != fmt.Sprintf("m-%05d", n) {
			t.Fatalf("after the drops %s got %q", name, m.Payload())
		}
	}
}

// What needs stored messages is refused on a non-persistent topic, with
// a clear error: a seek, the last message id (a reader's HasNext says
// false), and the admin calls on a backlog (405, as Pulsar).
func TestNonPersistentRefusals(t *testing.T) {
	e := newEnv(t, nil)
	cl := e.client()
	const local, topic = "np-refused", "non-persistent://public/default/np-refused"
	cons, err := cl.Subscribe(client.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	waitPermits(t, e, local, "s", 1)
	ids := produce(t, p, 0, 1)
	if err := cons.Seek(ids[0]); !errors.Is(err, client.ErrNotAllowed) {
		t.Fatalf("seek: %v", err)
	}
	if err := cons.SeekByTime(time.Now()); !errors.Is(err, client.ErrNotAllowed) {
		t.Fatalf("seek by time: %v", err)
	}
	// The consumer goes on after the refusals.
	if m := receiveN(t, cons, 1)[0]; string(m.Payload()) != "m-00000" {
		t.Fatalf("received %q", m.Payload())
	}
	r, err := cl.CreateReader(client.ReaderOptions{Topic: topic, StartMessageID: client.EarliestMessageID()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.HasNext() {
		t.Fatal("HasNext on a non-persistent topic")
	}

	base := "/admin/v2/non-persistent/public/default/" + local
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, base + "/lastMessageId"},
		{http.MethodPost, base + "/terminate"},
		{http.MethodGet, base + "/internal-info"},
		{http.MethodGet, base + "/messageid/0"},
		{http.MethodGet, base + "/ledger/0/entry/0"},
		{http.MethodPost, base + "/subscription/s/skip/1"},
		{http.MethodPost, base + "/subscription/s/skip_all"},
		{http.MethodPost, base + "/subscription/s/expireMessages/1"},
		{http.MethodPost, base + "/all_subscription/expireMessages/1"},
		{http.MethodPost, base + "/subscription/s/resetcursor/0"},
		{http.MethodGet, base + "/subscription/s/position/1"},
	} {
		code, body, err := adminDo(e, c.method, c.path, nil)
		if err != nil || code != http.StatusMethodNotAllowed || !bytes.Contains(body, []byte("non-persistent")) {
			t.Errorf("%s %s: %d %s %v", c.method, c.path, code, body, err)
		}
	}
}

// npRawPair connects to the broker with Pulsar's protocol and opens, on
// non-persistent topic public/default/local, consumer 1 (Exclusive,
// subscription "s", 10 permits, granted before it returns) and producer
// 1 named "w" (which must have no last sequence id: nothing is
// deduplicated there).
func npRawPair(t *testing.T, e *env, local string) *rawPulsar {
	t.Helper()
	topic := "non-persistent://public/default/" + local
	r := dialPulsar(t, e.b.Addr())
	r.connect()
	r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pulsarpb.CommandSubscribe{
		Topic: proto.String(topic), Subscription: proto.String("s"), SubType: pulsarpb.CommandSubscribe_Exclusive.Enum(),
		ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(1), Durable: proto.Bool(true)}}, nil)
	if got := r.next(); got.GetSuccess().GetRequestId() != 1 {
		t.Fatalf("SUBSCRIBE answered %v", got)
	}
	r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_FLOW.Enum(), Flow: &pulsarpb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(10)}}, nil)
	waitPermits(t, e, local, "s", 1)
	r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PRODUCER.Enum(), Producer: &pulsarpb.CommandProducer{
		Topic: proto.String(topic), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(2), ProducerName: proto.String("w")}}, nil)
	if got := r.next(); got.GetProducerSuccess().GetProducerName() != "w" || got.GetProducerSuccess().GetLastSequenceId() != -1 {
		t.Fatalf("PRODUCER answered %v", got)
	}
	return r
}

// Pulsar's protocol on a non-persistent topic: the receipt's id is the id
// the consumers get (distinct and growing, where Pulsar gives 0:0 to
// all), acknowledgements (with an ack set too) are answered with success,
// and SEEK and GET_LAST_MESSAGE_ID are refused with NotAllowedError; the
// consumer goes on after them. GET_TOPICS_OF_NAMESPACE lists it in the
// modes that take non-persistent topics.
func TestPulsarProtocolNonPersistent(t *testing.T) {
	e := newEnv(t, nil)
	const topic = "non-persistent://public/default/np-raw"
	r := npRawPair(t, e, "np-raw")
	var receipts []*pulsarpb.MessageIdData
	var delivered []*pulsarpb.MessageIdData
	for i := 0; i < 3; i++ {
		md := &pulsarpb.MessageMetadata{ProducerName: proto.String("w"), SequenceId: proto.Uint64(uint64(i)), PublishTime: proto.Uint64(uint64(time.Now().UnixMilli()))}
		b, err := entry.Encode(md, []byte(fmt.Sprint("np-", i)))
		if err != nil {
			t.Fatal(err)
		}
		r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SEND.Enum(), Send: &pulsarpb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(uint64(i))}}, b)
	}
	for len(receipts) < 3 || len(delivered) < 3 {
		f, err := r.r.Read()
		if err != nil {
			t.Fatal(err)
		}
		switch f.Cmd.GetType() {
		case pulsarpb.BaseCommand_SEND_RECEIPT:
			receipts = append(receipts, f.Cmd.GetSendReceipt().GetMessageId())
		case pulsarpb.BaseCommand_MESSAGE:
			_, body, err := entry.Decode(f.Payload)
			if err != nil || string(body) != fmt.Sprint("np-", len(delivered)) {
				t.Fatalf("message %d: %q %v", len(delivered), body, err)
			}
			delivered = append(delivered, f.Cmd.GetMessage().GetMessageId())
		case pulsarpb.BaseCommand_PING:
		default:
			t.Fatalf("unexpected %v", f.Cmd)
		}
	}
	for i := range receipts {
		if !proto.Equal(receipts[i], delivered[i]) || i > 0 && receipts[i].GetEntryId() != receipts[i-1].GetEntryId()+1 {
			t.Fatalf("ids: receipts %v, delivered %v", receipts, delivered)
		}
	}
	r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_ACK.Enum(), Ack: &pulsarpb.CommandAck{ConsumerId: proto.Uint64(1),
		AckType: pulsarpb.CommandAck_Individual.Enum(), RequestId: proto.Uint64(3),
		MessageId: []*pulsarpb.MessageIdData{{LedgerId: receipts[0].LedgerId, EntryId: receipts[0].EntryId, AckSet: []int64{2}}}}}, nil)
	if got := r.next().GetAckResponse(); got.GetRequestId() != 3 || got.Error != nil {
		t.Fatalf("ACK answered %v", got)
	}
	r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SEEK.Enum(), Seek: &pulsarpb.CommandSeek{ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(4),
		MessageId: receipts[0]}}, nil)
	if got := r.next().GetError(); got.GetRequestId() != 4 || got.GetError() != pulsarpb.ServerError_NotAllowedError || !strings.Contains(got.GetMessage(), "non-persistent") {
		t.Fatalf("SEEK answered %v", got)
	}
	r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_GET_LAST_MESSAGE_ID.Enum(), GetLastMessageId: &pulsarpb.CommandGetLastMessageId{
		ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(5)}}, nil)
	if got := r.next().GetError(); got.GetRequestId() != 5 || got.GetError() != pulsarpb.ServerError_NotAllowedError {
		t.Fatalf("GET_LAST_MESSAGE_ID answered %v", got)
	}
	for i, mode := range []pulsarpb.CommandGetTopicsOfNamespace_Mode{pulsarpb.CommandGetTopicsOfNamespace_PERSISTENT,
		pulsarpb.CommandGetTopicsOfNamespace_NON_PERSISTENT, pulsarpb.CommandGetTopicsOfNamespace_ALL} {
		req := uint64(10 + i)
		r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_GET_TOPICS_OF_NAMESPACE.Enum(), GetTopicsOfNamespace: &pulsarpb.CommandGetTopicsOfNamespace{
			RequestId: proto.Uint64(req), Namespace: proto.String("public/default"), Mode: mode.Enum()}}, nil)
		got := r.next().GetGetTopicsOfNamespaceResponse()
		if has := slices.Contains(got.GetTopics(), topic); got.GetRequestId() != req || has == (mode == pulsarpb.CommandGetTopicsOfNamespace_PERSISTENT) {
			t.Fatalf("GET_TOPICS_OF_NAMESPACE %v answered %v", mode, got)
		}
	}
	// The consumer goes on.
	md := &pulsarpb.MessageMetadata{ProducerName: proto.String("w"), SequenceId: proto.Uint64(3), PublishTime: proto.Uint64(uint64(time.Now().UnixMilli()))}
	b, _ := entry.Encode(md, []byte("np-3"))
	r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SEND.Enum(), Send: &pulsarpb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(3)}}, b)
	for got := 0; got < 2; {
		f, err := r.r.Read()
		if err != nil {
			t.Fatal(err)
		}
		switch f.Cmd.GetType() {
		case pulsarpb.BaseCommand_SEND_RECEIPT, pulsarpb.BaseCommand_MESSAGE:
			got++
		}
	}
}

// The admin API under /admin/v2/non-persistent: a topic is created by
// loading it (409 the second time), listed while loaded, in its own
// domain only; a partitioned one is metadata, listed with its
// partitions; stats of one nobody has loaded are 404; deletion unloads;
// the namespace's topic list takes Pulsar's mode.
func TestNonPersistentAdmin(t *testing.T) {
	e := newEnv(t, nil)
	const ns = "/admin/v2/non-persistent/public/default"
	do := func(method, path string, body any, want int) []byte {
		t.Helper()
		code, out, err := adminDo(e, method, path, body)
		if err != nil || code != want {
			t.Fatalf("%s %s: %d %s %v, want %d", method, path, code, out, err, want)
		}
		return out
	}
	list := func(path string) []string {
		t.Helper()
		l, err := adminGetJSON[[]string](e, path)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(l)
		return l
	}
	do(http.MethodGet, ns+"/np-admin/stats", nil, http.StatusNotFound)
	do(http.MethodPut, ns+"/np-admin", nil, http.StatusNoContent)
	do(http.MethodPut, ns+"/np-admin", nil, http.StatusConflict)
	do(http.MethodPut, ns+"/np-parts/partitions", 2, http.StatusNoContent)
	do(http.MethodPut, "/admin/v2/persistent/public/default/p-admin", nil, http.StatusNoContent)
	if got, want := list(ns), []string{"non-persistent://public/default/np-admin",
		"non-persistent://public/default/np-parts-partition-0", "non-persistent://public/default/np-parts-partition-1"}; !slices.Equal(got, want) {
		t.Fatalf("non-persistent list %v, want %v", got, want)
	}
	if got := list(ns + "/partitioned"); !slices.Equal(got, []string{"non-persistent://public/default/np-parts"}) {
		t.Fatalf("non-persistent partitioned list %v", got)
	}
	if got := list("/admin/v2/persistent/public/default"); !slices.Equal(got, []string{"persistent://public/default/p-admin"}) {
		t.Fatalf("persistent list %v", got)
	}
	if got := list("/admin/v2/persistent/public/default/partitioned"); len(got) != 0 {
		t.Fatalf("persistent partitioned list %v", got)
	}
	for mode, want := range map[string]int{"": 1, "?mode=PERSISTENT": 1, "?mode=NON_PERSISTENT": 3, "?mode=ALL": 4} {
		if got := list("/admin/v2/namespaces/public/default/topics" + mode); len(got) != want {
			t.Fatalf("namespace topics%s: %v, want %d", mode, got, want)
		}
	}
	do(http.MethodGet, "/admin/v2/namespaces/public/default/topics?mode=SOME", nil, http.StatusBadRequest)
	if st := npStatsOf(t, e, "np-admin"); st.MsgDropCounter == nil || len(st.Subscriptions) != 0 {
		t.Fatalf("stats of an idle topic: %+v", st)
	}
	if got := do(http.MethodGet, ns+"/np-parts/partitions", nil, http.StatusOK); !bytes.Contains(got, []byte(`"partitions":2`)) {
		t.Fatalf("partitions: %s", got)
	}
	// Schemas: the admin API's schema paths (no domain) reach a topic
	// that exists only as non-persistent; the schema is its persistent
	// namesake's too, as in Pulsar.
	schema := map[string]any{"type": "JSON", "schema": `{"type":"record","name":"R","fields":[]}`, "properties": map[string]string{}}
	do(http.MethodPost, "/admin/v2/schemas/public/default/np-admin/schema", schema, http.StatusOK)
	if got := do(http.MethodGet, "/admin/v2/schemas/public/default/np-admin/schema", nil, http.StatusOK); !bytes.Contains(got, []byte(`"JSON"`)) {
		t.Fatalf("schema: %s", got)
	}
	do(http.MethodPost, "/admin/v2/schemas/public/default/np-none/schema", schema, http.StatusNotFound)
	// A subscription created by the admin API stays, with no consumer.
	do(http.MethodPut, ns+"/np-admin/subscription/kept", nil, http.StatusNoContent)
	if subs := list(ns + "/np-admin/subscriptions"); !slices.Equal(subs, []string{"kept"}) {
		t.Fatalf("subscriptions %v", subs)
	}
	do(http.MethodDelete, ns+"/np-admin/subscription/kept", nil, http.StatusNoContent)
	// A namespace with non-persistent topics is not empty.
	do(http.MethodPut, "/admin/v2/namespaces/public/np-ns", nil, http.StatusNoContent)
	do(http.MethodPut, "/admin/v2/non-persistent/public/np-ns/x", nil, http.StatusNoContent)
	do(http.MethodDelete, "/admin/v2/namespaces/public/np-ns", nil, http.StatusConflict)
	do(http.MethodDelete, "/admin/v2/non-persistent/public/np-ns/x", nil, http.StatusNoContent)
	do(http.MethodDelete, "/admin/v2/namespaces/public/np-ns", nil, http.StatusNoContent)

	do(http.MethodDelete, ns+"/np-admin", nil, http.StatusNoContent)
	do(http.MethodGet, ns+"/np-admin/stats", nil, http.StatusNotFound)
	do(http.MethodDelete, ns+"/np-parts/partitions", nil, http.StatusNoContent)
	if got := list(ns); len(got) != 0 {
		t.Fatalf("after the deletes: %v", got)
	}
	// The persistent topic of the same name is another topic.
	do(http.MethodGet, "/admin/v2/persistent/public/default/p-admin/stats", nil, http.StatusOK)
	do(http.MethodGet, ns+"/p-admin/stats", nil, http.StatusNotFound)
}

// A non-persistent topic with no producer and no subscription at two
// retention checks in a row is unloaded (it holds nothing); one idle at
// one check only, or in use, stays.
func TestNonPersistentIdleUnloaded(t *testing.T) {
	// The checks are the test's (RetainNow), not the loop's.
	e := newEnv(t, func(c *broker.Config) { c.RetentionCheckInterval = time.Hour })
	cl := e.client()
	const idle, busy = "non-persistent://public/default/np-idle", "non-persistent://public/default/np-busy"
	if code, body, err := adminDo(e, http.MethodPut, "/admin/v2/non-persistent/public/default/np-idle", nil); err != nil || code != http.StatusNoContent {
		t.Fatalf("create: %d %s %v", code, body, err)
	}
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: busy})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	owned := func(local string) bool {
		_, err := e.c.Store.Get(ctxT(t), metastore.OwnerKey("public/default/non-persistent/"+local))
		return err == nil
	}
	retain := func() {
		t.Helper()
		for _, topic := range []string{idle, busy} {
			e.b.RetainNow(topic)
		}
	}
	retain()
	if !owned("np-idle") || !owned("np-busy") {
		t.Fatal("unloaded after one check")
	}
	retain()
	if owned("np-idle") {
		t.Fatal("an idle topic stayed after two checks")
	}
	retain()
	if !owned("np-busy") {
		t.Fatal("the topic with a producer was unloaded")
	}
	produce(t, p, 0, 1)
}

// A subscription made while its topic unloads is refused (the client
// looks the topic up again) rather than left on the closed topic, where
// no message would reach it.
func TestSubscriptionRacingUnload(t *testing.T) {
	e := newEnv(t, nil)
	for _, topic := range []string{"non-persistent://public/default/np-race", "persistent://public/default/p-race"} {
		if err := e.b.GetTopic(ctxT(t), topic, true); err != nil {
			t.Fatal(err)
		}
		broker.SetTestHookSubscriptionCreating(func() {
			if err := e.b.Unload(ctxT(t), topic); err != nil {
				t.Error(err)
			}
		})
		err := e.b.Subscribe(ctxT(t), topic, "s")
		broker.SetTestHookSubscriptionCreating(nil)
		if !errors.Is(err, broker.ErrTopicClosed) {
			t.Fatalf("%s: subscription made while it unloaded: %v", topic, err)
		}
	}
}

// A non-persistent topic does not deduplicate, even where the namespace
// does (it keeps no sequence ids): a message sent twice with one sequence
// id is delivered twice, and nothing is stored for it.
func TestNonPersistentIgnoresDeduplication(t *testing.T) {
	e := newEnv(t, func(c *broker.Config) { c.Deduplication = true })
	r := npRawPair(t, e, "np-dedup")
	for i := 0; i < 2; i++ {
		md := &pulsarpb.MessageMetadata{ProducerName: proto.String("w"), SequenceId: proto.Uint64(7), PublishTime: proto.Uint64(uint64(time.Now().UnixMilli()))}
		b, err := entry.Encode(md, []byte("again"))
		if err != nil {
			t.Fatal(err)
		}
		r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SEND.Enum(), Send: &pulsarpb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(7)}}, b)
	}
	messages := 0
	for receipts := 0; receipts < 2 || messages < 2; {
		switch f := r.next(); f.GetType() {
		case pulsarpb.BaseCommand_SEND_RECEIPT:
			if f.GetSendReceipt().GetMessageId().GetEntryId() != uint64(receipts) {
				t.Fatalf("receipt %d: %v (a duplicate's receipt names the first)", receipts, f)
			}
			receipts++
		case pulsarpb.BaseCommand_MESSAGE:
			messages++
		default:
			t.Fatalf("unexpected %v", f)
		}
	}
	if _, err := e.c.Store.Get(ctxT(t), metastore.DedupKey("public/default/non-persistent/np-dedup")); !errors.Is(err, metastore.ErrNotFound) {
		t.Fatalf("deduplication state stored: %v", err)
	}
}

// A partitioned non-persistent topic over two brokers: a client that
// knows only one of them is sent to each partition's owner, and gets
// every message once; the partitioned stats, asked of either broker,
// gather both brokers' partitions.
func TestNonPersistentPartitionedAcrossBrokers(t *testing.T) {
	e := newEnv(t, nil)
	other := e.startAnother(nil)
	cl := clientOf(t, other)
	const parts = 4
	name, p := spreadPartitionedTopicIn(t, e, cl, "non-persistent", "np-spread-", parts, 2*parts)
	defer p.Close()
	cons, err := cl.Subscribe(client.ConsumerOptions{Topic: "non-persistent://public/default/" + name, SubscriptionName: "s", ReceiverQueueSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	for i := 0; i < parts; i++ {
		waitPermits(t, e, fmt.Sprint(name, "-partition-", i), "s", 1)
	}
	const n = 40
	produce(t, p, 0, n)
	seen := map[string]bool{}
	for _, m := range receiveN(t, cons, n) {
		if seen[string(m.Payload())] {
			t.Fatalf("%q twice", m.Payload())
		}
		seen[string(m.Payload())] = true
	}
	for _, via := range []string{e.b.HTTPAddr(), other.HTTPAddr()} {
		var st struct {
			MsgInCounter   int64  `json:"msgInCounter"`
			MsgDropCounter *int64 `json:"msgDropCounter"`
			Subscriptions  map[string]struct {
				MsgDropCounter *int64 `json:"msgDropCounter"`
			}
			Partitions map[string]any
		}
		code, body, err := adminDoAt(via, http.MethodGet, "/admin/v2/non-persistent/public/default/"+name+"/partitioned-stats", nil)
		if err != nil || code != http.StatusOK || json.Unmarshal(body, &st) != nil || st.MsgInCounter != 2*parts+n || len(st.Partitions) != parts ||
			st.MsgDropCounter == nil || *st.MsgDropCounter != 0 || st.Subscriptions["s"].MsgDropCounter == nil {
			t.Fatalf("partitioned stats via %s: %d %s %v", via, code, body, err)
		}
	}
}

// fmtPtr shows a counter that may be missing.
func fmtPtr(v *int64) string {
	if v == nil {
		return "nil"
	}
	return fmt.Sprint(*v)
}
