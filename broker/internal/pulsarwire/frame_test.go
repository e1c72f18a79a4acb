package pulsarwire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/proto/pulsarpb"
)

func ping() *pulsarpb.BaseCommand {
	return &pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PING.Enum(), Ping: &pulsarpb.CommandPing{}}
}

func send() *pulsarpb.BaseCommand {
	return &pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SEND.Enum(), Send: &pulsarpb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(7)}}
}

func TestRoundTrip(t *testing.T) {
	var b []byte
	var err error
	for _, f := range []Frame{{Cmd: ping()}, {Cmd: send(), Payload: []byte("headers and payload")}, {Cmd: ping()}} {
		if b, err = Append(b, f.Cmd, f.Payload); err != nil {
			t.Fatal(err)
		}
	}
	r := NewReader(bytes.NewReader(b), 1<<20)
	for i, want := range []Frame{{Cmd: ping()}, {Cmd: send(), Payload: []byte("headers and payload")}, {Cmd: ping()}} {
		got, err := r.Read()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !proto.Equal(got.Cmd, want.Cmd) || !bytes.Equal(got.Payload, want.Payload) {
			t.Fatalf("frame %d: %v %q, want %v %q", i, got.Cmd, got.Payload, want.Cmd, want.Payload)
		}
	}
	if _, err := r.Read(); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

// Sizes from the peer are checked before anything is allocated for them.
func TestBadFrames(t *testing.T) {
	frame := func(total, cmdSize uint32, rest []byte) []byte {
		b := binary.BigEndian.AppendUint32(nil, total)
		b = binary.BigEndian.AppendUint32(b, cmdSize)
		return append(b, rest...)
	}
	good, _ := Append(nil, ping(), nil)
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{"over the limit", frame(1<<30, 2, nil), ErrTooLarge},
		{"total under 4", frame(3, 0, nil), ErrMalformed},
		{"command larger than the frame", frame(10, 100, make([]byte, 6)), ErrMalformed},
		{"command that does not parse", frame(8, 4, []byte{0xff, 0xff, 0xff, 0xff}), ErrMalformed},
		{"command without its type", frame(4, 0, nil), ErrMalformed},
		{"cut in the sizes", good[:6], io.ErrUnexpectedEOF},
		{"cut in the command", good[:len(good)-1], io.ErrUnexpectedEOF},
	} {
		_, err := NewReader(bytes.NewReader(tc.in), 1<<20).Read()
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// FuzzRead: any input gives frames within the limit or an error, never a
// panic; a frame read and written again reads back the same.
func FuzzRead(f *testing.F) {
	a, _ := Append(nil, ping(), nil)
	b, _ := Append(nil, send(), []byte{0x0e, 0x01, 1, 2, 3, 4})
	f.Add(a)
	f.Add(append(a, b...))
	f.Add([]byte{0, 0, 0, 8, 0, 0, 0, 4, 8, 18, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		const max = 4096
		r := NewReader(bytes.NewReader(in), max)
		for {
			fr, err := r.Read()
			if err != nil {
				return
			}
			if len(fr.Payload) > max {
				t.Fatalf("payload of %d bytes over the limit %d", len(fr.Payload), max)
			}
			out, err := Append(nil, fr.Cmd, fr.Payload)
			if err != nil {
				t.Fatal(err)
			}
			again, err := NewReader(bytes.NewReader(out), 1<<20).Read()
			if err != nil {
				t.Fatalf("a frame written back does not read: %v", err)
			}
			if !proto.Equal(again.Cmd, fr.Cmd) || !bytes.Equal(again.Payload, fr.Payload) {
				t.Fatalf("round trip: %v %x, want %v %x", again.Cmd, again.Payload, fr.Cmd, fr.Payload)
			}
		}
	})
}

// AppendReceipt writes the bytes Append writes for the same SEND_RECEIPT.
func TestAppendReceipt(t *testing.T) {
	for _, r := range []Receipt{
		{ProducerID: 1, SequenceID: 0, LedgerID: 10, EntryID: 0, Partition: -1},
		{ProducerID: 0, SequenceID: 7, LedgerID: 0, EntryID: 3, Partition: 0},
		{ProducerID: 1 << 40, SequenceID: 1<<63 + 5, LedgerID: 12345678, EntryID: 99999, Partition: 9},
		{ProducerID: 3, SequenceID: 4, LedgerID: math.MaxUint64, EntryID: math.MaxUint64, Partition: math.MaxInt32}, // a duplicate: -1:-1
		{ProducerID: 3, SequenceID: 4, LedgerID: 1, EntryID: 2, Partition: math.MinInt32},
	} {
		cmd := &pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SEND_RECEIPT.Enum(), SendReceipt: &pulsarpb.CommandSendReceipt{
			ProducerId: proto.Uint64(r.ProducerID), SequenceId: proto.Uint64(r.SequenceID),
			MessageId: &pulsarpb.MessageIdData{LedgerId: proto.Uint64(r.LedgerID), EntryId: proto.Uint64(r.EntryID), Partition: proto.Int32(r.Partition)},
		}}
		want, err := Append([]byte("before"), cmd, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := AppendReceipt([]byte("before"), r)
		if !bytes.Equal(got, want) {
			t.Fatalf("%+v: %x, want %x", r, got, want)
		}
		f, err := NewReader(bytes.NewReader(got[len("before"):]), 1<<20).Read()
		if err != nil || !proto.Equal(f.Cmd, cmd) || f.Payload != nil {
			t.Fatalf("%+v read back as %v %q (%v)", r, f.Cmd, f.Payload, err)
		}
	}
}

// decodeSend gives what proto.Unmarshal gives, or leaves it to it.
func TestDecodeSend(t *testing.T) {
	full := &pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SEND.Enum(), Send: &pulsarpb.CommandSend{
		ProducerId: proto.Uint64(1 << 40), SequenceId: proto.Uint64(7), NumMessages: proto.Int32(-3), TxnidLeastBits: proto.Uint64(4),
		TxnidMostBits: proto.Uint64(5), HighestSequenceId: proto.Uint64(9), IsChunk: proto.Bool(true), Marker: proto.Bool(false)}}
	withID := proto.Clone(full).(*pulsarpb.BaseCommand)
	withID.Send.MessageId = &pulsarpb.MessageIdData{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(2)}
	noSeq := &pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SEND.Enum(), Send: &pulsarpb.CommandSend{ProducerId: proto.Uint64(1)}}
	for _, tc := range []struct {
		name string
		cmd  *pulsarpb.BaseCommand
		fast bool
	}{
		{"the client's SEND", send(), true},
		{"every field of CommandSend but message_id", full, true},
		{"with a message_id", withID, false},
		{"another command", ping(), false},
		{"a required field missing", noSeq, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := proto.MarshalOptions{AllowPartial: true}.Marshal(tc.cmd)
			if err != nil {
				t.Fatal(err)
			}
			got := decodeSend(b)
			if (got != nil) != tc.fast {
				t.Fatalf("decoded by hand: %v, want %v", got != nil, tc.fast)
			}
			if got != nil && !proto.Equal(got, tc.cmd) {
				t.Fatalf("decoded %v, want %v", got, tc.cmd)
			}
		})
	}
}

func FuzzDecodeSend(f *testing.F) {
	for _, c := range []*pulsarpb.BaseCommand{send(), ping()} {
		b, _ := proto.Marshal(c)
		f.Add(b)
	}
	f.Add([]byte{0x08, 0x06, 0x32, 0x04, 0x08, 0x01, 0x10, 0x02, 0x32, 0x02, 0x08, 0x03}) // send twice
	f.Fuzz(func(t *testing.T, b []byte) {
		got := decodeSend(b)
		if got == nil {
			return
		}
		want := &pulsarpb.BaseCommand{}
		if err := proto.Unmarshal(b, want); err != nil {
			t.Fatalf("decoded by hand what proto.Unmarshal refuses (%v): %v", err, got)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("decoded %v, proto.Unmarshal %v", got, want)
		}
	})
}

// TxnRequestID finds a transaction command's request id in its body,
// which pulsarpb keeps as an unknown field, and nothing else.
func TestTxnRequestID(t *testing.T) {
	body := func(fields ...uint64) []byte { // field number, value pairs
		var b []byte
		for i := 0; i < len(fields); i += 2 {
			b = protowire.AppendVarint(protowire.AppendTag(b, protowire.Number(fields[i]), protowire.VarintType), fields[i+1])
		}
		return b
	}
	cmd := func(typ pulsarpb.BaseCommand_Type, unknown ...[]byte) *pulsarpb.BaseCommand {
		c := &pulsarpb.BaseCommand{Type: typ.Enum()}
		var u []byte
		for _, b := range unknown {
			u = append(u, b...)
		}
		c.ProtoReflect().SetUnknown(u)
		return c
	}
	field := func(num pulsarpb.BaseCommand_Type, b []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, protowire.Number(num), protowire.BytesType), b)
	}
	for _, tc := range []struct {
		name string
		cmd  *pulsarpb.BaseCommand
		id   uint64
		ok   bool
	}{
		{"new txn", cmd(pulsarpb.BaseCommand_NEW_TXN, field(pulsarpb.BaseCommand_NEW_TXN, body(1, 7, 3, 0))), 7, true},
		{"request id last", cmd(pulsarpb.BaseCommand_END_TXN, field(pulsarpb.BaseCommand_END_TXN, body(2, 5, 3, 1, 1, 9))), 9, true},
		{"every type", cmd(pulsarpb.BaseCommand_END_TXN_ON_SUBSCRIPTION, field(pulsarpb.BaseCommand_END_TXN_ON_SUBSCRIPTION, body(1, 1<<40))), 1 << 40, true},
		{"tc connect", cmd(pulsarpb.BaseCommand_TC_CLIENT_CONNECT_REQUEST, field(pulsarpb.BaseCommand_TC_CLIENT_CONNECT_REQUEST, body(1, 3, 2, 0))), 3, true},
		{"other fields before", cmd(pulsarpb.BaseCommand_ADD_PARTITION_TO_TXN, body(70, 1), field(pulsarpb.BaseCommand_ADD_PARTITION_TO_TXN, body(1, 4))), 4, true},
		{"no body", cmd(pulsarpb.BaseCommand_NEW_TXN), 0, false},
		{"body of another type", cmd(pulsarpb.BaseCommand_NEW_TXN, field(pulsarpb.BaseCommand_END_TXN, body(1, 7))), 0, false},
		{"no request id", cmd(pulsarpb.BaseCommand_NEW_TXN, field(pulsarpb.BaseCommand_NEW_TXN, body(3, 7))), 0, false},
		{"request id not a varint", cmd(pulsarpb.BaseCommand_NEW_TXN, field(pulsarpb.BaseCommand_NEW_TXN, protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte("x")))), 0, false},
		{"truncated body", cmd(pulsarpb.BaseCommand_NEW_TXN, field(pulsarpb.BaseCommand_NEW_TXN, body(1, 1<<40))[:4]), 0, false},
		{"not a transaction", cmd(pulsarpb.BaseCommand_PING, field(pulsarpb.BaseCommand_NEW_TXN, body(1, 7))), 0, false},
	} {
		id, ok := TxnRequestID(tc.cmd)
		if id != tc.id || ok != tc.ok {
			t.Errorf("%s: %d, %v; want %d, %v", tc.name, id, ok, tc.id, tc.ok)
		}
	}
}
