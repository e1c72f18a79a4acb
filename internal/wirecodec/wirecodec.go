// Package wirecodec is the gRPC codec of the brokers' and the bookies'
// servers. It is gRPC's protobuf codec for every message but the two that
// carry payloads in bulk: a bookie's AddEntriesRequest (the broker's adds)
// and a broker's ProduceRequest with a Send (a client's message or
// batch). Those it decodes itself, and copies each payload into a buffer
// of the process's pool (internal/bufpool) instead of a fresh allocation.
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
// broker at the end of the receive loop's iteration, on each way out of
// it (publish has encoded the entry, a copy, or the send was refused). A
// payload not released (a stream ending early) is only garbage, as
// before; one released too early is another message's bytes. With
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
	"errors"
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

// errFallback makes a decoder give the message to protobuf.
var errFallback = errors.New("wirecodec: left to protobuf")

// pooled runs decode over data's bytes; when it declines, it releases
// what it took from the pool and lets protobuf decode the message.
func pooled[M proto.Message](c codec, data mem.BufferSlice, m M, decode func([]byte, M) error) error {
	var b []byte
	if len(data) == 1 {
		b = data[0].ReadOnlyData() // valid until Unmarshal returns; payloads are copied out
	} else {
		tmp := bufpool.Shared().Get(data.Len())
		defer bufpool.Shared().Put(tmp)
		data.CopyTo(*tmp)
		b = *tmp
	}
	if err := decode(b, m); err != nil {
		releaseAll(m)
		proto.Reset(m)
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
	}
}

// payload copies v into a pooled buffer (nil for none, as protobuf).
func payload(v []byte) []byte {
	if len(v) == 0 {
		return nil
	}
	b := *bufpool.Shared().Get(len(v))
	copy(b, v)
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
	bufpool.Shared().Put(&b)
}

// PoisonEnv is the environment variable that, set to 1, makes Release
// overwrite the buffers it hands back (read once, at the first Release).
const PoisonEnv = "MAGNETAR_POISON_RELEASED"

var poison = sync.OnceValue(func() bool { return os.Getenv(PoisonEnv) == "1" })

// field reads one field's tag; n < 0 on malformed input.
func field(b []byte) (protowire.Number, protowire.Type, int) { return protowire.ConsumeTag(b) }

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

// decodeAddEntries decodes an AddEntriesRequest (repeated AddEntryRequest
// entries = 1). The entries are allocated together; entries of one ledger
// share one master key.
func decodeAddEntries(b []byte, m *bookiepb.AddEntriesRequest) error {
	n := 0
	for rest := b; len(rest) > 0; {
		num, typ, k := field(rest)
		if k < 0 || num != 1 || typ != protowire.BytesType {
			return errFallback
		}
		_, l := protowire.ConsumeBytes(rest[k:])
		if l < 0 {
			return errFallback
		}
		rest = rest[k+l:]
		n++
	}
	if n == 0 {
		return nil
	}
	reqs := make([]bookiepb.AddEntryRequest, n)
	m.Entries = make([]*bookiepb.AddEntryRequest, 0, n)
	var key []byte
	for i := range reqs {
		_, _, k := field(b)
		v, l := protowire.ConsumeBytes(b[k:])
		b = b[k+l:]
		r := &reqs[i]
		m.Entries = append(m.Entries, r) // before decoding: a decline releases its payload
		if err := decodeAddEntry(v, r, &key); err != nil {
			return err
		}
	}
	return nil
}

func decodeAddEntry(b []byte, r *bookiepb.AddEntryRequest, key *[]byte) error {
	var s seen
	for len(b) > 0 {
		num, typ, k := field(b)
		if k < 0 || num < 1 || num > 9 || !s.first(num) {
			return errFallback
		}
		b = b[k:]
		switch num {
		case 3, 7: // master_key, payload
			if typ != protowire.BytesType {
				return errFallback
			}
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return errFallback
			}
			b = b[l:]
			if num == 7 {
				r.Payload = payload(v)
			} else if len(v) > 0 {
				if !bytes.Equal(*key, v) {
					*key = bytes.Clone(v)
				}
				r.MasterKey = *key
			}
		case 6: // crc32c
			if typ != protowire.Fixed32Type {
				return errFallback
			}
			v, l := protowire.ConsumeFixed32(b)
			if l < 0 {
				return errFallback
			}
			b = b[l:]
			r.Crc32C = v
		default:
			if typ != protowire.VarintType {
				return errFallback
			}
			v, l := protowire.ConsumeVarint(b)
			if l < 0 {
				return errFallback
			}
			b = b[l:]
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
	return nil
}

// decodeProduce decodes a ProduceRequest holding a Send (oneof request:
// send = 2); a ProducerOpen (once per stream) is left to protobuf.
func decodeProduce(b []byte, m *brokerpb.ProduceRequest) error {
	num, typ, k := field(b)
	if k < 0 || num != 2 || typ != protowire.BytesType {
		return errFallback
	}
	v, l := protowire.ConsumeBytes(b[k:])
	if l < 0 || k+l != len(b) {
		return errFallback
	}
	send := &brokerpb.Send{}
	m.Request = &brokerpb.ProduceRequest_Send{Send: send} // before decoding: a decline releases its payload
	var s seen
	for b := v; len(b) > 0; {
		num, typ, k := field(b)
		if k < 0 || num < 1 || num > 4 || !s.first(num) {
			return errFallback
		}
		b = b[k:]
		if num <= 2 {
			if typ != protowire.VarintType {
				return errFallback
			}
			x, l := protowire.ConsumeVarint(b)
			if l < 0 {
				return errFallback
			}
			b = b[l:]
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
		x, l := protowire.ConsumeBytes(b)
		if l < 0 {
			return errFallback
		}
		b = b[l:]
		if num == 4 {
			send.Payload = payload(x)
			continue
		}
		md := &pulsarpb.MessageMetadata{}
		if err := proto.Unmarshal(x, md); err != nil {
			return errFallback // protobuf reports it
		}
		send.Metadata = md
	}
	return nil
}
