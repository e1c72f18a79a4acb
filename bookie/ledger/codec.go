package ledger

import (
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/magnetar-io/magnetar/proto/bookiepb"
)

// addCodec is the codec of the ledger client's connections to the
// bookies (grpc.ForceCodecV2). It is gRPC's protobuf codec, except that
// an AddEntriesRequest is encoded around its payloads instead of copying
// them: the message gRPC sends is the fields' bytes and, between them,
// the payloads themselves, which gRPC copies once, into its write buffer.
// A batch of 64 KiB entries to three bookies was otherwise copied three
// times more (docs/benchmarks.md).
//
// The contract: a payload given to Send is not modified until gRPC has
// written it, which may be after Send returns: an appended entry's bytes
// are never modified (Writer.AppendAsync).
func addCodec() encoding.CodecV2 {
	return clientCodec{base: encoding.GetCodecV2(grpcproto.Name)}
}

type clientCodec struct{ base encoding.CodecV2 }

func (c clientCodec) Name() string { return grpcproto.Name }

func (c clientCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.base.Unmarshal(data, v) }

func (c clientCodec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case *addBatch:
		return marshalAdds(m.adds), nil
	case *bookiepb.AddEntriesRequest:
		if out, ok := marshalAddEntries(m); ok {
			return out, nil
		}
	}
	return c.base.Marshal(v)
}

// addBatch is what a stream sends (streamConn.sendLoop): an
// AddEntriesRequest of the adds, each request with its id for this stream
// as its RequestId. Only the add codec encodes it; the client forces that
// codec on every connection to a bookie (Config.DialOptions must not
// force another).
type addBatch struct{ adds []QueuedAdd }

// inlinePayload is the largest payload copied among the fields' bytes: a
// separate buffer costs more than copying a small one.
const inlinePayload = 512

// marshalAddEntries encodes m as marshalAdds does. It declines (false) a
// message with unknown fields, which protobuf would keep.
func marshalAddEntries(m *bookiepb.AddEntriesRequest) (mem.BufferSlice, bool) {
	if len(m.ProtoReflect().GetUnknown()) > 0 {
		return nil, false
	}
	adds := make([]QueuedAdd, len(m.Entries))
	for i, e := range m.Entries {
		if e == nil || len(e.ProtoReflect().GetUnknown()) > 0 {
			return nil, false
		}
		adds[i] = QueuedAdd{Req: e, ID: e.RequestId}
	}
	return marshalAdds(adds), true
}

// marshalAdds encodes an AddEntriesRequest of adds, each request with its
// id as RequestId, as proto.Marshal does (fields in number order, zero
// values left out), with payloads over inlinePayload bytes referenced, not
// copied. A request's unknown fields are left out (the writer's have none).
func marshalAdds(adds []QueuedAdd) mem.BufferSlice {
	size, refs := 0, 0
	for _, a := range adds {
		e := a.Req
		size += protowire.SizeTag(1) + protowire.SizeBytes(addEntrySize(e, a.ID))
		if len(e.Payload) > inlinePayload {
			size -= len(e.Payload)
			refs++
		}
	}
	// fields holds every byte but the referenced payloads, which go into
	// out between its pieces as they come. Its capacity is exact, so the
	// pieces already in out stay in its array (and would stay valid, as
	// bytes already written, if it grew).
	fields := make([]byte, 0, size)
	out := make(mem.BufferSlice, 0, 2*refs+1)
	from := 0
	for _, a := range adds {
		e := a.Req
		fields = protowire.AppendTag(fields, 1, protowire.BytesType)
		fields = protowire.AppendVarint(fields, uint64(addEntrySize(e, a.ID)))
		fields = appendVarintField(fields, 1, uint64(e.LedgerId))
		fields = appendVarintField(fields, 2, uint64(e.EntryId))
		if len(e.MasterKey) > 0 {
			fields = protowire.AppendTag(fields, 3, protowire.BytesType)
			fields = protowire.AppendBytes(fields, e.MasterKey)
		}
		fields = appendVarintField(fields, 4, uint64(e.LastAddConfirmed))
		fields = appendVarintField(fields, 5, uint64(e.Length))
		if e.Crc32C != 0 {
			fields = protowire.AppendTag(fields, 6, protowire.Fixed32Type)
			fields = protowire.AppendFixed32(fields, e.Crc32C)
		}
		if p := e.Payload; len(p) > 0 {
			fields = protowire.AppendTag(fields, 7, protowire.BytesType)
			if len(p) <= inlinePayload {
				fields = protowire.AppendBytes(fields, p)
			} else {
				fields = protowire.AppendVarint(fields, uint64(len(p)))
				out = append(out, mem.SliceBuffer(fields[from:]), mem.SliceBuffer(p))
				from = len(fields)
			}
		}
		if e.Recovery {
			fields = appendVarintField(fields, 8, 1)
		}
		fields = appendVarintField(fields, 9, a.ID)
	}
	if from < len(fields) || len(out) == 0 {
		out = append(out, mem.SliceBuffer(fields[from:]))
	}
	return out
}

// addEntrySize is the encoded size of e's fields, with id as RequestId.
func addEntrySize(e *bookiepb.AddEntryRequest, id uint64) int {
	n := varintFieldSize(1, uint64(e.LedgerId)) + varintFieldSize(2, uint64(e.EntryId)) +
		varintFieldSize(4, uint64(e.LastAddConfirmed)) + varintFieldSize(5, uint64(e.Length)) +
		varintFieldSize(9, id)
	if len(e.MasterKey) > 0 {
		n += protowire.SizeTag(3) + protowire.SizeBytes(len(e.MasterKey))
	}
	if e.Crc32C != 0 {
		n += protowire.SizeTag(6) + protowire.SizeFixed32()
	}
	if len(e.Payload) > 0 {
		n += protowire.SizeTag(7) + protowire.SizeBytes(len(e.Payload))
	}
	if e.Recovery {
		n += varintFieldSize(8, 1)
	}
	return n
}

func varintFieldSize(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}
