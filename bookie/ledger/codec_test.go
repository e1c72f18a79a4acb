package ledger

import (
	"bytes"
	"testing"
	"unsafe"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/proto/bookiepb"
)

func payloadOf(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// codecCases are AddEntriesRequests of every shape the writers send.
func codecCases() map[string]*bookiepb.AddEntriesRequest {
	key := []byte("master-key-0123456789")
	many := &bookiepb.AddEntriesRequest{}
	for i := range 16 {
		many.Entries = append(many.Entries, &bookiepb.AddEntryRequest{
			LedgerId: int64(7 + i/8), EntryId: int64(i), MasterKey: key, LastAddConfirmed: int64(i) - 1,
			Length: int64(1024 * (i + 1)), Crc32C: uint32(0xdeadbeef + i), Payload: payloadOf(1024, byte(i)),
			RequestId: uint64(1000 + i),
		})
	}
	return map[string]*bookiepb.AddEntriesRequest{
		"empty": {},
		"one entry, every field": {Entries: []*bookiepb.AddEntryRequest{{
			LedgerId: 1 << 40, EntryId: 3, MasterKey: key, LastAddConfirmed: 2, Length: 9000,
			Crc32C: 0xffffffff, Payload: payloadOf(300, 1), Recovery: true, RequestId: 1<<64 - 1,
		}}},
		"no payload, no key, first entry": {Entries: []*bookiepb.AddEntryRequest{{LedgerId: 5, LastAddConfirmed: -1}}},
		"a 1-byte and a 64 KiB payload": {Entries: []*bookiepb.AddEntryRequest{
			{LedgerId: 5, EntryId: 0, MasterKey: key, LastAddConfirmed: -1, Payload: []byte{9}},
			{LedgerId: 5, EntryId: 1, MasterKey: key, Payload: payloadOf(64<<10, 3)},
		}},
		"16 entries of two ledgers": many,
	}
}

// The add codec encodes adds as protobuf does, byte for byte, and
// references payloads over inlinePayload bytes instead of copying them.
func TestAddCodecEncodesAsProtobuf(t *testing.T) {
	cases := codecCases()
	cases["payloads at the inline limit and just over"] = &bookiepb.AddEntriesRequest{Entries: []*bookiepb.AddEntryRequest{
		{LedgerId: 2, EntryId: 0, Payload: payloadOf(inlinePayload, 1), RequestId: 1},
		{LedgerId: 2, EntryId: 1, Payload: payloadOf(inlinePayload+1, 2), RequestId: 2},
		{LedgerId: 2, EntryId: 2, Payload: payloadOf(inlinePayload+1, 3)}, // the last field a payload
		{LedgerId: 2, EntryId: 3, LastAddConfirmed: -1 << 63, Length: -5, Payload: []byte{}, Recovery: true},
	}}
	for name, m := range cases {
		t.Run(name, func(t *testing.T) {
			data := encodesAsProtobuf(t, m)
			// Each payload over the limit is one of the message's buffers.
			bufs := map[*byte]int{}
			for _, b := range data {
				if d := b.ReadOnlyData(); len(d) > 0 {
					bufs[unsafe.SliceData(d)] = len(d)
				}
			}
			for i, e := range m.Entries {
				_, referenced := bufs[unsafe.SliceData(e.Payload)]
				if want := len(e.Payload) > inlinePayload; referenced != want || (len(e.Payload) >= 4096 && !referenced) {
					t.Errorf("entry %d, payload of %d bytes: referenced %v, want %v (and always from 4 KiB)", i, len(e.Payload), referenced, want)
				}
			}
		})
	}
}

// A stream's batch (addBatch) is encoded as the AddEntriesRequest whose
// entries are its requests with its ids as RequestId, byte for byte, and
// the requests, shared among an entry's bookies, are left as they were.
func TestAddBatchEncodesTheStreamsIDs(t *testing.T) {
	for name, m := range codecCases() {
		t.Run(name, func(t *testing.T) {
			want := &bookiepb.AddEntriesRequest{}
			b := &addBatch{}
			for i, e := range m.Entries {
				shared := proto.Clone(e).(*bookiepb.AddEntryRequest)
				shared.RequestId = 0
				id := uint64(5000 + 3*i)
				b.adds = append(b.adds, QueuedAdd{Req: shared, ID: id})
				withID := proto.Clone(shared).(*bookiepb.AddEntryRequest)
				withID.RequestId = id
				want.Entries = append(want.Entries, withID)
			}
			wantBytes, err := proto.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			data, err := addCodec().Marshal(b)
			if err != nil {
				t.Fatal(err)
			}
			if got := data.Materialize(); !bytes.Equal(got, wantBytes) {
				t.Fatalf("encoded %d bytes %x\nprotobuf %d bytes %x", len(got), got, len(wantBytes), wantBytes)
			}
			for i, a := range b.adds {
				if a.Req.RequestId != 0 {
					t.Fatalf("entry %d: the shared request's RequestId became %d", i, a.Req.RequestId)
				}
			}
		})
	}
}

// A message with fields the codec does not know is left to protobuf,
// which keeps them.
func TestAddCodecLeavesUnknownFieldsToProtobuf(t *testing.T) {
	e := &bookiepb.AddEntryRequest{LedgerId: 1, Payload: payloadOf(4096, 1)}
	e.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 7))
	m := &bookiepb.AddEntriesRequest{Entries: []*bookiepb.AddEntryRequest{e}}
	encodesAsProtobuf(t, m)
}

// FuzzAddCodec: whatever protobuf decodes as an AddEntriesRequest, the
// add codec encodes as protobuf does.
func FuzzAddCodec(f *testing.F) {
	for _, m := range codecCases() {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m := &bookiepb.AddEntriesRequest{}
		if proto.Unmarshal(b, m) != nil {
			return
		}
		encodesAsProtobuf(t, m)
	})
}

// encodesAsProtobuf checks that the add codec encodes m as protobuf does,
// and returns its encoding.
func encodesAsProtobuf(t *testing.T, m *bookiepb.AddEntriesRequest) mem.BufferSlice {
	t.Helper()
	want, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	data, err := addCodec().Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if got := data.Materialize(); !bytes.Equal(got, want) {
		t.Fatalf("encoded %d bytes %x\nprotobuf %d bytes %x", len(got), got, len(want), want)
	}
	return data
}
