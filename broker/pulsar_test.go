package broker_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/internal/pulsarwire"
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

// closed reports whether the broker closed the connection.
func (p *rawPulsar) closed() bool {
	_, err := p.r.Read()
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}

// The protocol's edges: CONNECT first; PING answered; what the broker
// does not serve answered with Pulsar's ERROR, or the connection closed
// when there is no request to answer; a producer with a schema refused; a
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
	// Not served yet, with a request id: ERROR for it.
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pulsarpb.CommandSubscribe{
		Topic: proto.String("t"), Subscription: proto.String("s"), SubType: pulsarpb.CommandSubscribe_Exclusive.Enum(),
		ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(42)}}, nil)
	if got := p.next(); got.GetType() != pulsarpb.BaseCommand_ERROR || got.GetError().GetRequestId() != 42 || got.GetError().GetMessage() == "" {
		t.Fatalf("SUBSCRIBE answered %v, want ERROR for request 42 with a reason", got)
	}
	// A schema the broker does not keep.
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PRODUCER.Enum(), Producer: &pulsarpb.CommandProducer{
		Topic: proto.String("persistent://public/default/raw"), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(43),
		Schema: &pulsarpb.Schema{Name: proto.String("s"), SchemaData: []byte("{}"), Type: pulsarpb.Schema_Avro.Enum()}}}, nil)
	if got := p.next(); got.GetError().GetError() != pulsarpb.ServerError_IncompatibleSchema || got.GetError().GetRequestId() != 43 {
		t.Fatalf("an Avro producer: %v, want ERROR IncompatibleSchema", got)
	}
	// A producer, then a SEND whose checksum is wrong, then one for a
	// producer that does not exist.
	p.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PRODUCER.Enum(), Producer: &pulsarpb.CommandProducer{
		Topic: proto.String("persistent://public/default/raw"), ProducerId: proto.Uint64(2), RequestId: proto.Uint64(44)}}, nil)
	if got := p.next(); got.GetType() != pulsarpb.BaseCommand_PRODUCER_SUCCESS || got.GetProducerSuccess().GetProducerName() == "" {
		t.Fatalf("PRODUCER answered %v", got)
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
	// A frame over the limit closes the connection before anything is
	// allocated for it.
	huge := binary.BigEndian.AppendUint32(nil, 1<<30)
	if _, err := p.conn.Write(huge); err != nil {
		t.Fatal(err)
	}
	if !p.closed() {
		t.Fatal("a frame of 1 GiB did not close the connection")
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
}
