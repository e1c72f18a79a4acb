package pulsarwire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

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
