package broker_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/internal/pulsarwire"
	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/internal/testutil"
	"github.com/magnetar-io/magnetar/proto/brokerpb"
	"github.com/magnetar-io/magnetar/proto/entry"
	"github.com/magnetar-io/magnetar/proto/pulsarpb"
)

// rawPulsar is a client of Pulsar's binary protocol that sends frames
// as given, for the broker's answers to what a real client would not
// send. (Pulsar's own client is driven in e2e/pulsarclient_test.go.)
type rawPulsar struct {
	t    *testing.T
	conn net.Conn
	r    *pulsarwire.Reader
}

func dialPulsar(t *testing.T, addr string) *rawPulsar {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	return &rawPulsar{t: t, conn: c, r: pulsarwire.NewReader(c, 10<<20)}
}

func (p *rawPulsar) send(cmd *pulsarpb.BaseCommand, payload []byte) {
	p.t.Helper()
	b, err := pulsarwire.Append(nil, cmd, payload)
	if err != nil {
		p.t.Fatal(err)
	}
	if _, err := p.conn.Write(b); err != nil {
		p.t.Fatal(err)
	}
}

// next reads frames until one that is not a PING.
func (p *rawPulsar) next() *pulsarpb.BaseCommand {
	p.t.Helper()
	for {
		f, err := p.r.Read()
		if err != nil {
			p.t.Fatalf("read: %v", err)
		}
		if f.Cmd.GetType() != pulsarpb.BaseCommand_PING {
			return f.Cmd
		}
	}
}

func (p *rawPulsar) connect() {
	p.t.Helper()
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_CONNECT.Enum(), Connect: &pulsarpb.CommandConnect{
		ClientVersion: proto.String("raw"), ProtocolVersion: proto.Int32(20)}}, nil)
	if got := p.next(); got.GetType() != pulsarpb.BaseCommand_CONNECTED || got.GetConnected().GetProtocolVersion() != 19 || got.GetConnected().GetMaxMessageSize() <= 0 {
		p.t.Fatalf("CONNECT answered %v, want CONNECTED with version 19 and the maximum message size", got)
	}
}

// txnCommand is a transaction command of type typ for request id, its
// body (which pulsarpb leaves out) in BaseCommand's field of the type's
// number, as Pulsar's clients send it.
func txnCommand(typ pulsarpb.BaseCommand_Type, id uint64) *pulsarpb.BaseCommand {
	body := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), id)
	body = protowire.AppendVarint(protowire.AppendTag(body, 3, protowire.VarintType), 0) // tc_id
	cmd := &pulsarpb.BaseCommand{Type: typ.Enum()}
	cmd.ProtoReflect().SetUnknown(protowire.AppendBytes(protowire.AppendTag(nil, protowire.Number(typ), protowire.BytesType), body))
	return cmd
}

// closed reports whether the broker closed the connection.
func (p *rawPulsar) closed() bool {
	_, err := p.r.Read()
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}

// The protocol's edges: CONNECT first; PING answered; what the broker
// does not serve answered with Pulsar's ERROR, or the connection closed
// when there is no request to answer; a
// SEND whose checksum does not match refused, and one for an unknown
// producer.
func TestPulsarProtocolEdges(t *testing.T) {
	e := newEnv(t, nil)
	addr := e.b.Addr()

	// A connection that does not start with CONNECT is closed.
	p := dialPulsar(t, addr)
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PING.Enum(), Ping: &pulsarpb.CommandPing{}}, nil)
	if !p.closed() {
		t.Fatal("a connection started by PING stayed open")
	}

	p = dialPulsar(t, addr)
	p.connect()
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PING.Enum(), Ping: &pulsarpb.CommandPing{}}, nil)
	if got := p.next(); got.GetType() != pulsarpb.BaseCommand_PONG {
		t.Fatalf("PING answered %v", got)
	}
	// A consumer on a tenant that does not exist: ERROR for its request.
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pulsarpb.CommandSubscribe{
		Topic: proto.String("persistent://nobody/ns/t"), Subscription: proto.String("s"), SubType: pulsarpb.CommandSubscribe_Exclusive.Enum(),
		ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(42)}}, nil)
	if got := p.next(); got.GetType() != pulsarpb.BaseCommand_ERROR || got.GetError().GetRequestId() != 42 || got.GetError().GetMessage() == "" {
		t.Fatalf("SUBSCRIBE to a missing namespace answered %v, want ERROR for request 42 with a reason", got)
	}
	// A producer, then a SEND whose checksum is wrong, then one for a
	// producer that does not exist.
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PRODUCER.Enum(), Producer: &pulsarpb.CommandProducer{
		Topic: proto.String("persistent://public/default/raw"), ProducerId: proto.Uint64(2), RequestId: proto.Uint64(44)}}, nil)
	first := p.next()
	if first.GetType() != pulsarpb.BaseCommand_PRODUCER_SUCCESS || first.GetProducerSuccess().GetProducerName() == "" {
		t.Fatalf("PRODUCER answered %v", first)
	}
	// Asked again for the same id (a client whose first answer was late):
	// the same producer, as Pulsar answers.
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PRODUCER.Enum(), Producer: &pulsarpb.CommandProducer{
		Topic: proto.String("persistent://public/default/raw"), ProducerId: proto.Uint64(2), RequestId: proto.Uint64(45)}}, nil)
	if got := p.next().GetProducerSuccess(); got.GetRequestId() != 45 || got.GetProducerName() != first.GetProducerSuccess().GetProducerName() {
		t.Fatalf("PRODUCER again answered %v, want the same producer", got)
	}
	good, err := entry.Encode(&pulsarpb.MessageMetadata{ProducerName: proto.String("x"), SequenceId: proto.Uint64(0), PublishTime: proto.Uint64(1)}, []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(good)
	bad[len(bad)-1] ^= 1
	sendCmd := func(producer, seq uint64) *pulsarpb.BaseCommand {
		return &pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SEND.Enum(), Send: &pulsarpb.CommandSend{ProducerId: proto.Uint64(producer), SequenceId: proto.Uint64(seq)}}
	}
	p.send(sendCmd(2, 0), good)
	if got := p.next(); got.GetType() != pulsarpb.BaseCommand_SEND_RECEIPT || got.GetSendReceipt().GetSequenceId() != 0 || got.GetSendReceipt().GetMessageId().GetLedgerId() == 0 {
		t.Fatalf("SEND answered %v, want a receipt with its position", got)
	}
	p.send(sendCmd(2, 1), bad)
	if got := p.next(); got.GetSendError().GetError() != pulsarpb.ServerError_ChecksumError || got.GetSendError().GetSequenceId() != 1 {
		t.Fatalf("SEND with a bad checksum answered %v, want SEND_ERROR ChecksumError", got)
	}
	p.send(sendCmd(9, 0), good)
	if got := p.next(); got.GetSendError().GetError() != pulsarpb.ServerError_NotAllowedError || got.GetSendError().GetProducerId() != 9 {
		t.Fatalf("SEND for an unknown producer answered %v", got)
	}
	// Transaction commands are refused as Pulsar's broker with
	// transactions off refuses them: ERROR NotAllowed for the request.
	for i, typ := range []pulsarpb.BaseCommand_Type{pulsarpb.BaseCommand_TC_CLIENT_CONNECT_REQUEST, pulsarpb.BaseCommand_NEW_TXN,
		pulsarpb.BaseCommand_ADD_PARTITION_TO_TXN, pulsarpb.BaseCommand_END_TXN} {
		id := uint64(100 + i)
		p.send(txnCommand(typ, id), nil)
		if got := p.next(); got.GetError().GetRequestId() != id || got.GetError().GetError() != pulsarpb.ServerError_NotAllowedError ||
			!strings.Contains(got.GetError().GetMessage(), "Transactions are not enabled") {
			t.Fatalf("%v answered %v, want ERROR NotAllowedError for request %d", typ, got, id)
		}
	}
	// One without its body (no request to answer), or a command the
	// broker does not serve, closes the connection, as Pulsar's broker
	// does.
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_NEW_TXN.Enum()}, nil)
	if !p.closed() {
		t.Fatal("NEW_TXN without its body did not close the connection")
	}
	p = dialPulsar(t, addr)
	p.connect()
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_CONNECTED.Enum(), Connected: &pulsarpb.CommandConnected{ServerVersion: proto.String("x")}}, nil)
	if !p.closed() {
		t.Fatal("CONNECTED from a client did not close the connection")
	}
	// A frame over the limit closes the connection before anything is
	// allocated for it.
	p = dialPulsar(t, addr)
	p.connect()
	huge := binary.BigEndian.AppendUint32(nil, 1<<30)
	if _, err := p.conn.Write(huge); err != nil {
		t.Fatal(err)
	}
	if !p.closed() {
		t.Fatal("a frame of 1 GiB did not close the connection")
	}
}

// await waits for ch to be closed, failing the test after a minute.
func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatalf("%s: not within a minute", what)
	}
}

// holdFirstAppend holds the next append once it is stored, before it is
// answered: entered is closed when it is held, release lets it go (and
// runs when the test ends, before the hook is reset).
func holdFirstAppend(t *testing.T) (entered <-chan struct{}, release func()) {
	in, out := make(chan struct{}), make(chan struct{})
	var once, released sync.Once
	broker.SetTestHookAppendDone(func() {
		once.Do(func() {
			close(in)
			<-out
		})
	})
	release = func() { released.Do(func() { close(out) }) }
	t.Cleanup(func() {
		release()
		broker.SetTestHookAppendDone(nil)
	})
	return in, release
}

// openProducer opens producer id on topic and returns SEND frames'
// payloads: good, and bad (its checksum wrong).
func (p *rawPulsar) openProducer(id uint64, topic string) (good, bad []byte) {
	p.t.Helper()
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PRODUCER.Enum(), Producer: &pulsarpb.CommandProducer{
		Topic: proto.String(topic), ProducerId: proto.Uint64(id), RequestId: proto.Uint64(id)}}, nil)
	if got := p.next(); got.GetType() != pulsarpb.BaseCommand_PRODUCER_SUCCESS {
		p.t.Fatalf("PRODUCER answered %v", got)
	}
	good, err := entry.Encode(&pulsarpb.MessageMetadata{ProducerName: proto.String("x"), SequenceId: proto.Uint64(0), PublishTime: proto.Uint64(1)}, []byte("hello"))
	if err != nil {
		p.t.Fatal(err)
	}
	bad = bytes.Clone(good)
	bad[len(bad)-1] ^= 1
	return good, bad
}

// sendCommand is a SEND of producer id's message seq.
func sendCommand(id, seq uint64) *pulsarpb.BaseCommand {
	return &pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SEND.Enum(), Send: &pulsarpb.CommandSend{ProducerId: proto.Uint64(id), SequenceId: proto.Uint64(seq)}}
}

// A producer's answers go out in the order of its SENDs: one refused at
// once (a bad checksum) is answered after the send before it, still
// being stored, as Pulsar's clients expect (pulsar-client-go closes the
// connection on a receipt out of order).
func TestPulsarProtocolAnswersInSendOrder(t *testing.T) {
	e := newEnv(t, nil)
	p := dialPulsar(t, e.b.Addr())
	p.connect()
	good, bad := p.openProducer(1, "persistent://public/default/ordered")
	entered, release := holdFirstAppend(t)
	p.send(sendCommand(1, 0), good)
	await(t, entered, "the first append")
	p.send(sendCommand(1, 1), bad)
	// PONG comes once the connection's reader has taken the bad SEND
	// (and refused it): nothing of the producer's may come before.
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PING.Enum(), Ping: &pulsarpb.CommandPing{}}, nil)
	if got := p.next(); got.GetType() != pulsarpb.BaseCommand_PONG {
		t.Fatalf("while the first send is being stored: %v, want only the PONG", got)
	}
	release()
	if got := p.next(); got.GetType() != pulsarpb.BaseCommand_SEND_RECEIPT || got.GetSendReceipt().GetSequenceId() != 0 {
		t.Fatalf("first answer %v, want the receipt of send 0", got)
	}
	if got := p.next(); got.GetSendError().GetError() != pulsarpb.ServerError_ChecksumError || got.GetSendError().GetSequenceId() != 1 {
		t.Fatalf("second answer %v, want SEND_ERROR ChecksumError for send 1", got)
	}
}

// A producer with more sends than its slots (pulsarMaxInflight, 10,000)
// has them all answered, in order: each send's slot is given back once
// its answer is handed to the connection's writer.
func TestPulsarProtocolMoreSendsThanSlots(t *testing.T) {
	e := newEnv(t, nil)
	p := dialPulsar(t, e.b.Addr())
	p.conn.SetDeadline(time.Now().Add(3 * time.Minute)) // 10,100 appends, one at a time
	p.connect()
	p.openProducer(1, "persistent://public/default/many")
	const n = 10_000 + 100
	var frames []byte
	for seq := range uint64(n) {
		payload, err := entry.Encode(&pulsarpb.MessageMetadata{ProducerName: proto.String("x"), SequenceId: proto.Uint64(seq), PublishTime: proto.Uint64(1)}, []byte("m"))
		if err != nil {
			t.Fatal(err)
		}
		if frames, err = pulsarwire.Append(frames, sendCommand(1, seq), payload); err != nil {
			t.Fatal(err)
		}
	}
	wrote := make(chan error, 1)
	go func() { _, err := p.conn.Write(frames); wrote <- err }() // read meanwhile
	for seq := range uint64(n) {
		got := p.next() // the connection's deadline ends a stall
		if got.GetType() != pulsarpb.BaseCommand_SEND_RECEIPT || got.GetSendReceipt().GetSequenceId() != seq {
			t.Fatalf("answer %d: %v, want the receipt of send %d", seq, got, seq)
		}
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
}

// Refusals decided while an earlier send is being stored wait for it,
// each holding one of its producer's slots: past 10,000 the connection's
// reader waits for a slot (and TCP pushes back on the client) instead of
// piling up answers. Once the first send is answered, all are, in order.
func TestPulsarProtocolRefusalsWaitForSlots(t *testing.T) {
	e := newEnv(t, nil)
	p := dialPulsar(t, e.b.Addr())
	p.conn.SetDeadline(time.Now().Add(3 * time.Minute))
	p.connect()
	good, bad := p.openProducer(1, "persistent://public/default/refusals")
	entered, release := holdFirstAppend(t)
	full := make(chan struct{})
	var fullOnce sync.Once
	broker.SetTestHookSlotsFull(func() { fullOnce.Do(func() { close(full) }) })
	defer broker.SetTestHookSlotsFull(nil)
	p.send(sendCommand(1, 0), good)
	await(t, entered, "the first append")
	const refused = 10_000 // one more than the slots left
	var frames []byte
	for seq := uint64(1); seq <= refused; seq++ {
		var err error
		if frames, err = pulsarwire.Append(frames, sendCommand(1, seq), bad); err != nil {
			t.Fatal(err)
		}
	}
	wrote := make(chan error, 1)
	go func() { _, err := p.conn.Write(frames); wrote <- err }()
	await(t, full, "the reader waiting for a slot")
	release()
	if got := p.next(); got.GetType() != pulsarpb.BaseCommand_SEND_RECEIPT || got.GetSendReceipt().GetSequenceId() != 0 {
		t.Fatalf("first answer %v, want the receipt of send 0", got)
	}
	for seq := uint64(1); seq <= refused; seq++ {
		want := pulsarpb.ServerError_ServiceNotReady // after a failed send
		if seq == 1 {
			want = pulsarpb.ServerError_ChecksumError
		}
		if got := p.next(); got.GetSendError().GetError() != want || got.GetSendError().GetSequenceId() != seq {
			t.Fatalf("answer %d: %v, want SEND_ERROR %v", seq, got, want)
		}
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
}

// With authentication on, CONNECT needs a token the broker accepts:
// without one, ERROR AuthenticationError and the connection closes; with
// one, the role's grants apply to lookups.
func TestPulsarProtocolAuthentication(t *testing.T) {
	e := newAuthzEnv(t)
	p := dialPulsar(t, e.b.Addr())
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_CONNECT.Enum(), Connect: &pulsarpb.CommandConnect{ClientVersion: proto.String("raw")}}, nil)
	if got := p.next(); got.GetError().GetError() != pulsarpb.ServerError_AuthenticationError {
		t.Fatalf("CONNECT without a token: %v, want ERROR AuthenticationError", got)
	}
	if !p.closed() {
		t.Fatal("the connection stayed open")
	}
	p = dialPulsar(t, e.b.Addr())
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_CONNECT.Enum(), Connect: &pulsarpb.CommandConnect{ClientVersion: proto.String("raw"),
		AuthMethodName: proto.String("token"), AuthData: []byte(e.token(t, "nobody", time.Hour))}}, nil)
	if got := p.next(); got.GetType() != pulsarpb.BaseCommand_CONNECTED {
		t.Fatalf("CONNECT with a token: %v", got)
	}
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pulsarpb.CommandLookupTopic{
		Topic: proto.String("persistent://public/default/secret"), RequestId: proto.Uint64(7)}}, nil)
	if got := p.next(); got.GetLookupTopicResponse().GetError() != pulsarpb.ServerError_AuthorizationError {
		t.Fatalf("a lookup by a role with no grant: %v, want AuthorizationError", got)
	}
	// When a connection's token expires the broker asks a client that
	// supports it for a fresh one (AUTH_CHALLENGE, as Pulsar's does).
	// Connection a answers with a valid token and lives on past the first
	// one's expiry and leeway (it is challenged again when the second
	// expires), then answers with another role's token and is closed; b
	// does not answer and is closed once the verifier's leeway has passed;
	// c said nothing of refresh in its CONNECT: never challenged, closed
	// at the same time.
	connect := func(ttl time.Duration, refresh bool) *rawPulsar {
		t.Helper()
		p := dialPulsar(t, e.b.Addr())
		c := &pulsarpb.CommandConnect{ClientVersion: proto.String("raw"),
			AuthMethodName: proto.String("token"), AuthData: []byte(e.token(t, "admin", ttl))}
		if refresh {
			c.FeatureFlags = &pulsarpb.FeatureFlags{SupportsAuthRefresh: proto.Bool(true)}
		}
		p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_CONNECT.Enum(), Connect: c}, nil)
		if got := p.next(); got.GetType() != pulsarpb.BaseCommand_CONNECTED {
			t.Fatalf("CONNECT with a short token: %v", got)
		}
		return p
	}
	challenged := func(p *rawPulsar) {
		t.Helper()
		got := p.next()
		if c := got.GetAuthChallenge().GetChallenge(); got.GetType() != pulsarpb.BaseCommand_AUTH_CHALLENGE ||
			c.GetAuthMethodName() != "token" || string(c.GetAuthData()) != "PulsarAuthRefresh" {
			t.Fatalf("at the token's expiry: %v, want AUTH_CHALLENGE token/PulsarAuthRefresh", got)
		}
	}
	respond := func(p *rawPulsar, role string, ttl time.Duration) {
		p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_AUTH_RESPONSE.Enum(), AuthResponse: &pulsarpb.CommandAuthResponse{
			Response: &pulsarpb.AuthData{AuthMethodName: proto.String("token"), AuthData: []byte(e.token(t, role, ttl))}}}, nil)
	}
	start := time.Now()
	a, b, c := connect(time.Second, true), connect(time.Second, true), connect(time.Second, false)
	challenged(b)
	challenged(a)
	respond(a, "admin", 7*time.Second) // beyond the first token's expiry plus the 5 s leeway
	if !b.closed() {
		t.Fatal("a connection that answered no challenge outlived its token")
	}
	if f, err := c.r.Read(); err == nil {
		t.Fatalf("a client without refresh support got %v, want the connection closed and nothing else", f.Cmd)
	}
	if d := time.Since(start); d < 5*time.Second {
		t.Fatalf("closed %v after connecting with a 1 s token: before the verifier's leeway passed", d)
	}
	challenged(a) // the second token's expiry: the connection lived on
	respond(a, "nobody", time.Hour)
	if got := a.next(); got.GetError().GetError() != pulsarpb.ServerError_AuthenticationError {
		t.Fatalf("a fresh token for another role: %v, want ERROR AuthenticationError", got)
	}
	if !a.closed() {
		t.Fatal("the connection stayed open after a fresh token for another role")
	}
}

// The consumer side, frame by frame: SUBSCRIBE answered SUCCESS; FLOW
// lets MESSAGE frames through carrying the stored entries; an ACK with a
// request id is answered; GET_LAST_MESSAGE_ID; SEEK closes the consumer
// and then answers SUCCESS (the client subscribes again, as with Pulsar);
// UNSUBSCRIBE refused while another consumer is on the subscription.
func TestPulsarProtocolConsumer(t *testing.T) {
	e := newEnv(t, nil)
	cl := e.client()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "raw-cons", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	ids := produce(t, p, 0, 5)
	p.Close()
	r := dialPulsar(t, e.b.Addr())
	r.connect()
	subscribe := func(consumerID, requestID uint64, typ pulsarpb.CommandSubscribe_SubType) {
		t.Helper()
		r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pulsarpb.CommandSubscribe{
			Topic: proto.String("persistent://public/default/raw-cons"), Subscription: proto.String("s"), SubType: typ.Enum(),
			ConsumerId: proto.Uint64(consumerID), RequestId: proto.Uint64(requestID), InitialPosition: pulsarpb.CommandSubscribe_Earliest.Enum()}}, nil)
		if got := r.next(); got.GetSuccess().GetRequestId() != requestID {
			t.Fatalf("SUBSCRIBE answered %v", got)
		}
	}
	subscribe(1, 10, pulsarpb.CommandSubscribe_Shared)
	r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_FLOW.Enum(), Flow: &pulsarpb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(3)}}, nil)
	for i := 0; i < 3; i++ {
		f, err := r.r.Read()
		if err != nil {
			t.Fatal(err)
		}
		m := f.Cmd.GetMessage()
		md, payload, err := entry.Decode(f.Payload)
		if f.Cmd.GetType() != pulsarpb.BaseCommand_MESSAGE || err != nil || m.GetConsumerId() != 1 ||
			int64(m.GetMessageId().GetEntryId()) != ids[i].EntryID() || string(payload) != fmt.Sprintf("m-%05d", i) || md.GetProducerName() == "" {
			t.Fatalf("message %d: %v %q %v", i, f.Cmd, payload, err)
		}
	}
	// Three permits, three messages: nothing more until FLOW.
	r.conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if f, err := r.r.Read(); err == nil && f.Cmd.GetType() != pulsarpb.BaseCommand_PING {
		t.Fatalf("a fourth frame without permits: %v", f.Cmd)
	}
	r.conn.Close()

	r = dialPulsar(t, e.b.Addr())
	r.connect()
	subscribe(1, 11, pulsarpb.CommandSubscribe_Shared)
	subscribe(2, 12, pulsarpb.CommandSubscribe_Shared)
	r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_ACK.Enum(), Ack: &pulsarpb.CommandAck{ConsumerId: proto.Uint64(1),
		AckType: pulsarpb.CommandAck_Individual.Enum(), RequestId: proto.Uint64(13),
		MessageId: []*pulsarpb.MessageIdData{{LedgerId: proto.Uint64(uint64(ids[0].LedgerID())), EntryId: proto.Uint64(uint64(ids[0].EntryID()))}}}}, nil)
	if got := r.next().GetAckResponse(); got.GetRequestId() != 13 || got.Error != nil {
		t.Fatalf("ACK with a request id answered %v", got)
	}
	if got := statsBacklog(t, e, "raw-cons", "s"); got != 4 {
		t.Fatalf("backlog after acknowledging one of 5: %d", got)
	}
	r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_GET_LAST_MESSAGE_ID.Enum(), GetLastMessageId: &pulsarpb.CommandGetLastMessageId{
		ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(14)}}, nil)
	if got := r.next().GetGetLastMessageIdResponse(); got.GetRequestId() != 14 || int64(got.GetLastMessageId().GetEntryId()) != ids[4].EntryID() {
		t.Fatalf("GET_LAST_MESSAGE_ID answered %v", got)
	}
	r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_UNSUBSCRIBE.Enum(), Unsubscribe: &pulsarpb.CommandUnsubscribe{
		ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(15)}}, nil)
	if got := r.next().GetError(); got.GetRequestId() != 15 || got.GetError() != pulsarpb.ServerError_ConsumerBusy {
		t.Fatalf("UNSUBSCRIBE with another consumer on: %v, want ConsumerBusy", got)
	}
	// Permits: consumer 1 has messages dispatched before the seek, and
	// would have some after it, before it is closed.
	r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_FLOW.Enum(), Flow: &pulsarpb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(100)}}, nil)
	r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SEEK.Enum(), Seek: &pulsarpb.CommandSeek{ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(16),
		MessagePublishTime: proto.Uint64(0)}}, nil)
	var success, closed bool
	for !success {
		got := r.next()
		switch {
		case got.GetType() == pulsarpb.BaseCommand_MESSAGE && got.GetMessage().GetConsumerId() == 1 && closed:
			// What was dispatched between the reset and the close is the
			// next consumer's to get.
			t.Fatalf("MESSAGE for consumer 1 after its CLOSE_CONSUMER: %v", got)
		case got.GetSuccess().GetRequestId() == 16:
			if !closed {
				t.Fatal("the seek's SUCCESS before CLOSE_CONSUMER")
			}
			success = true
		case got.GetType() == pulsarpb.BaseCommand_CLOSE_CONSUMER && got.GetCloseConsumer().GetConsumerId() == 1:
			closed = true
		case got.GetType() == pulsarpb.BaseCommand_CLOSE_CONSUMER:
			// The seek resets the subscription for its other consumers too.
		}
	}
	// The seek has returned: what the client asks through the consumer
	// is refused until it subscribes again (answered, a reader's HasNext
	// compared the last id with its start from before the seek).
	r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_GET_LAST_MESSAGE_ID.Enum(), GetLastMessageId: &pulsarpb.CommandGetLastMessageId{
		ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(17)}}, nil)
	for {
		got := r.next()
		if got.GetType() == pulsarpb.BaseCommand_CLOSE_CONSUMER || got.GetType() == pulsarpb.BaseCommand_MESSAGE && got.GetMessage().GetConsumerId() != 1 {
			continue // consumer 2's
		}
		if got.GetError().GetRequestId() != 17 {
			t.Fatalf("GET_LAST_MESSAGE_ID through the consumer the seek closed: %v, want an error", got)
		}
		break
	}
	if got := statsBacklog(t, e, "raw-cons", "s"); got != 5 {
		t.Fatalf("backlog after seeking to time 0: %d, want 5", got)
	}
}

// An ACK with a validation error (a Pulsar client that could not read a
// message and dropped it) acknowledges it, and the broker counts the drop.
func TestPulsarProtocolAckValidationError(t *testing.T) {
	e := newEnv(t, nil)
	p, err := e.client().CreateProducer(client.ProducerOptions{Topic: "raw-discard", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	ids := produce(t, p, 0, 2)
	p.Close()
	r := dialPulsar(t, e.b.Addr())
	r.connect()
	r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pulsarpb.CommandSubscribe{
		Topic: proto.String("persistent://public/default/raw-discard"), Subscription: proto.String("s"), SubType: pulsarpb.CommandSubscribe_Exclusive.Enum(),
		ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(1), InitialPosition: pulsarpb.CommandSubscribe_Earliest.Enum()}}, nil)
	if got := r.next(); got.GetSuccess().GetRequestId() != 1 {
		t.Fatalf("SUBSCRIBE answered %v", got)
	}
	r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_ACK.Enum(), Ack: &pulsarpb.CommandAck{ConsumerId: proto.Uint64(1),
		AckType: pulsarpb.CommandAck_Individual.Enum(), RequestId: proto.Uint64(2), ValidationError: pulsarpb.CommandAck_ChecksumMismatch.Enum(),
		MessageId: []*pulsarpb.MessageIdData{{LedgerId: proto.Uint64(uint64(ids[0].LedgerID())), EntryId: proto.Uint64(uint64(ids[0].EntryID()))}}}}, nil)
	if got := r.next().GetAckResponse(); got.GetRequestId() != 2 || got.Error != nil {
		t.Fatalf("ACK answered %v", got)
	}
	if got := statsBacklog(t, e, "raw-discard", "s"); got != 1 {
		t.Fatalf("backlog after dropping one of 2: %d", got)
	}
	testutil.Scrape(t, e.b.HTTPAddr()).Want(t, 1, "magnetar_broker_entries_discarded_total", "reason", "checksum_mismatch")

	// An ACK of which part applies (an id past the last message is
	// refused, the others stand): what applied is counted.
	r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_ACK.Enum(), Ack: &pulsarpb.CommandAck{ConsumerId: proto.Uint64(1),
		AckType: pulsarpb.CommandAck_Individual.Enum(), RequestId: proto.Uint64(3), ValidationError: pulsarpb.CommandAck_DecompressionError.Enum(),
		MessageId: []*pulsarpb.MessageIdData{
			{LedgerId: proto.Uint64(uint64(ids[1].LedgerID())), EntryId: proto.Uint64(uint64(ids[1].EntryID() + 100))},
			{LedgerId: proto.Uint64(uint64(ids[1].LedgerID())), EntryId: proto.Uint64(uint64(ids[1].EntryID()))}}}}, nil)
	if got := r.next().GetAckResponse(); got.GetRequestId() != 3 || got.Error == nil {
		t.Fatalf("ACK with an id past the last message answered %v, want an error", got)
	}
	if got := statsBacklog(t, e, "raw-discard", "s"); got != 0 {
		t.Fatalf("backlog after an ACK of which one id applied: %d, want 0", got)
	}
	testutil.Scrape(t, e.b.HTTPAddr()).Want(t, 1, "magnetar_broker_entries_discarded_total", "reason", "decompression_error")

	// Through the client protocol, a reason the broker does not know is
	// counted under "other": the labels stay a fixed few.
	stream, err := dialBroker(t, e.b.Addr()).Consume(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	stream.Send(&brokerpb.ConsumeRequest{Request: &brokerpb.ConsumeRequest_Subscribe{Subscribe: &brokerpb.Subscribe{
		Topic: "raw-discard", Subscription: "g", Durable: true, InitialPosition: brokerpb.InitialPosition_EARLIEST, ReceiverQueueSize: 10}}})
	if r, err := stream.Recv(); err != nil || r.GetSubscribed() == nil {
		t.Fatalf("subscribe: %v %v", r, err)
	}
	stream.Send(&brokerpb.ConsumeRequest{Request: &brokerpb.ConsumeRequest_Ack{Ack: &brokerpb.Ack{Discarded: brokerpb.DiscardReason(99),
		MessageIds: []*brokerpb.MessageId{{LedgerId: ids[1].LedgerID(), EntryId: ids[1].EntryID(), BatchIndex: -1}}}}})
	testutil.Eventually(t, 10*time.Second, "the drop counted", func() bool {
		v, _ := testutil.Scrape(t, e.b.HTTPAddr()).Value(t, "magnetar_broker_entries_discarded_total", "reason", "other")
		return v == 1
	})
}

// A FLOW's permits count whole, beyond the SDK's cap on a receive queue
// (100,000): pulsar-client-go asks for more only once it has received
// half of its queue, so with a queue of 300,000 a FLOW cut to 100,000
// left it waiting for good after 100,000 messages.
func TestPulsarProtocolFlowTakenWhole(t *testing.T) {
	e := newEnv(t, nil)
	r := dialPulsar(t, e.b.Addr())
	r.connect()
	r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pulsarpb.CommandSubscribe{
		Topic: proto.String("persistent://public/default/big-queue"), Subscription: proto.String("s"), SubType: pulsarpb.CommandSubscribe_Exclusive.Enum(),
		ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(1)}}, nil)
	if got := r.next(); got.GetSuccess().GetRequestId() != 1 {
		t.Fatalf("SUBSCRIBE answered %v", got)
	}
	r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_FLOW.Enum(), Flow: &pulsarpb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(300000)}}, nil)
	// Frames are handled in order: once the PING after it is answered,
	// the FLOW was.
	r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PING.Enum(), Ping: &pulsarpb.CommandPing{}}, nil)
	if got := r.next(); got.GetType() != pulsarpb.BaseCommand_PONG {
		t.Fatalf("PING answered %v", got)
	}
	st, err := adminGetJSON[struct {
		Subscriptions map[string]struct {
			Consumers []struct {
				AvailablePermits int `json:"availablePermits"`
			} `json:"consumers"`
		} `json:"subscriptions"`
	}](e, "/admin/v2/persistent/public/default/big-queue/stats")
	if err != nil {
		t.Fatal(err)
	}
	if cs := st.Subscriptions["s"].Consumers; len(cs) != 1 || cs[0].AvailablePermits != 300000 {
		t.Fatalf("consumers after a FLOW of 300,000: %+v", cs)
	}
}

// A batch larger than the permits goes, and the permits it takes beyond
// them are owed, as in Pulsar: pulsar-client-go grants permits two at a
// time as its application consumes, and each grant used to let another
// whole entry go while it worked through the first. Its connection reader
// then blocked on the full receive queue, and with acknowledgement
// receipts its connection deadlocked (its own TestAckResponseNotBlocked).
func TestPulsarProtocolBatchPermitsOwed(t *testing.T) {
	e := newEnv(t, nil)
	p, err := e.client().CreateProducer(client.ProducerOptions{Topic: "raw-owed", BatchingMaxMessages: 10, BatchingMaxPublishDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, p, 0, 30) // three entries of 10
	p.Close()
	r := dialPulsar(t, e.b.Addr())
	r.connect()
	r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pulsarpb.CommandSubscribe{
		Topic: proto.String("persistent://public/default/raw-owed"), Subscription: proto.String("s"), SubType: pulsarpb.CommandSubscribe_Exclusive.Enum(),
		ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(1), InitialPosition: pulsarpb.CommandSubscribe_Earliest.Enum()}}, nil)
	if got := r.next(); got.GetSuccess().GetRequestId() != 1 {
		t.Fatalf("SUBSCRIBE answered %v", got)
	}
	flow := func(n uint32) {
		r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_FLOW.Enum(), Flow: &pulsarpb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(n)}}, nil)
	}
	entryOf := func(what string) {
		t.Helper()
		f, err := r.r.Read()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		md, _, err := entry.Decode(f.Payload)
		if f.Cmd.GetType() != pulsarpb.BaseCommand_MESSAGE || err != nil || md.GetNumMessagesInBatch() != 10 {
			t.Fatalf("%s: %v (%v), want a MESSAGE of a batch of 10", what, f.Cmd, err)
		}
	}
	flow(2)
	entryOf("the first entry, on 2 permits")
	for i := 0; i < 4; i++ { // the 8 owed, granted back as they are consumed
		flow(2)
	}
	r.conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if f, err := r.r.Read(); err == nil && f.Cmd.GetType() != pulsarpb.BaseCommand_PING {
		t.Fatalf("a frame while permits were owed: %v", f.Cmd)
	}
	r.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	flow(1)
	entryOf("the second entry, once a permit is there beyond the debt")
}

// unackedSet and ackedIndexes are Pulsar's batch ack sets: bit i set
// while message i is not acknowledged, in 64-bit words.
func TestPulsarAckSets(t *testing.T) {
	set := broker.UnackedSet(70, []int32{0, 3, 65})
	if len(set) != 2 || uint64(set[0]) != (1<<64-1)&^(1|1<<3) || uint64(set[1]) != (1<<6-1)&^(1<<1) {
		t.Fatalf("unacked set of 70 with 0, 3, 65 acked: %x", set)
	}
	if got := broker.AckedIndexes(set, 70); fmt.Sprint(got) != "[0 3 65]" {
		t.Fatalf("acked indexes: %v", got)
	}
}

// With TLS on, the client port speaks only gRPC over TLS, and
// --pulsar-listen serves Pulsar's protocol over TLS: lookups send clients
// to it (pulsar+ssl://). A plaintext Pulsar frame on either port gets
// nothing.
func TestPulsarProtocolTLSPort(t *testing.T) {
	ca := testutil.NewCA(t, "cluster")
	e := tlsEnv(t, ca, func(c *broker.Config) { c.PulsarListen = "127.0.0.1:0" })
	if e.b.PulsarAddr() == "" {
		t.Fatal("no Pulsar port")
	}
	pool := x509.NewCertPool()
	pem, _ := os.ReadFile(ca.CertFile)
	pool.AppendCertsFromPEM(pem)
	c, err := tls.Dial("tcp", e.b.PulsarAddr(), &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	r := &rawPulsar{t: t, conn: c, r: pulsarwire.NewReader(c, 10<<20)}
	r.connect()
	r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pulsarpb.CommandLookupTopic{
		Topic: proto.String("persistent://public/default/tls-topic"), RequestId: proto.Uint64(1)}}, nil)
	if got := r.next().GetLookupTopicResponse(); got.GetBrokerServiceUrlTls() != "pulsar+ssl://"+e.b.PulsarAddr() || got.GetBrokerServiceUrl() != "" {
		t.Fatalf("lookup over TLS: %v, want pulsar+ssl://%s", got, e.b.PulsarAddr())
	}
	for _, addr := range []string{e.b.Addr(), e.b.PulsarAddr()} {
		p := dialPulsar(t, addr)
		p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_CONNECT.Enum(), Connect: &pulsarpb.CommandConnect{ClientVersion: proto.String("raw")}}, nil)
		f, err := p.r.Read()
		if err == nil && f.Cmd.GetType() == pulsarpb.BaseCommand_CONNECTED {
			t.Fatalf("plaintext CONNECT on %s was answered CONNECTED", addr)
		}
	}
}

// A batch index acknowledgement as pulsar-client-go sends it: the entry's
// id with an ack set and no batch size. Only the messages it clears are
// acknowledged: the entry comes again with them left out of its ack set.
func TestPulsarProtocolBatchIndexAck(t *testing.T) {
	e := newEnv(t, nil)
	cl := e.client()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "raw-batch", BatchingMaxMessages: 4, BatchingMaxPublishDelay: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, p, 0, 4) // one entry of four messages
	p.Close()
	subscribe := func(r *rawPulsar, requestID uint64) *pulsarpb.CommandMessage {
		t.Helper()
		r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pulsarpb.CommandSubscribe{
			Topic: proto.String("persistent://public/default/raw-batch"), Subscription: proto.String("s"), SubType: pulsarpb.CommandSubscribe_Shared.Enum(),
			ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(requestID), InitialPosition: pulsarpb.CommandSubscribe_Earliest.Enum()}}, nil)
		if got := r.next(); got.GetSuccess().GetRequestId() != requestID {
			t.Fatalf("SUBSCRIBE answered %v", got)
		}
		// One permit is enough for a whole batch, as with Pulsar.
		r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_FLOW.Enum(), Flow: &pulsarpb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(1)}}, nil)
		got := r.next()
		if got.GetType() != pulsarpb.BaseCommand_MESSAGE {
			t.Fatalf("after FLOW: %v", got)
		}
		return got.GetMessage()
	}
	r := dialPulsar(t, e.b.Addr())
	r.connect()
	m := subscribe(r, 1)
	if len(m.GetAckSet()) != 0 {
		t.Fatalf("first delivery with an ack set: %v", m.GetAckSet())
	}
	// Acknowledge messages 0 and 2: bits 1 and 3 stay set (not acknowledged).
	r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_ACK.Enum(), Ack: &pulsarpb.CommandAck{ConsumerId: proto.Uint64(1),
		AckType: pulsarpb.CommandAck_Individual.Enum(), RequestId: proto.Uint64(2),
		MessageId: []*pulsarpb.MessageIdData{{LedgerId: m.MessageId.LedgerId, EntryId: m.MessageId.EntryId, AckSet: []int64{0b1010}}}}}, nil)
	if got := r.next().GetAckResponse(); got.GetRequestId() != 2 || got.Error != nil {
		t.Fatalf("ACK answered %v", got)
	}
	r.conn.Close()
	r = dialPulsar(t, e.b.Addr())
	r.connect()
	m = subscribe(r, 3)
	if set := m.GetAckSet(); len(set) != 1 || set[0] != 0b1010 {
		t.Fatalf("redelivered with ack set %b, want 1010 (messages 1 and 3 left)", set)
	}
	if got := statsBacklog(t, e, "raw-batch", "s"); got != 1 {
		t.Fatalf("backlog %d entries: the batch was acknowledged whole", got)
	}
}

// Schemas, as Pulsar's clients register them: a producer's schema gets
// version 0 (8 bytes) in PRODUCER_SUCCESS; GET_SCHEMA returns it, by
// version or the latest, for any partition of the topic; the bytes
// schema is no schema; another type is refused (IncompatibleSchema); a
// changed struct schema becomes the next version; deleting the topic
// deletes its schemas.
func TestPulsarProtocolSchemas(t *testing.T) {
	e := newEnv(t, nil)
	p := dialPulsar(t, e.b.Addr())
	p.connect()
	var req uint64
	v := func(i uint64) []byte { return binary.BigEndian.AppendUint64(nil, i) }
	getSchema := func(topic string, version []byte) *pulsarpb.CommandGetSchemaResponse {
		t.Helper()
		req++
		p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_GET_SCHEMA.Enum(), GetSchema: &pulsarpb.CommandGetSchema{
			RequestId: proto.Uint64(req), Topic: proto.String(topic), SchemaVersion: version}}, nil)
		f := p.next()
		for f.GetType() == pulsarpb.BaseCommand_CLOSE_CONSUMER { // the topic's deletion closes the consumer
			f = p.next()
		}
		got := f.GetGetSchemaResponse()
		if got.GetRequestId() != req {
			t.Fatalf("GET_SCHEMA answered %v", got)
		}
		return got
	}
	getOrCreate := func(topic string, sc *pulsarpb.Schema) *pulsarpb.CommandGetOrCreateSchemaResponse {
		t.Helper()
		req++
		p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_GET_OR_CREATE_SCHEMA.Enum(), GetOrCreateSchema: &pulsarpb.CommandGetOrCreateSchema{
			RequestId: proto.Uint64(req), Topic: proto.String(topic), Schema: sc}}, nil)
		got := p.next().GetGetOrCreateSchemaResponse()
		if got.GetRequestId() != req {
			t.Fatalf("GET_OR_CREATE_SCHEMA answered %v", got)
		}
		return got
	}
	schema := func(typ pulsarpb.Schema_Type, data string, props ...string) *pulsarpb.Schema {
		sc := &pulsarpb.Schema{Name: proto.String("s"), SchemaData: []byte(data), Type: typ.Enum()}
		for i := 0; i+1 < len(props); i += 2 {
			sc.Properties = append(sc.Properties, &pulsarpb.KeyValue{Key: proto.String(props[i]), Value: proto.String(props[i+1])})
		}
		return sc
	}
	const typed = "persistent://public/default/typed"
	if got := getSchema(typed, nil); got.GetErrorCode() != pulsarpb.ServerError_TopicNotFound {
		t.Fatalf("GET_SCHEMA of a topic without one: %v, want TopicNotFound", got)
	}
	// A topic that does not exist gets no schema (nothing would delete it).
	if got := getOrCreate("persistent://public/default/nowhere", schema(pulsarpb.Schema_String, "")); got.GetErrorCode() != pulsarpb.ServerError_TopicNotFound {
		t.Fatalf("GET_OR_CREATE_SCHEMA on a topic that does not exist: %v, want TopicNotFound", got)
	}
	// A String producer: version 0.
	req++
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PRODUCER.Enum(), Producer: &pulsarpb.CommandProducer{
		Topic: proto.String(typed), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(req),
		Schema: schema(pulsarpb.Schema_String, "", "encoding", "utf-8")}}, nil)
	if got := p.next().GetProducerSuccess(); got.GetRequestId() != req || !bytes.Equal(got.GetSchemaVersion(), v(0)) {
		t.Fatalf("a String producer: %v, want PRODUCER_SUCCESS with schema version 0", got)
	}
	// Its schema, by version and as the latest, on a partition's name too.
	for _, version := range [][]byte{v(0), nil} {
		got := getSchema(typed, version)
		if got.GetErrorCode() != 0 || got.GetSchema().GetType() != pulsarpb.Schema_String || !bytes.Equal(got.GetSchemaVersion(), v(0)) ||
			len(got.GetSchema().GetProperties()) != 1 || got.GetSchema().GetProperties()[0].GetValue() != "utf-8" {
			t.Fatalf("GET_SCHEMA %x: %v, want String version 0 with its property", version, got)
		}
	}
	// The same again: the same version; bytes: no schema; another type:
	// refused, by GET_OR_CREATE_SCHEMA and by a producer alike.
	if got := getOrCreate(typed, schema(pulsarpb.Schema_String, "", "encoding", "utf-8")); got.GetErrorCode() != 0 || !bytes.Equal(got.GetSchemaVersion(), v(0)) {
		t.Fatalf("GET_OR_CREATE_SCHEMA String again: %v, want version 0", got)
	}
	if got := getOrCreate(typed, schema(pulsarpb.Schema_None, "")); got.GetErrorCode() != 0 || len(got.GetSchemaVersion()) != 0 {
		t.Fatalf("GET_OR_CREATE_SCHEMA bytes: %v, want no version and no error", got)
	}
	if got := getOrCreate(typed, schema(pulsarpb.Schema_Json, `{"type":"record"}`)); got.GetErrorCode() != pulsarpb.ServerError_IncompatibleSchema {
		t.Fatalf("GET_OR_CREATE_SCHEMA JSON on a String topic: %v, want IncompatibleSchema", got)
	}
	req++
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PRODUCER.Enum(), Producer: &pulsarpb.CommandProducer{
		Topic: proto.String(typed), ProducerId: proto.Uint64(2), RequestId: proto.Uint64(req), Schema: schema(pulsarpb.Schema_Int64, "")}}, nil)
	if got := p.next(); got.GetError().GetError() != pulsarpb.ServerError_IncompatibleSchema || got.GetError().GetRequestId() != req {
		t.Fatalf("an Int64 producer on a String topic: %v, want ERROR IncompatibleSchema", got)
	}
	// A struct schema that changes: versions 0 and 1, on a partitioned
	// topic's partitions (they share them).
	const avro = `{"type":"record","name":"r","fields":[{"name":"a","type":"int"}]}`
	const avro2 = `{"type":"record","name":"r","fields":[{"name":"a","type":"int"},{"name":"b","type":["null","int"],"default":null}]}`
	if code, body, err := adminDo(e, "PUT", "/admin/v2/persistent/public/default/orders/partitions", 2); err != nil || code/100 != 2 {
		t.Fatalf("create partitioned topic: %d %s %v", code, body, err)
	}
	if got := getOrCreate("persistent://public/default/orders-partition-0", schema(pulsarpb.Schema_Avro, avro)); got.GetErrorCode() != 0 || !bytes.Equal(got.GetSchemaVersion(), v(0)) {
		t.Fatalf("Avro on partition 0: %v, want version 0", got)
	}
	if got := getOrCreate("persistent://public/default/orders-partition-1", schema(pulsarpb.Schema_Avro, avro2)); got.GetErrorCode() != 0 || !bytes.Equal(got.GetSchemaVersion(), v(1)) {
		t.Fatalf("a changed Avro schema on partition 1: %v, want version 1", got)
	}
	for _, c := range []struct {
		topic   string
		version []byte
		want    string
		wantVer []byte
	}{
		{"persistent://public/default/orders", nil, avro2, v(1)},
		{"persistent://public/default/orders-partition-1", v(0), avro, v(0)},
		{"persistent://public/default/orders-partition-0", v(1), avro2, v(1)},
	} {
		got := getSchema(c.topic, c.version)
		if got.GetErrorCode() != 0 || string(got.GetSchema().GetSchemaData()) != c.want || !bytes.Equal(got.GetSchemaVersion(), c.wantVer) {
			t.Fatalf("GET_SCHEMA %s %x: %v, want %s at %x", c.topic, c.version, got, c.want, c.wantVer)
		}
	}
	// A consumer's schema is checked, not added: a third Avro definition
	// subscribes (same type) without a version 2; a String consumer is
	// refused.
	subscribeWith := func(consumer uint64, sc *pulsarpb.Schema) *pulsarpb.BaseCommand {
		t.Helper()
		req++
		p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pulsarpb.CommandSubscribe{
			Topic: proto.String("persistent://public/default/orders-partition-0"), Subscription: proto.String(fmt.Sprint("s", consumer)),
			SubType: pulsarpb.CommandSubscribe_Exclusive.Enum(), ConsumerId: proto.Uint64(consumer), RequestId: proto.Uint64(req), Schema: sc}}, nil)
		return p.next()
	}
	if got := subscribeWith(1, schema(pulsarpb.Schema_Avro, `{"type":"record","name":"r","fields":[]}`)); got.GetSuccess().GetRequestId() != req {
		t.Fatalf("an Avro consumer: %v, want SUCCESS", got)
	}
	if got := subscribeWith(2, schema(pulsarpb.Schema_String, "")); got.GetError().GetError() != pulsarpb.ServerError_IncompatibleSchema {
		t.Fatalf("a String consumer on an Avro topic: %v, want IncompatibleSchema", got)
	}
	if got := getSchema("persistent://public/default/orders", v(2)); got.GetErrorCode() != pulsarpb.ServerError_TopicNotFound {
		t.Fatalf("GET_SCHEMA of a version not there: %v, want TopicNotFound", got)
	}
	if got := getSchema("persistent://public/default/orders", []byte{1, 2, 3}); got.GetErrorCode() == 0 || got.GetErrorMessage() == "" {
		t.Fatalf("GET_SCHEMA with a 3-byte version: %v, want an error with a reason", got)
	}
	// Deleting the topic deletes its schemas.
	if code, body, err := adminDo(e, "DELETE", "/admin/v2/persistent/public/default/orders/partitions?force=true", nil); err != nil || code/100 != 2 {
		t.Fatalf("delete partitioned topic: %d %s %v", code, body, err)
	}
	if got := getSchema("persistent://public/default/orders", nil); got.GetErrorCode() != pulsarpb.ServerError_TopicNotFound {
		t.Fatalf("GET_SCHEMA after the topic's deletion: %v, want TopicNotFound", got)
	}
}

// A client's entry whose metadata is what the broker would write (its
// producer name and sequence id, a publish time neither before the
// topic's last nor in the future nor stale) is stored byte for byte, its
// publish time the client's; otherwise the broker stamps it again (and
// encodes it again, checksum included). Publish times stay increasing.
func TestPulsarProtocolStoresClientEntry(t *testing.T) {
	e := newEnv(t, nil)
	p := dialPulsar(t, e.b.Addr())
	p.connect()
	const topic = "persistent://public/default/as-sent"
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PRODUCER.Enum(), Producer: &pulsarpb.CommandProducer{
		Topic: proto.String(topic), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(1), ProducerName: proto.String("w")}}, nil)
	if got := p.next(); got.GetProducerSuccess().GetProducerName() != "w" {
		t.Fatalf("PRODUCER answered %v", got)
	}
	// Each case's metadata is made just before its SEND (its stamp
	// relative to then): name, sequence id, stamp offset in ms.
	cases := []struct {
		name   string
		by     string
		seq    uint64
		offset int64
		as     bool // stored as sent
	}{
		{"as the broker would write it", "w", 0, 0, true},
		{"another producer name", "v", 1, 0, false},
		{"another sequence id", "w", 7, 0, false},
		{"an hour old", "w", 3, -3_600_000, false},
		{"an hour ahead", "w", 4, 3_600_000, false},
		// Fresh, but before the topic's last publish time (stamped by
		// the broker for the case above): publish times never go back.
		{"before the last publish time", "w", 5, -500, false},
	}
	sent := make([][]byte, len(cases))
	stamps := make([]uint64, len(cases))
	for i, c := range cases {
		stamps[i] = uint64(time.Now().UnixMilli() + c.offset)
		md := &pulsarpb.MessageMetadata{ProducerName: proto.String(c.by), SequenceId: proto.Uint64(c.seq), PublishTime: proto.Uint64(stamps[i])}
		var err error
		if sent[i], err = entry.Encode(md, []byte(c.name)); err != nil {
			t.Fatal(err)
		}
		seq := uint64(i)
		p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SEND.Enum(), Send: &pulsarpb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(seq)}}, sent[i])
		if got := p.next(); got.GetSendReceipt().GetSequenceId() != seq {
			t.Fatalf("%s: SEND answered %v", c.name, got)
		}
	}
	// Read the stored entries back, as they are (MESSAGE carries them).
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pulsarpb.CommandSubscribe{
		Topic: proto.String(topic), Subscription: proto.String("s"), SubType: pulsarpb.CommandSubscribe_Exclusive.Enum(),
		ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(2), InitialPosition: pulsarpb.CommandSubscribe_Earliest.Enum()}}, nil)
	if got := p.next(); got.GetSuccess().GetRequestId() != 2 {
		t.Fatalf("SUBSCRIBE answered %v", got)
	}
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_FLOW.Enum(), Flow: &pulsarpb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(uint32(len(cases)))}}, nil)
	var last uint64
	for i, c := range cases {
		f, err := p.r.Read()
		if err != nil {
			t.Fatal(err)
		}
		if f.Cmd.GetType() != pulsarpb.BaseCommand_MESSAGE {
			t.Fatalf("%s: %v, want MESSAGE", c.name, f.Cmd)
		}
		md, body, err := entry.Decode(f.Payload) // the checksum holds either way
		if err != nil {
			t.Fatalf("%s: stored entry: %v", c.name, err)
		}
		if string(body) != c.name || md.GetProducerName() != "w" || md.GetSequenceId() != uint64(i) {
			t.Fatalf("%s: stored %q by %q seq %d", c.name, body, md.GetProducerName(), md.GetSequenceId())
		}
		if got := bytes.Equal(f.Payload, sent[i]); got != c.as {
			t.Fatalf("%s: stored as sent %v, want %v", c.name, got, c.as)
		}
		if c.as && md.GetPublishTime() != stamps[i] {
			t.Fatalf("%s: publish time %d, want the client's %d", c.name, md.GetPublishTime(), stamps[i])
		}
		if md.GetPublishTime() < last || md.GetPublishTime() > uint64(time.Now().UnixMilli()) {
			t.Fatalf("%s: publish time %d: before the previous %d, or in the future", c.name, md.GetPublishTime(), last)
		}
		last = md.GetPublishTime()
	}
}

// A slow request does not hold up the connection: while a PRODUCER's
// topic load is stuck, PING is answered and another producer's SEND
// stored; the requests for the stuck producer's id that follow (a CLOSE,
// then the same id opened again, as a client whose PRODUCER timed out
// does) are served after it, in order.
func TestPulsarProtocolSlowLoadDoesNotBlock(t *testing.T) {
	e := newEnv(t, nil)
	loading, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	broker.SetTestHookLoad(func(topic string) {
		if strings.HasSuffix(topic, "/slow-load") {
			once.Do(func() { close(loading) })
			<-release
		}
	})
	var released sync.Once
	unblock := func() { released.Do(func() { close(release) }) }
	t.Cleanup(func() { unblock(); broker.SetTestHookLoad(nil) }) // a failure must not leave the load stuck
	p := dialPulsar(t, e.b.Addr())
	p.connect()
	p.conn.SetDeadline(time.Now().Add(10 * time.Second)) // a held-up reader fails the test, not its timeout
	producer := func(id, req uint64, topic string) {
		p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PRODUCER.Enum(), Producer: &pulsarpb.CommandProducer{
			Topic: proto.String("persistent://public/default/" + topic), ProducerId: proto.Uint64(id), RequestId: proto.Uint64(req)}}, nil)
	}
	producer(1, 1, "fast")
	if got := p.next(); got.GetProducerSuccess().GetRequestId() != 1 {
		t.Fatalf("PRODUCER fast: %v", got)
	}
	producer(2, 2, "slow-load")
	<-loading
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PING.Enum(), Ping: &pulsarpb.CommandPing{}}, nil)
	if got := p.next(); got.GetType() != pulsarpb.BaseCommand_PONG {
		t.Fatalf("PING while a load is stuck: %v, want PONG", got)
	}
	msg, err := entry.Encode(&pulsarpb.MessageMetadata{ProducerName: proto.String("x"), SequenceId: proto.Uint64(0), PublishTime: proto.Uint64(1)}, []byte("hi"))
	if err != nil {
		t.Fatal(err)
	}
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SEND.Enum(), Send: &pulsarpb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(0)}}, msg)
	if got := p.next(); got.GetSendReceipt().GetProducerId() != 1 {
		t.Fatalf("SEND while another producer's load is stuck: %v, want its receipt", got)
	}
	// What Pulsar's Go client does when its PRODUCER times out: CLOSE it,
	// then the same id again. Served in that order once the load ends.
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pulsarpb.CommandCloseProducer{
		ProducerId: proto.Uint64(2), RequestId: proto.Uint64(3)}}, nil)
	producer(2, 4, "slow-load")
	unblock()
	if got := p.next(); got.GetProducerSuccess().GetRequestId() != 2 {
		t.Fatalf("the stuck PRODUCER, released: %v, want PRODUCER_SUCCESS", got)
	}
	// The CLOSE's SUCCESS comes from the closed producer's pump (after its
	// sends), so it and the new PRODUCER_SUCCESS may come in either order.
	closed, reopened := false, false
	for range 2 {
		switch got := p.next(); {
		case got.GetSuccess().GetRequestId() == 3:
			closed = true
		case got.GetProducerSuccess().GetRequestId() == 4:
			reopened = true
		default:
			t.Fatalf("after the stuck PRODUCER: %v, want the CLOSE's SUCCESS and the retried PRODUCER's", got)
		}
	}
	if !closed || !reopened {
		t.Fatalf("CLOSE answered %v, the retried PRODUCER %v", closed, reopened)
	}
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SEND.Enum(), Send: &pulsarpb.CommandSend{ProducerId: proto.Uint64(2), SequenceId: proto.Uint64(0)}}, msg)
	if got := p.next(); got.GetSendReceipt().GetProducerId() != 2 {
		t.Fatalf("SEND to the producer opened again: %v, want its receipt", got)
	}
}

// Pulsar's producer access modes: Exclusive has the topic to itself
// (another Exclusive is fenced, a Shared busy); WaitForExclusive is told
// it is not ready, then granted once the topic is free (a CLOSE gives up
// its wait); ExclusiveWithFencing takes the topic, the producer there is
// closed; the topic epoch counts the exclusive producers granted; a
// termination refuses the producers waiting.
func TestPulsarProtocolProducerAccessModes(t *testing.T) {
	e := newEnv(t, nil)
	p := dialPulsar(t, e.b.Addr())
	p.connect()
	var req uint64
	open := func(id uint64, mode pulsarpb.ProducerAccessMode) uint64 {
		req++
		p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PRODUCER.Enum(), Producer: &pulsarpb.CommandProducer{
			Topic: proto.String("persistent://public/default/excl"), ProducerId: proto.Uint64(id), RequestId: proto.Uint64(req),
			ProducerAccessMode: mode.Enum()}}, nil)
		return req
	}
	closeProducer := func(id uint64) uint64 {
		req++
		p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pulsarpb.CommandCloseProducer{
			ProducerId: proto.Uint64(id), RequestId: proto.Uint64(req)}}, nil)
		return req
	}
	// next answers, in any order, by request id.
	next := func(n int) map[uint64]*pulsarpb.BaseCommand {
		t.Helper()
		out := map[uint64]*pulsarpb.BaseCommand{}
		for range n {
			f := p.next()
			var id uint64
			switch f.GetType() {
			case pulsarpb.BaseCommand_PRODUCER_SUCCESS:
				id = f.GetProducerSuccess().GetRequestId()
			case pulsarpb.BaseCommand_SUCCESS:
				id = f.GetSuccess().GetRequestId()
			case pulsarpb.BaseCommand_ERROR:
				id = f.GetError().GetRequestId()
			case pulsarpb.BaseCommand_CLOSE_PRODUCER:
				id = 1000 + f.GetCloseProducer().GetProducerId() // the broker closing producer n
			default:
				t.Fatalf("unexpected %v", f)
			}
			out[id] = f
		}
		return out
	}
	r1 := open(1, pulsarpb.ProducerAccessMode_Exclusive)
	if got := next(1)[r1].GetProducerSuccess(); !got.GetProducerReady() || got.GetTopicEpoch() != 1 {
		t.Fatalf("the first Exclusive producer: %v, want ready with topic epoch 1", got)
	}
	r2 := open(2, pulsarpb.ProducerAccessMode_Exclusive)
	if got := next(1)[r2].GetError(); got.GetError() != pulsarpb.ServerError_ProducerFenced {
		t.Fatalf("a second Exclusive producer: %v, want ProducerFenced", got)
	}
	r3 := open(3, pulsarpb.ProducerAccessMode_Shared)
	if got := next(1)[r3].GetError(); got.GetError() != pulsarpb.ServerError_ProducerBusy {
		t.Fatalf("a Shared producer beside an Exclusive one: %v, want ProducerBusy", got)
	}
	r4 := open(4, pulsarpb.ProducerAccessMode_WaitForExclusive)
	if got := next(1)[r4].GetProducerSuccess(); got == nil || got.GetProducerReady() {
		t.Fatalf("a WaitForExclusive producer while the topic is held: %v, want PRODUCER_SUCCESS not ready", got)
	}
	r5 := open(5, pulsarpb.ProducerAccessMode_WaitForExclusive)
	if got := next(1)[r5].GetProducerSuccess(); got == nil || got.GetProducerReady() {
		t.Fatalf("a second waiting producer: %v, want not ready", got)
	}
	c5 := closeProducer(5)
	if got := next(2); got[r5].GetError() == nil || got[c5].GetSuccess() == nil {
		t.Fatalf("CLOSE of a waiting producer: %v, want its open failed and the CLOSE answered", got)
	}
	// The holder closes: the first waiter has the topic.
	c1 := closeProducer(1)
	if got := next(2); got[c1].GetSuccess() == nil || !got[r4].GetProducerSuccess().GetProducerReady() || got[r4].GetProducerSuccess().GetTopicEpoch() != 2 {
		t.Fatalf("after the holder closed: %v, want its CLOSE answered and producer 4 ready with epoch 2", got)
	}
	msg, err := entry.Encode(&pulsarpb.MessageMetadata{ProducerName: proto.String("x"), SequenceId: proto.Uint64(0), PublishTime: proto.Uint64(1)}, []byte("mine"))
	if err != nil {
		t.Fatal(err)
	}
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SEND.Enum(), Send: &pulsarpb.CommandSend{ProducerId: proto.Uint64(4), SequenceId: proto.Uint64(0)}}, msg)
	if got := p.next(); got.GetSendReceipt().GetProducerId() != 4 {
		t.Fatalf("SEND by the granted producer: %v", got)
	}
	// Fencing: producer 6 takes the topic; producer 4 is closed.
	r6 := open(6, pulsarpb.ProducerAccessMode_ExclusiveWithFencing)
	got := next(2)
	if s := got[r6].GetProducerSuccess(); !s.GetProducerReady() || s.GetTopicEpoch() != 3 || got[1004] == nil {
		t.Fatalf("ExclusiveWithFencing: %v, want producer 6 ready with epoch 3 and producer 4 closed", got)
	}
	// The topic terminated: the holder is closed, and the producer
	// waiting for it is refused, never granted.
	r7 := open(7, pulsarpb.ProducerAccessMode_WaitForExclusive)
	if got := next(1)[r7].GetProducerSuccess(); got == nil || got.GetProducerReady() {
		t.Fatalf("a producer waiting behind producer 6: %v, want not ready", got)
	}
	if code, body, err := adminDo(e, http.MethodPost, "/admin/v2/persistent/public/default/excl/terminate", nil); err != nil || code != http.StatusOK {
		t.Fatalf("terminate: %d %s %v", code, body, err)
	}
	if got := next(2); got[1006] == nil || got[r7].GetError().GetError() != pulsarpb.ServerError_TopicTerminatedError {
		t.Fatalf("after the termination: %v, want producer 6 closed and producer 7 refused with TopicTerminatedError", got)
	}
}

// A producer's initial_subscription_name (the official client's
// dead-letter producer sends its consumers' one) is created from the
// first message if missing, so what the producer writes waits for them; a
// name that is not a valid subscription name refuses the producer.
func TestPulsarProtocolInitialSubscription(t *testing.T) {
	e := newEnv(t, nil)
	p := dialPulsar(t, e.b.Addr())
	p.connect()
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PRODUCER.Enum(), Producer: &pulsarpb.CommandProducer{
		Topic: proto.String("persistent://public/default/dlq"), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(1),
		InitialSubscriptionName: proto.String("dlq-readers")}}, nil)
	if got := p.next(); got.GetProducerSuccess().GetRequestId() != 1 {
		t.Fatalf("PRODUCER with an initial subscription: %v", got)
	}
	code, body, err := adminDo(e, "GET", "/admin/v2/persistent/public/default/dlq/subscriptions", nil)
	if err != nil || code != 200 || !strings.Contains(string(body), `"dlq-readers"`) {
		t.Fatalf("subscriptions of the topic: %d %s %v, want dlq-readers", code, body, err)
	}
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PRODUCER.Enum(), Producer: &pulsarpb.CommandProducer{
		Topic: proto.String("persistent://public/default/dlq"), ProducerId: proto.Uint64(2), RequestId: proto.Uint64(2),
		InitialSubscriptionName: proto.String("bad/name")}}, nil)
	if got := p.next(); got.GetError().GetRequestId() != 2 || got.GetError().GetMessage() == "" {
		t.Fatalf("PRODUCER with an invalid initial subscription name: %v, want ERROR with a reason", got)
	}
}

// A producer's and a consumer's metadata and their client's version, as
// Pulsar's clients send them, are in the topic's stats (Pulsar's
// PublisherStats and ConsumerStats); metadata past its caps is refused.
func TestPulsarProtocolClientMetadataInStats(t *testing.T) {
	e := newEnv(t, nil)
	p := dialPulsar(t, e.b.Addr())
	p.connect() // client version "raw"
	const topic = "persistent://public/default/described"
	kv := func(k, v string) *pulsarpb.KeyValue {
		return &pulsarpb.KeyValue{Key: proto.String(k), Value: proto.String(v)}
	}
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PRODUCER.Enum(), Producer: &pulsarpb.CommandProducer{
		Topic: proto.String(topic), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(1), ProducerName: proto.String("writer"),
		Metadata: []*pulsarpb.KeyValue{kv("team", "billing"), kv("host", "h1")}}}, nil)
	if got := p.next(); got.GetProducerSuccess().GetRequestId() != 1 {
		t.Fatalf("PRODUCER: %v", got)
	}
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pulsarpb.CommandSubscribe{
		Topic: proto.String(topic), Subscription: proto.String("s"), SubType: pulsarpb.CommandSubscribe_Shared.Enum(),
		ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(2), ConsumerName: proto.String("reader"),
		Metadata: []*pulsarpb.KeyValue{kv("app", "invoices")}}}, nil)
	if got := p.next(); got.GetSuccess().GetRequestId() != 2 {
		t.Fatalf("SUBSCRIBE: %v", got)
	}
	code, body, err := adminDo(e, "GET", "/admin/v2/persistent/public/default/described/stats", nil)
	if err != nil || code != 200 {
		t.Fatalf("stats: %d %s %v", code, body, err)
	}
	var st struct {
		Publishers []struct {
			Name          string            `json:"producerName"`
			Metadata      map[string]string `json:"metadata"`
			ClientVersion string            `json:"clientVersion"`
			Address       string            `json:"address"`
		} `json:"publishers"`
		Subscriptions map[string]struct {
			Consumers []struct {
				Name          string            `json:"consumerName"`
				Metadata      map[string]string `json:"metadata"`
				ClientVersion string            `json:"clientVersion"`
				Address       string            `json:"address"`
			} `json:"consumers"`
		} `json:"subscriptions"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	local := p.conn.LocalAddr().String()
	if len(st.Publishers) != 1 || st.Publishers[0].Name != "writer" || st.Publishers[0].ClientVersion != "raw" ||
		st.Publishers[0].Address != local || !maps.Equal(st.Publishers[0].Metadata, map[string]string{"team": "billing", "host": "h1"}) {
		t.Errorf("publishers: %s", body)
	}
	cs := st.Subscriptions["s"].Consumers
	if len(cs) != 1 || cs[0].Name != "reader" || cs[0].ClientVersion != "raw" || cs[0].Address != local ||
		!maps.Equal(cs[0].Metadata, map[string]string{"app": "invoices"}) {
		t.Errorf("consumers: %s", body)
	}
	// Past the caps: refused with a reason.
	big := []*pulsarpb.KeyValue{kv("k", strings.Repeat("v", 70<<10))}
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PRODUCER.Enum(), Producer: &pulsarpb.CommandProducer{
		Topic: proto.String(topic), ProducerId: proto.Uint64(2), RequestId: proto.Uint64(3), Metadata: big}}, nil)
	if got := p.next(); got.GetError().GetRequestId() != 3 || !strings.Contains(got.GetError().GetMessage(), "metadata of more than") {
		t.Fatalf("PRODUCER with 70 KiB of metadata: %v, want an ERROR about its metadata", got)
	}
}

// ACTIVE_CONSUMER_CHANGE waits for the consumer's first FLOW: Pulsar's Go
// client registers a consumer only once SUBSCRIBE is answered and drops a
// notification that comes before. A consumer that has sent FLOW is told
// at once. A consumer that joins while the active one stays is told it
// is not active, as Pulsar tells it.
func TestPulsarProtocolActiveChangeAfterFirstFlow(t *testing.T) {
	e := newEnv(t, nil)
	p := dialPulsar(t, e.b.Addr())
	p.connect()
	const topic = "persistent://public/default/failover-notice"
	// notices holds the ACTIVE_CONSUMER_CHANGEs read while waiting for
	// something else: another consumer's notice and a SUBSCRIBE's SUCCESS
	// come from different goroutines, in either order.
	var notices []*pulsarpb.CommandActiveConsumerChange
	subscribe := func(id uint64, name string) {
		t.Helper()
		p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pulsarpb.CommandSubscribe{
			Topic: proto.String(topic), Subscription: proto.String("s"), SubType: pulsarpb.CommandSubscribe_Failover.Enum(),
			ConsumerId: proto.Uint64(id), RequestId: proto.Uint64(100 + id), ConsumerName: proto.String(name)}}, nil)
		for {
			got := p.next()
			if c := got.GetActiveConsumerChange(); c != nil && c.GetConsumerId() != id {
				notices = append(notices, c)
				continue
			}
			if got.GetSuccess().GetRequestId() != 100+id {
				t.Fatalf("SUBSCRIBE %s: %v", name, got)
			}
			return
		}
	}
	ping := func(step string) {
		t.Helper()
		p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PING.Enum(), Ping: &pulsarpb.CommandPing{}}, nil)
		if got := p.next(); got.GetType() != pulsarpb.BaseCommand_PONG {
			t.Fatalf("%s: %v before the PONG, want nothing before FLOW", step, got)
		}
	}
	flow := func(id uint64) {
		p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_FLOW.Enum(), Flow: &pulsarpb.CommandFlow{
			ConsumerId: proto.Uint64(id), MessagePermits: proto.Uint32(10)}}, nil)
	}
	expect := func(step string, want map[uint64]bool) {
		t.Helper()
		for len(want) > 0 {
			var c *pulsarpb.CommandActiveConsumerChange
			if len(notices) > 0 {
				c, notices = notices[0], notices[1:]
			} else {
				got := p.next()
				if c = got.GetActiveConsumerChange(); c == nil {
					t.Fatalf("%s: %v, want ACTIVE_CONSUMER_CHANGE %v", step, got, want)
				}
			}
			if active, ok := want[c.GetConsumerId()]; !ok || c.GetIsActive() != active {
				t.Fatalf("%s: %v, want ACTIVE_CONSUMER_CHANGE %v", step, c, want)
			}
			delete(want, c.GetConsumerId())
		}
	}
	subscribe(1, "b")
	ping("b subscribed")
	flow(1)
	expect("b's first FLOW", map[uint64]bool{1: true})
	// "a" sorts first: it becomes the active one. b, which has sent FLOW,
	// is told at once; a at its first FLOW.
	subscribe(2, "a")
	expect("a subscribed", map[uint64]bool{1: false})
	ping("a subscribed")
	flow(2)
	expect("a's first FLOW", map[uint64]bool{2: true})
	// Later FLOWs send nothing more.
	flow(2)
	ping("a's second FLOW")
	// "z" joins while a stays active: z alone is told it is not (at its
	// first FLOW); nobody else hears anything.
	subscribe(4, "z")
	ping("z subscribed")
	flow(4)
	expect("z's first FLOW", map[uint64]bool{4: false})
	ping("after z's notice")
	// A consumer that sends no FLOW (Java's zero receiver queue) is told
	// a second later all the same, as Pulsar tells every consumer.
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pulsarpb.CommandSubscribe{
		Topic: proto.String(topic + "-2"), Subscription: proto.String("s"), SubType: pulsarpb.CommandSubscribe_Failover.Enum(),
		ConsumerId: proto.Uint64(3), RequestId: proto.Uint64(103), ConsumerName: proto.String("c")}}, nil)
	if got := p.next(); got.GetSuccess().GetRequestId() != 103 {
		t.Fatalf("SUBSCRIBE c: %v", got)
	}
	start := time.Now()
	expect("c, without FLOW", map[uint64]bool{3: true})
	if waited := time.Since(start); waited < 500*time.Millisecond {
		t.Fatalf("c was told after %v, before any FLOW: want it held about a second", waited)
	}
}

// A reader (a non-durable subscription) that seeks is closed, as Pulsar
// closes it, and subscribes again with the start it was created with: it
// finds its subscription where the seek put it, not back at that start
// (pulsar-client-go's reader SeekByTime).
func TestPulsarProtocolReaderSeekKeepsPosition(t *testing.T) {
	t.Cleanup(broker.SetSeekReattachGrace(2 * time.Second))
	e := newEnv(t, func(c *broker.Config) { c.RetentionCheckInterval = 100 * time.Millisecond })
	cl := e.client()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "raw-reader-seek", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	produce(t, p, 0, 3)
	r := dialPulsar(t, e.b.Addr())
	r.connect()
	subscribe := func(requestID uint64) {
		t.Helper()
		r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pulsarpb.CommandSubscribe{
			Topic: proto.String("persistent://public/default/raw-reader-seek"), Subscription: proto.String("reader-x"),
			SubType: pulsarpb.CommandSubscribe_Exclusive.Enum(), Durable: proto.Bool(false),
			ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(requestID),
			StartMessageId: &pulsarpb.MessageIdData{LedgerId: proto.Uint64(math.MaxUint64), EntryId: proto.Uint64(math.MaxUint64)}}}, nil)
		if got := r.next(); got.GetSuccess().GetRequestId() != requestID {
			t.Fatalf("SUBSCRIBE answered %v", got)
		}
	}
	subscribe(1) // from the earliest message (-1:-1)
	r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SEEK.Enum(), Seek: &pulsarpb.CommandSeek{ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(2),
		MessagePublishTime: proto.Uint64(uint64(time.Now().Add(time.Hour).UnixMilli()))}}, nil)
	for answered := false; !answered; { // CLOSE_CONSUMER, then the seek's SUCCESS
		answered = r.next().GetSuccess().GetRequestId() == 2
	}
	subscribe(3) // again from the earliest, as the client does
	r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_FLOW.Enum(), Flow: &pulsarpb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(10)}}, nil)
	produce(t, p, 3, 1) // after the seek's time
	for {
		f, err := r.r.Read()
		if err != nil {
			t.Fatal(err)
		}
		if f.Cmd.GetType() != pulsarpb.BaseCommand_MESSAGE {
			continue // PINGs, the exclusive consumer's notice
		}
		// The first message after subscribing again is the one sent after
		// the seek, not the earliest.
		if _, payload, err := entry.Decode(f.Payload); err != nil || string(payload) != "m-00003" {
			t.Fatalf("first message after the seek and a new SUBSCRIBE: %q %v, want m-00003", payload, err)
		}
		break
	}
	// A reader closed by a seek that does not come back: its subscription
	// goes once the grace is over (the retention check drops it).
	r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SEEK.Enum(), Seek: &pulsarpb.CommandSeek{ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(4),
		MessagePublishTime: proto.Uint64(0)}}, nil)
	for answered := false; !answered; { // CLOSE_CONSUMER, then the seek's SUCCESS
		answered = r.next().GetSuccess().GetRequestId() == 4
	}
	subs := func() map[string]json.RawMessage {
		st, err := adminGetJSON[struct {
			Subscriptions map[string]json.RawMessage `json:"subscriptions"`
		}](e, "/admin/v2/persistent/public/default/raw-reader-seek/stats")
		if err != nil {
			t.Fatal(err)
		}
		return st.Subscriptions
	}
	if _, ok := subs()["reader-x"]; !ok {
		t.Fatal("the reader's subscription went at once after the seek; it should wait for the reader")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, ok := subs()["reader-x"]; !ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the reader's subscription is still there 30 s after a seek the reader never came back from")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A SEEK for a consumer a seek closed, sent before the client subscribed
// again, is applied to its subscription and answered (Pulsar refuses it):
// pulsar-client-go's reader created at the latest message inclusive seeks
// while it is created, and the application's Seek right after may reach
// the broker before the client subscribes again. Subscribing again, the
// consumer starts where that second seek put it. Refused, as by Pulsar,
// while another consumer is on the subscription, once the subscription
// went, and for a consumer the client closed itself.
func TestPulsarProtocolSeekBeforeResubscribe(t *testing.T) {
	e := newEnv(t, nil)
	p, err := e.client().CreateProducer(client.ProducerOptions{Topic: "raw-seek-closed", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ids := produce(t, p, 0, 5)
	r := dialPulsar(t, e.b.Addr())
	r.connect()
	// next skips what consumers may be told besides answers (the
	// exclusive consumer's notice, and MESSAGE frames sent before a
	// CLOSE_CONSUMER's answer).
	next := func() *pulsarpb.BaseCommand {
		t.Helper()
		for {
			got := r.next()
			if got.GetType() != pulsarpb.BaseCommand_ACTIVE_CONSUMER_CHANGE && got.GetType() != pulsarpb.BaseCommand_MESSAGE {
				return got
			}
		}
	}
	subscribe := func(consumerID, requestID uint64) {
		t.Helper()
		r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pulsarpb.CommandSubscribe{
			Topic: proto.String("persistent://public/default/raw-seek-closed"), Subscription: proto.String("reader-y"),
			SubType: pulsarpb.CommandSubscribe_Exclusive.Enum(), Durable: proto.Bool(false),
			ConsumerId: proto.Uint64(consumerID), RequestId: proto.Uint64(requestID),
			StartMessageId: &pulsarpb.MessageIdData{LedgerId: proto.Uint64(math.MaxUint64), EntryId: proto.Uint64(math.MaxUint64)}}}, nil)
		if got := next(); got.GetSuccess().GetRequestId() != requestID {
			t.Fatalf("SUBSCRIBE answered %v", got)
		}
	}
	closeConsumer := func(consumerID, requestID uint64) {
		t.Helper()
		r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_CLOSE_CONSUMER.Enum(), CloseConsumer: &pulsarpb.CommandCloseConsumer{
			ConsumerId: proto.Uint64(consumerID), RequestId: proto.Uint64(requestID)}}, nil)
		if got := next(); got.GetSuccess().GetRequestId() != requestID {
			t.Fatalf("CLOSE_CONSUMER answered %v", got)
		}
	}
	seek := func(requestID uint64, to client.MessageID) {
		r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SEEK.Enum(), Seek: &pulsarpb.CommandSeek{ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(requestID),
			MessageId: &pulsarpb.MessageIdData{LedgerId: proto.Uint64(uint64(to.LedgerID())), EntryId: proto.Uint64(uint64(to.EntryID()))}}}, nil)
	}
	subscribe(1, 1)
	seek(2, ids[4])
	if got := next(); got.GetType() != pulsarpb.BaseCommand_CLOSE_CONSUMER {
		t.Fatalf("the seek first answered %v, want CLOSE_CONSUMER", got)
	}
	if got := next(); got.GetSuccess().GetRequestId() != 2 {
		t.Fatalf("the seek answered %v after CLOSE_CONSUMER, want SUCCESS", got)
	}
	seek(3, ids[1]) // before subscribing again, nobody on the subscription
	if got := next(); got.GetSuccess().GetRequestId() != 3 {
		t.Fatalf("a SEEK for the consumer the first seek closed answered %v, want SUCCESS", got)
	}
	// Another consumer joins the subscription: a SEEK for the closed one
	// is refused now, and the newcomer starts where the second seek put
	// the subscription.
	subscribe(2, 4)
	seek(5, ids[0])
	if got := next(); got.GetError().GetRequestId() != 5 {
		t.Fatalf("a SEEK for the closed consumer while another is on its subscription answered %v, want an error", got)
	}
	r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_FLOW.Enum(), Flow: &pulsarpb.CommandFlow{ConsumerId: proto.Uint64(2), MessagePermits: proto.Uint32(10)}}, nil)
	for {
		f, err := r.r.Read()
		if err != nil {
			t.Fatal(err)
		}
		if f.Cmd.GetType() != pulsarpb.BaseCommand_MESSAGE {
			continue
		}
		if got := int64(f.Cmd.GetMessage().GetMessageId().GetEntryId()); got != ids[1].EntryID() {
			t.Fatalf("first message on the subscription after the seeks: entry %d, want %d (where the second seek put it)", got, ids[1].EntryID())
		}
		break
	}
	// Its last consumer gone, the reader's subscription goes: refused.
	closeConsumer(2, 6)
	seek(7, ids[0])
	if got := next(); got.GetError().GetRequestId() != 7 {
		t.Fatalf("a SEEK for the closed consumer of a subscription that went answered %v, want an error", got)
	}
	subscribe(1, 8)
	closeConsumer(1, 9)
	seek(10, ids[0])
	if got := next(); got.GetError().GetRequestId() != 10 {
		t.Fatalf("a SEEK for a consumer the client closed answered %v, want an error", got)
	}
}

// Termination on Pulsar's protocol: a SEND that reaches the terminated
// topic before the broker closes its producer is not answered with a
// SEND_ERROR (pulsar-client-go would drop the producer and let its
// pending sends time out) but the producer is closed (CLOSE_PRODUCER); a
// SEND written before the client read the CLOSE_PRODUCER is dropped, to be
// sent again by the client; creating the producer again is refused with
// TopicTerminatedError; the consumer is told REACHED_END_OF_TOPIC once it
// acknowledged everything.
func TestPulsarProtocolTermination(t *testing.T) {
	e := newEnv(t, nil)
	p := dialPulsar(t, e.b.Addr())
	p.connect()
	const topic = "persistent://public/default/ends"
	producer := func(req uint64) *pulsarpb.BaseCommand {
		t.Helper()
		p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PRODUCER.Enum(), Producer: &pulsarpb.CommandProducer{
			Topic: proto.String(topic), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(req), ProducerName: proto.String("w")}}, nil)
		return p.next()
	}
	send := func(seq uint64) {
		b, err := entry.Encode(&pulsarpb.MessageMetadata{ProducerName: proto.String("w"), SequenceId: proto.Uint64(seq),
			PublishTime: proto.Uint64(uint64(time.Now().UnixMilli()))}, []byte(fmt.Sprint("m-", seq)))
		if err != nil {
			panic(err)
		}
		p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SEND.Enum(), Send: &pulsarpb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(seq)}}, b)
	}
	if got := producer(1); got.GetProducerSuccess() == nil {
		t.Fatalf("PRODUCER answered %v", got)
	}
	send(0)
	if got := p.next(); got.GetSendReceipt().GetSequenceId() != 0 {
		t.Fatalf("SEND answered %v", got)
	}
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pulsarpb.CommandSubscribe{
		Topic: proto.String(topic), Subscription: proto.String("s"), SubType: pulsarpb.CommandSubscribe_Exclusive.Enum(),
		ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(2), InitialPosition: pulsarpb.CommandSubscribe_Earliest.Enum()}}, nil)
	if got := p.next(); got.GetSuccess().GetRequestId() != 2 {
		t.Fatalf("SUBSCRIBE answered %v", got)
	}
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_FLOW.Enum(), Flow: &pulsarpb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(10)}}, nil)
	msg := p.next().GetMessage()
	if msg == nil {
		t.Fatal("no MESSAGE for the stored message")
	}

	// The frames read until a PONG, while the topic is terminated and its
	// producer not yet closed by terminate: a SEND then.
	var inWindow []pulsarpb.BaseCommand_Type
	var readErr error
	restore := func() { broker.SetTestHookTerminated(nil) }
	broker.SetTestHookTerminated(func() {
		send(1)
		p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PING.Enum(), Ping: &pulsarpb.CommandPing{}}, nil)
		for {
			f, err := p.r.Read()
			if err != nil {
				readErr = err
				return
			}
			if typ := f.Cmd.GetType(); typ == pulsarpb.BaseCommand_PONG {
				return
			} else if typ != pulsarpb.BaseCommand_PING {
				inWindow = append(inWindow, typ)
			}
		}
	})
	code, body, err := adminDo(e, http.MethodPost, "/admin/v2/persistent/public/default/ends/terminate", nil)
	restore()
	if err != nil || code != http.StatusOK {
		t.Fatalf("terminate: %d %s %v", code, body, err)
	}
	if readErr != nil {
		t.Fatalf("reading while the topic was being terminated: %v", readErr)
	}
	closed := slices.Contains(inWindow, pulsarpb.BaseCommand_CLOSE_PRODUCER)
	for _, typ := range inWindow {
		if typ != pulsarpb.BaseCommand_CLOSE_PRODUCER {
			t.Fatalf("a SEND refused for the termination was answered with %v, want the producer closed", typ)
		}
	}
	for !closed {
		got := p.next()
		if got.GetType() != pulsarpb.BaseCommand_CLOSE_PRODUCER || got.GetCloseProducer().GetProducerId() != 1 {
			t.Fatalf("%v, want CLOSE_PRODUCER for producer 1", got)
		}
		closed = true
	}
	send(2)
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PING.Enum(), Ping: &pulsarpb.CommandPing{}}, nil)
	if got := p.next(); got.GetType() != pulsarpb.BaseCommand_PONG {
		t.Fatalf("a SEND for the producer the broker closed was answered with %v, want it dropped", got)
	}
	if got := producer(3); got.GetError().GetError() != pulsarpb.ServerError_TopicTerminatedError {
		t.Fatalf("PRODUCER on the terminated topic: %v, want TopicTerminatedError", got)
	}
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_ACK.Enum(), Ack: &pulsarpb.CommandAck{ConsumerId: proto.Uint64(1),
		AckType: pulsarpb.CommandAck_Individual.Enum(), MessageId: []*pulsarpb.MessageIdData{msg.GetMessageId()}}}, nil)
	if got := p.next(); got.GetType() != pulsarpb.BaseCommand_REACHED_END_OF_TOPIC || got.GetReachedEndOfTopic().GetConsumerId() != 1 {
		t.Fatalf("after the last acknowledgement: %v, want REACHED_END_OF_TOPIC", got)
	}
}

// A port of its own for Pulsar's protocol, without TLS: lookups send
// Pulsar's clients there, and the official client produces through it
// what the SDK, on the gRPC port, receives.
func TestPulsarProtocolPlaintextPort(t *testing.T) {
	e := newEnv(t, func(c *broker.Config) { c.PulsarListen = "127.0.0.1:0" })
	addr := e.b.PulsarAddr()
	if addr == "" || addr == e.b.Addr() {
		t.Fatalf("Pulsar port %q (client port %s)", addr, e.b.Addr())
	}
	const topic = "persistent://public/default/own-port"
	p := dialPulsar(t, addr)
	p.connect()
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pulsarpb.CommandLookupTopic{
		Topic: proto.String(topic), RequestId: proto.Uint64(1)}}, nil)
	if got := p.next().GetLookupTopicResponse(); got.GetBrokerServiceUrl() != "pulsar://"+addr || got.GetResponse() != pulsarpb.CommandLookupTopicResponse_Connect {
		t.Fatalf("lookup: %v, want Connect to pulsar://%s", got, addr)
	}

	cons, err := e.client().Subscribe(client.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	official, err := pulsar.NewClient(pulsar.ClientOptions{URL: "pulsar://" + addr, OperationTimeout: 30 * time.Second, Logger: plog.DefaultNopLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer official.Close()
	prod, err := official.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	if _, err := prod.Send(ctxT(t), &pulsar.ProducerMessage{Payload: []byte("through its own port"), Key: "k"}); err != nil {
		t.Fatal(err)
	}
	if m := receiveN(t, cons, 1)[0]; string(m.Payload()) != "through its own port" || m.Key() != "k" {
		t.Fatalf("received %q key %q", m.Payload(), m.Key())
	}
}

// A topic that unloads (it moves to another broker, or an operator
// unloads it) tells each Pulsar client's producer and consumer on it to
// close (CLOSE_PRODUCER, CLOSE_CONSUMER, request id -1 as Pulsar's broker
// sends them), and the connection stays open for them to look the topic
// up and come back. (The official client across an unload:
// e2e/pulsarclient_test.go, TestPulsarClientAcrossUnload; its reconnection
// has a data race of its own, which -race here would report.)
func TestPulsarProtocolUnloadClosesProducersAndConsumers(t *testing.T) {
	e := newEnv(t, nil)
	const topic = "persistent://public/default/unloaded"
	r := dialPulsar(t, e.b.Addr())
	r.connect()
	open := func() {
		t.Helper()
		r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PRODUCER.Enum(), Producer: &pulsarpb.CommandProducer{
			Topic: proto.String(topic), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(1)}}, nil)
		if got := r.next(); got.GetType() != pulsarpb.BaseCommand_PRODUCER_SUCCESS {
			t.Fatalf("PRODUCER answered %v", got)
		}
		r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pulsarpb.CommandSubscribe{
			Topic: proto.String(topic), Subscription: proto.String("s"), SubType: pulsarpb.CommandSubscribe_Exclusive.Enum(),
			ConsumerId: proto.Uint64(2), RequestId: proto.Uint64(2)}}, nil)
		if got := r.next(); got.GetSuccess().GetRequestId() != 2 {
			t.Fatalf("SUBSCRIBE answered %v", got)
		}
		r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_FLOW.Enum(), Flow: &pulsarpb.CommandFlow{ConsumerId: proto.Uint64(2), MessagePermits: proto.Uint32(10)}}, nil)
	}
	open()
	if err := e.b.Unload(ctxT(t), topic); err != nil {
		t.Fatal(err)
	}
	var producerClosed, consumerClosed bool
	for !producerClosed || !consumerClosed {
		switch got := r.next(); {
		case got.GetType() == pulsarpb.BaseCommand_CLOSE_PRODUCER && got.GetCloseProducer().GetProducerId() == 1 &&
			got.GetCloseProducer().GetRequestId() == math.MaxUint64: // -1, as Pulsar's broker sends it
			producerClosed = true
		case got.GetType() == pulsarpb.BaseCommand_CLOSE_CONSUMER && got.GetCloseConsumer().GetConsumerId() == 2 &&
			got.GetCloseConsumer().GetRequestId() == math.MaxUint64:
			consumerClosed = true
		case got.GetType() == pulsarpb.BaseCommand_ACTIVE_CONSUMER_CHANGE:
		default:
			t.Fatalf("after the unload: %v, want CLOSE_PRODUCER and CLOSE_CONSUMER", got)
		}
	}
	// The same connection: the topic is looked up (loaded again here) and
	// both come back; a message sent goes through.
	r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pulsarpb.CommandLookupTopic{
		Topic: proto.String(topic), RequestId: proto.Uint64(3)}}, nil)
	if got := r.next().GetLookupTopicResponse(); got.GetResponse() != pulsarpb.CommandLookupTopicResponse_Connect {
		t.Fatalf("lookup after the unload: %v", got)
	}
	open()
	name := "unloaded-producer"
	msg, err := entry.Encode(&pulsarpb.MessageMetadata{ProducerName: proto.String(name), SequenceId: proto.Uint64(0), PublishTime: proto.Uint64(1)}, []byte("after"))
	if err != nil {
		t.Fatal(err)
	}
	r.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SEND.Enum(), Send: &pulsarpb.CommandSend{
		ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(0)}}, msg)
	for receipt, got := false, false; !receipt || !got; {
		f, err := r.r.Read()
		if err != nil {
			t.Fatal(err)
		}
		switch f.Cmd.GetType() {
		case pulsarpb.BaseCommand_PING, pulsarpb.BaseCommand_ACTIVE_CONSUMER_CHANGE:
		case pulsarpb.BaseCommand_SEND_RECEIPT:
			receipt = f.Cmd.GetSendReceipt().GetProducerId() == 1
		case pulsarpb.BaseCommand_MESSAGE:
			if _, payload, err := entry.Decode(f.Payload); err != nil || string(payload) != "after" {
				t.Fatalf("MESSAGE %q, %v", payload, err)
			}
			got = true
		default:
			t.Fatalf("after coming back: %v", f.Cmd)
		}
	}
}
