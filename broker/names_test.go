package broker_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/proto/brokerpb"
)

// dialBroker is a raw gRPC client of a broker: what the broker itself
// answers, whatever the SDK checks first.
func dialBroker(t *testing.T, addr string) brokerpb.BrokerClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return brokerpb.NewBrokerClient(cc)
}

// wireError is a broker's gRPC error: its code, reason and message.
func wireError(err error) (codes.Code, string, string) {
	st := status.Convert(err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return st.Code(), info.Reason, st.Message()
		}
	}
	return st.Code(), "", st.Message()
}

// openProducer opens a producer stream on topic and returns the broker's
// answer (nil if it opened).
func openProducer(t *testing.T, bc brokerpb.BrokerClient, topic string) error {
	t.Helper()
	stream, err := bc.Produce(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.CloseSend()
	if err := stream.Send(&brokerpb.ProduceRequest{Request: &brokerpb.ProduceRequest_Open{Open: &brokerpb.ProducerOpen{Topic: topic}}}); err != nil {
		t.Fatal(err)
	}
	_, err = stream.Recv()
	return err
}

// adminError is an admin API answer: status and JSON code.
func adminError(t *testing.T, e *env, method, path string, body any) (int, string) {
	t.Helper()
	code, out, err := adminDo(e, method, path, body)
	if err != nil {
		t.Fatal(err)
	}
	var reason struct {
		Reason string `json:"reason"`
		Code   string `json:"errorCode"`
	}
	if code/100 != 2 && (json.Unmarshal(out, &reason) != nil || reason.Reason == "") {
		t.Fatalf("%s %s: %d without a JSON reason: %s", method, path, code, out)
	}
	return code, reason.Code
}

// "T-partition-N" is a topic only if T is a partitioned topic with more
// than N partitions: lookups, producers and admin creation of any other
// such name fail with TOPIC_NOT_FOUND and create nothing; on every broker,
// including one that would send the client to another broker.
func TestPartitionNamesNeedAPartitionedTopic(t *testing.T) {
	e := newEnv(t, nil)
	other := e.startAnother(nil)
	if code, body, err := adminDo(e, "PUT", "/admin/v2/persistent/public/default/x/partitions", 3); err != nil || code/100 != 2 {
		t.Fatalf("create x with 3 partitions: %d %s %v", code, body, err)
	}
	brokers := []brokerpb.BrokerClient{dialBroker(t, e.b.Addr()), dialBroker(t, other.Addr())}
	for _, bad := range []string{"nopart-partition-99999", "nopart-partition-0", "x-partition-99999", "x-partition-3"} {
		full := "persistent://public/default/" + bad
		for i, bc := range brokers {
			_, err := bc.Lookup(ctxT(t), &brokerpb.LookupRequest{Topic: full})
			if code, reason, msg := wireError(err); code != codes.NotFound || reason != "TOPIC_NOT_FOUND" || !strings.Contains(msg, "partition") {
				t.Errorf("lookup %s at broker %d: %v, want NOT_FOUND, TOPIC_NOT_FOUND and why", bad, i, err)
			}
			if code, reason, _ := wireError(openProducer(t, bc, full)); code != codes.NotFound || reason != "TOPIC_NOT_FOUND" {
				t.Errorf("producer on %s at broker %d: %v %v", bad, i, code, reason)
			}
		}
		if code, reason := adminError(t, e, "PUT", "/admin/v2/persistent/public/default/"+bad, nil); code != http.StatusNotFound || reason != "TOPIC_NOT_FOUND" {
			t.Errorf("admin create %s: %d %s, want 404 TOPIC_NOT_FOUND", bad, code, reason)
		}
	}
	// The SDK reports it as a missing topic, for producers and consumers.
	cl := clientOf(t, e.b, other)
	if _, err := cl.CreateProducer(client.ProducerOptions{Topic: "nopart-partition-99999"}); !errors.Is(err, client.ErrTopicNotFound) {
		t.Errorf("SDK producer: %v", err)
	}
	if _, err := cl.Subscribe(client.ConsumerOptions{Topic: "x-partition-99999", SubscriptionName: "s"}); !errors.Is(err, client.ErrTopicNotFound) {
		t.Errorf("SDK consumer: %v", err)
	}
	// Nothing was created.
	topics, err := adminGetJSON[[]string](e, "/admin/v2/persistent/public/default")
	if err != nil {
		t.Fatal(err)
	}
	for _, tn := range topics {
		// The list names every partition of x, as Pulsar's does.
		legit := tn == "persistent://public/default/x-partition-0" || tn == "persistent://public/default/x-partition-1" || tn == "persistent://public/default/x-partition-2"
		if strings.HasPrefix(tn, "persistent://public/default/nopart") || strings.Contains(tn, "-partition-") && !legit {
			t.Errorf("created: %s (topics %v)", tn, topics)
		}
	}
	// A partition of x works, by its name, through either broker.
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "x-partition-2"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Send(ctxT(t), &client.ProducerMessage{Payload: []byte("m")}); err != nil {
		t.Fatal(err)
	}
	for i, bc := range brokers {
		if _, err := bc.Lookup(ctxT(t), &brokerpb.LookupRequest{Topic: "persistent://public/default/x-partition-2"}); err != nil {
			t.Errorf("lookup x-partition-2 at broker %d: %v", i, err)
		}
	}
	// A partitioned topic may not have "-partition-" in its name at all
	// (Pulsar's validatePartitionedTopicName).
	for _, name := range []string{"y-partition-1", "y-partition-abc"} {
		if code, reason := adminError(t, e, "PUT", "/admin/v2/persistent/public/default/"+name+"/partitions", 2); code != http.StatusBadRequest || reason != "INVALID_ARGUMENT" {
			t.Errorf("create partitioned %s: %d %s, want 400", name, code, reason)
		}
	}
	// "-partition-" not followed by an index is an ordinary name.
	if code, _ := adminError(t, e, "PUT", "/admin/v2/persistent/public/default/z-partition-abc", nil); code != http.StatusNoContent {
		t.Errorf("create z-partition-abc: %d", code)
	}
}

// Topic names follow Pulsar's character rules (see proto/topicname): a
// blank name is refused by the broker itself (gRPC INVALID_ARGUMENT with
// INVALID_TOPIC_NAME, HTTP 400), whatever the client checked; a name with
// a space inside is a valid Pulsar topic and works.
func TestTopicNameCharacters(t *testing.T) {
	e := newEnv(t, nil)
	bc := dialBroker(t, e.b.Addr())
	for _, bad := range []string{"persistent://public/default/   ", "  ", "persistent://public/default/t\u0085", "persistent://bad tenant/ns/t"} {
		_, err := bc.Lookup(ctxT(t), &brokerpb.LookupRequest{Topic: bad})
		if code, reason, _ := wireError(err); code != codes.InvalidArgument || reason != "INVALID_TOPIC_NAME" {
			t.Errorf("lookup %q: %v", bad, err)
		}
		if code, reason, _ := wireError(openProducer(t, bc, bad)); code != codes.InvalidArgument || reason != "INVALID_TOPIC_NAME" {
			t.Errorf("producer on %q: %v %v", bad, code, reason)
		}
	}
	for _, bad := range []string{"%20%20%20", "%E3%80%80", "t%C2%85"} {
		if code, reason := adminError(t, e, "PUT", "/admin/v2/persistent/public/default/"+bad, nil); code != http.StatusBadRequest || reason != "INVALID_TOPIC_NAME" {
			t.Errorf("admin create %s: %d %s, want 400 INVALID_TOPIC_NAME", bad, code, reason)
		}
	}
	// As in Pulsar, "bad topic" is a topic.
	if code, _ := adminError(t, e, "PUT", "/admin/v2/persistent/public/default/"+url.PathEscape("bad topic"), nil); code != http.StatusNoContent {
		t.Fatalf("admin create 'bad topic': %d", code)
	}
	p, err := e.client().CreateProducer(client.ProducerOptions{Topic: "bad topic"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Send(ctxT(t), &client.ProducerMessage{Payload: []byte("m")}); err != nil {
		t.Fatal(err)
	}
}

// A message between the broker's limit and its transport limit (max
// message size + 1 MiB), sent by a client whose own limit is raised above
// the broker's: the SDK learns the broker's limit when the producer
// connects and fails that message alone at once; a raw client that sends
// it anyway gets the stream ended as too large (correctness sweep, item
// 4).
func TestMessageOverTheTransportLimit(t *testing.T) {
	e := newEnv(t, func(c *broker.Config) { c.MaxMessageSize = 10 << 10 })
	cl, err := client.NewClient(client.ClientOptions{URL: "magnetar://" + e.b.Addr(), MaxMessageSize: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "huge", SendTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Send(ctxT(t), &client.ProducerMessage{Payload: make([]byte, 3<<20)}); !errors.Is(err, client.ErrMessageTooLarge) {
		t.Fatalf("3 MiB message to a broker of 10 KiB: %v, want ErrMessageTooLarge", err)
	}
	if _, err := p.Send(ctxT(t), &client.ProducerMessage{Payload: []byte("fits")}); err != nil {
		t.Fatalf("send after the refused one: %v", err)
	}

	cc, err := grpc.NewClient(e.b.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(8<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	stream, err := brokerpb.NewBrokerClient(cc).Produce(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&brokerpb.ProduceRequest{Request: &brokerpb.ProduceRequest_Open{Open: &brokerpb.ProducerOpen{Topic: "huge"}}}); err != nil {
		t.Fatal(err)
	}
	r, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got := r.GetOpened().GetMaxMessageSize(); got != 10<<10 {
		t.Fatalf("ProducerOpened tells a limit of %d, want %d", got, 10<<10)
	}
	stream.Send(&brokerpb.ProduceRequest{Request: &brokerpb.ProduceRequest_Send{Send: &brokerpb.Send{SequenceId: 1, Payload: make([]byte, 3<<20)}}})
	// gRPC answers a message over the transport limit itself, before the
	// broker sees it: RESOURCE_EXHAUSTED, which the SDK reads as too large.
	_, err = stream.Recv()
	if code, reason, _ := wireError(err); reason != "MESSAGE_TOO_LARGE" && code != codes.ResourceExhausted {
		t.Fatalf("raw 3 MiB send: %v, want the stream ended as too large", err)
	}
}
