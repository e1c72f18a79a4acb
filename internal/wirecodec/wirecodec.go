// Package wirecodec holds the gRPC codecs of the payload-carrying
// messages. Codec, for the brokers' and the bookies' servers, is gRPC's
// protobuf codec for every message but the two that carry payloads in
// bulk: a bookie's AddEntriesRequest (the broker's adds) and a broker's
// ProduceRequest with a Send (a client's message or batch) or Sends
// (several). Those it
// decodes itself, from the buffers gRPC received the message in (one per
// HTTP/2 frame) without joining them first, and copies each payload into
// a buffer of the process's pool (internal/bufpool) instead of a fresh
// allocation. (The ledger client's own codec, in bookie/ledger, encodes
// the adds around their payloads.)
//
// Why: protobuf copies every bytes field into new memory. On the produce
// path that was three quarters of all the bytes a standalone allocated (a
// payload copied once by the broker and once by each bookie), and the
// garbage collector it fed took one of the two cores for 20-40 ms every
// second or so at 20,000 msg/s: the periodic latency spikes of the
// produce tail (docs/benchmarks.md).
//
// The contract: a server that decoded a payload with this codec hands it
// back with Release after its last use of it: the bookie in the add's
// completion callback (the storage has copied it and answered), the
// broker once it is done with each send, on each way out (publish has
// encoded the entry, a copy, or the send was refused), and, when a
// request's sends are cut short (the stream ends), for each send it did
// not take. A payload not released (a stream ending early) is only
// garbage, as before; one released too early is another message's bytes. With
// MAGNETAR_POISON_RELEASED=1 in the environment, released buffers are
// overwritten first, which turns a release too early into corrupt data or
// a checksum failure in tests.
//
// Pooled buffers come in powers of two: a payload can hold up to twice
// its length while in flight (the bookie's in-flight budget counts the
// length), and idle buffers stay in the pool until collections.
//
// The hand decoding covers exactly the fields of today's messages, as
// protobuf would decode them. Anything else (an unknown field, a field
// twice, a wrong wire type, a ProducerOpen) falls back to protobuf, so the
// result is always what protobuf would have made.
package wirecodec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/internal/bufpool"
	"github.com/magnetar-io/magnetar/proto/bookiepb"
	"github.com/magnetar-io/magnetar/proto/brokerpb"
	"github.com/magnetar-io/magnetar/proto/pulsarpb"
)

// Codec is the codec to give servers (grpc.ForceServerCodecV2).
func Codec() encoding.CodecV2 { return codec{base: encoding.GetCodecV2(grpcproto.Name)} }

type codec struct{ base encoding.CodecV2 }

func (c codec) Name() string { return grpcproto.Name }

func (c codec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	switch m := v.(type) {
	case *bookiepb.AddEntriesRequest:
		return pooled(c, data, m, decodeAddEntries)
	case *brokerpb.ProduceRequest:
		return pooled(c, data, m, decodeProduce)
	}
	return c.base.Unmarshal(data, v)
}

// MaxSends is the most sends a ProduceRequest's Sends may hold
// (broker.proto); the SDK sends at most as many (client.maxSendsTogether).
const MaxSends = 1024

// ErrTooManySends: a Sends of more than MaxSends sends, refused without
// decoding it (the stream ends with it).
var ErrTooManySends = errors.New("too many sends in one request")

// errFallback makes a decoder give the message to protobuf.
var errFallback = errors.New("wirecodec: left to protobuf")

// pooled runs decode over data's bytes; when it declines, it releases
// what it took from the pool and lets protobuf decode the message.
func pooled[M proto.Message](c codec, data mem.BufferSlice, m M, decode func(*scanner, M) error) error {
	sc := newScanner(data)
	if err := decode(&sc, m); err != nil {
		releaseAll(m)
		proto.Reset(m)
		if !errors.Is(err, errFallback) {
			return err // refused outright: not worth decoding at all
		}
		return c.base.Unmarshal(data, m)
	}
	return nil
}

// releaseAll releases the payloads a declined decode had taken.
func releaseAll(m proto.Message) {
	switch m := m.(type) {
	case *bookiepb.AddEntriesRequest:
		for _, e := range m.Entries {
			Release(e.Payload)
		}
	case *brokerpb.ProduceRequest:
		Release(m.GetSend().GetPayload())
		for _, send := range m.GetSends().GetSends() {
			Release(send.GetPayload())
		}
	}
}

// payload copies the next n bytes of s into a pooled buffer (nil for
// none, as protobuf). The caller checked that s has them.
func payload(s *scanner, n int) []byte {
	if n == 0 {
		return nil
	}
	b := bufpool.Shared().GetBytes(n)
	s.copyTo(b)
	return b
}

// Release hands back a payload the codec decoded; b must not be used
// after. A payload protobuf decoded (or nil) may be given too.
func Release(b []byte) {
	if cap(b) == 0 {
		return
	}
	b = b[:cap(b)]
	if poison() {
		for i := range b {
			b[i] = 0xdb
		}
	}
	bufpool.Shared().PutBytes(b)
}

// PoisonEnv is the environment variable that, set to 1, makes Release
// overwrite the buffers it hands back (read once, at the first Release).
const PoisonEnv = "MAGNETAR_POISON_RELEASED"

var poison = sync.OnceValue(func() bool { return os.Getenv(PoisonEnv) == "1" })

// seen tracks the fields met in one message: a second occurrence makes
// the decoder decline (protobuf merges or replaces; not worth mimicking).
type seen uint32

func (s *seen) first(n protowire.Number) bool {
	bit := seen(1) << n
	if *s&bit != 0 {
		return false
	}
	*s |= bit
	return true
}

// countMessages counts what is left of s as a message holding only
// field 1, repeated, of messages; false for anything else.
func countMessages(c scanner) (int, bool) {
	n := 0
	for ; c.left > 0; n++ {
		num, typ, ok := c.tag()
		if !ok || num != 1 || typ != protowire.BytesType {
			return 0, false
		}
		if l, ok := c.length(); !ok || !c.skip(l) {
			return 0, false
		}
	}
	return n, true
}

// decodeAddEntries decodes an AddEntriesRequest (repeated AddEntryRequest
// entries = 1). The entries are allocated together; entries of one ledger
// share one master key.
func decodeAddEntries(s *scanner, m *bookiepb.AddEntriesRequest) error {
	n, ok := countMessages(*s)
	if !ok {
		return errFallback
	}
	if n == 0 {
		return nil
	}
	reqs := make([]bookiepb.AddEntryRequest, n)
	m.Entries = make([]*bookiepb.AddEntryRequest, 0, n)
	var key []byte
	for i := range reqs {
		s.tag()
		l, _ := s.length()
		r := &reqs[i]
		m.Entries = append(m.Entries, r) // before decoding: a decline releases its payload
		if err := decodeAddEntry(s, l, r, &key); err != nil {
			return err
		}
	}
	return nil
}

// decodeAddEntry decodes the next size bytes of s.
func decodeAddEntry(s *scanner, size int, r *bookiepb.AddEntryRequest, key *[]byte) error {
	end := s.left - size
	var seen seen
	for s.left > end {
		num, typ, ok := s.tag()
		if !ok || num < 1 || num > 9 || !seen.first(num) {
			return errFallback
		}
		switch num {
		case 3, 7: // master_key, payload
			if typ != protowire.BytesType {
				return errFallback
			}
			l, ok := s.length()
			if !ok || l > s.left-end {
				return errFallback
			}
			if num == 7 {
				r.Payload = payload(s, l)
			} else if v := s.bytes(l); len(v) > 0 {
				if !bytes.Equal(*key, v) {
					*key = bytes.Clone(v)
				}
				r.MasterKey = *key
			}
		case 6: // crc32c
			if typ != protowire.Fixed32Type {
				return errFallback
			}
			v, ok := s.fixed32()
			if !ok {
				return errFallback
			}
			r.Crc32C = v
		default:
			if typ != protowire.VarintType {
				return errFallback
			}
			v, ok := s.varint()
			if !ok {
				return errFallback
			}
			switch num {
			case 1:
				r.LedgerId = int64(v)
			case 2:
				r.EntryId = int64(v)
			case 4:
				r.LastAddConfirmed = int64(v)
			case 5:
				r.Length = int64(v)
			case 8:
				r.Recovery = protowire.DecodeBool(v)
			case 9:
				r.RequestId = v
			}
		}
	}
	if s.left != end { // the last field ran past the entry
		return errFallback
	}
	return nil
}

// decodeProduce decodes a ProduceRequest holding a Send (oneof request:
// send = 2) or Sends (sends = 3); a ProducerOpen (once per stream) is left
// to protobuf.
func decodeProduce(s *scanner, m *brokerpb.ProduceRequest) error {
	num, typ, ok := s.tag()
	if !ok || (num != 2 && num != 3) || typ != protowire.BytesType {
		return errFallback
	}
	if l, ok := s.length(); !ok || l != s.left {
		return errFallback
	}
	if num == 2 {
		one := &oneSend{}
		one.wrap.Send = &one.parts.send
		m.Request = &one.wrap // before decoding: a decline releases its payload
		return decodeSend(s, 0, &one.parts)
	}
	n, ok := countMessages(*s)
	if !ok {
		return errFallback
	}
	if n > MaxSends {
		// Counted before anything is allocated: 3 million empty sends
		// fit in a request the transport takes.
		return fmt.Errorf("%w: %d sends in one request, at most %d", ErrTooManySends, n, MaxSends)
	}
	parts := make([]sendParts, n)
	sends := &brokerpb.Sends{Sends: make([]*brokerpb.Send, 0, n)}
	m.Request = &brokerpb.ProduceRequest_Sends{Sends: sends}
	for i := range parts {
		s.tag()
		l, _ := s.length()
		sends.Sends = append(sends.Sends, &parts[i].send) // before decoding: a decline releases its payload
		if err := decodeSend(s, s.left-l, &parts[i]); err != nil {
			return err
		}
	}
	return nil
}

// decodeSend decodes a Send from s, up to where end bytes are left.
func decodeSend(s *scanner, end int, parts *sendParts) error {
	send := &parts.send
	var seen seen
	for s.left > end {
		num, typ, ok := s.tag()
		if !ok || num < 1 || num > 4 || !seen.first(num) {
			return errFallback
		}
		if num <= 2 {
			if typ != protowire.VarintType {
				return errFallback
			}
			x, ok := s.varint()
			if !ok {
				return errFallback
			}
			if num == 1 {
				send.SequenceId = x
			} else {
				send.HighestSequenceId = x
			}
			continue
		}
		if typ != protowire.BytesType {
			return errFallback
		}
		l, ok := s.length()
		if !ok || l > s.left-end {
			return errFallback
		}
		if num == 4 {
			send.Payload = payload(s, l)
			continue
		}
		md := &parts.md
		if err := proto.Unmarshal(s.bytes(l), md); err != nil {
			return errFallback // protobuf reports it
		}
		send.Metadata = md
	}
	if s.left != end { // the last field ran past the send
		return errFallback
	}
	return nil
}

// sendParts are the messages a decoded send is made of, allocated at once
// (for Sends, all the sends' at once).
type sendParts struct {
	send brokerpb.Send
	md   pulsarpb.MessageMetadata
}

// oneSend is a request of one Send, allocated at once.
type oneSend struct {
	wrap  brokerpb.ProduceRequest_Send
	parts sendParts
}

// scanner reads a message from the buffers gRPC received it in (one per
// HTTP/2 frame of up to 16 KiB), without joining them first: small fields
// are read across the buffers' boundaries, payloads copied from them
// straight into their pooled buffers.
type scanner struct {
	cur  []byte   // what is left of the current buffer
	next [][]byte // the buffers after it
	left int      // bytes left in all
}

func newScanner(data mem.BufferSlice) scanner {
	s := scanner{left: data.Len()}
	if len(data) == 1 {
		s.cur = data[0].ReadOnlyData()
		return s
	}
	s.next = make([][]byte, len(data))
	for i, b := range data {
		s.next[i] = b.ReadOnlyData()
	}
	return s
}

// fill makes cur non-empty; false at the end.
func (s *scanner) fill() bool {
	for len(s.cur) == 0 {
		if len(s.next) == 0 {
			return false
		}
		s.cur, s.next = s.next[0], s.next[1:]
	}
	return true
}

func (s *scanner) advance(n int) {
	s.cur = s.cur[n:]
	s.left -= n
}

func (s *scanner) varint() (uint64, bool) {
	if !s.fill() {
		return 0, false
	}
	if v, n := protowire.ConsumeVarint(s.cur); n > 0 {
		s.advance(n)
		return v, true
	}
	// Across buffers (or malformed).
	var b [binary.MaxVarintLen64]byte
	k := 0
	for k < len(b) && s.fill() {
		b[k] = s.cur[0]
		s.advance(1)
		k++
		if b[k-1] < 0x80 {
			break
		}
	}
	v, n := protowire.ConsumeVarint(b[:k])
	return v, n == k
}

func (s *scanner) tag() (protowire.Number, protowire.Type, bool) {
	v, ok := s.varint()
	if !ok || v>>3 > math.MaxInt32 {
		return 0, 0, false
	}
	num, typ := protowire.DecodeTag(v)
	return num, typ, num >= protowire.MinValidNumber
}

// length reads a length prefix that the bytes left can hold.
func (s *scanner) length() (int, bool) {
	v, ok := s.varint()
	if !ok || v > uint64(s.left) {
		return 0, false
	}
	return int(v), true
}

func (s *scanner) fixed32() (uint32, bool) {
	var b [4]byte
	if !s.copyTo(b[:]) {
		return 0, false
	}
	return binary.LittleEndian.Uint32(b[:]), true
}

// copyTo fills p with the next bytes.
func (s *scanner) copyTo(p []byte) bool {
	if len(p) > s.left {
		return false
	}
	for len(p) > 0 && s.fill() {
		n := copy(p, s.cur)
		p = p[n:]
		s.advance(n)
	}
	return len(p) == 0
}

func (s *scanner) skip(n int) bool {
	if n > s.left {
		return false
	}
	for n > 0 && s.fill() {
		k := min(n, len(s.cur))
		s.advance(k)
		n -= k
	}
	return n == 0
}

// bytes returns the next n bytes, which the caller checked s has: in
// place when they are in one buffer (valid until Unmarshal returns), else
// copied.
func (s *scanner) bytes(n int) []byte {
	if s.fill() && len(s.cur) >= n {
		b := s.cur[:n]
		s.advance(n)
		return b
	}
	b := make([]byte, n)
	s.copyTo(b)
	return b
}
