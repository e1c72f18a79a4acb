package wirecodec

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"slices"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/proto/bookiepb"
	"github.com/magnetar-io/magnetar/proto/brokerpb"
	"github.com/magnetar-io/magnetar/proto/pulsarpb"
)

func fill(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// split cuts b into a BufferSlice of up to n pieces (1: one buffer, as
// gRPC hands over a message of up to 16 KiB; larger ones come in one
// buffer per HTTP/2 frame).
func split(b []byte, n int) mem.BufferSlice {
	var s mem.BufferSlice
	step := max(len(b)/n, 1)
	for len(b) > 0 {
		k := min(step, len(b))
		if len(s) == n-1 {
			k = len(b)
		}
		s = append(s, mem.SliceBuffer(bytes.Clone(b[:k])))
		b = b[k:]
	}
	return s
}

// fuzzSplit cuts b as the fuzzer's input says: into 1 to 8 buffers,
// with an empty one among them for odd lengths.
func fuzzSplit(b []byte) mem.BufferSlice {
	s := split(b, 1+len(b)%8)
	if len(b)%2 == 1 {
		s = slices.Insert(s, len(s)/2, mem.Buffer(mem.SliceBuffer(nil)))
	}
	return s
}

func isPooled(b []byte) bool {
	c := cap(b)
	return c >= 256 && bits.OnesCount(uint(c)) == 1
}

var key = []byte("master-key-0123456789")

func addEntries() map[string]*bookiepb.AddEntriesRequest {
	many := &bookiepb.AddEntriesRequest{}
	for i := range 16 {
		k := key
		if i >= 8 {
			k = []byte("another-key")
		}
		many.Entries = append(many.Entries, &bookiepb.AddEntryRequest{
			LedgerId: int64(7 + i/8), EntryId: int64(i), MasterKey: k, LastAddConfirmed: int64(i) - 1,
			Length: int64(1000 * (i + 1)), Crc32C: uint32(0xdeadbeef + i), Payload: fill(1000, byte(i)),
			RequestId: uint64(1000 + i),
		})
	}
	return map[string]*bookiepb.AddEntriesRequest{
		"empty": {},
		"one entry, every field": {Entries: []*bookiepb.AddEntryRequest{{
			LedgerId: 1 << 40, EntryId: 3, MasterKey: key, LastAddConfirmed: 2, Length: 9000,
			Crc32C: 0xffffffff, Payload: fill(300, 1), Recovery: true, RequestId: 1<<64 - 1,
		}}},
		"no payload, no key, first entry": {Entries: []*bookiepb.AddEntryRequest{{LedgerId: 5, LastAddConfirmed: -1}}},
		"a 1-byte and a 64 KiB payload": {Entries: []*bookiepb.AddEntryRequest{
			{LedgerId: 5, EntryId: 0, MasterKey: key, LastAddConfirmed: -1, Payload: []byte{9}},
			{LedgerId: 5, EntryId: 1, MasterKey: key, Payload: fill(64<<10-100, 3)},
		}},
		"16 entries of two ledgers": many,
	}
}

func decodeAdds(t *testing.T, data mem.BufferSlice) (*bookiepb.AddEntriesRequest, error) {
	t.Helper()
	m := &bookiepb.AddEntriesRequest{}
	return m, Codec().Unmarshal(data, m)
}

func TestAddEntriesDecodesAsProtobuf(t *testing.T) {
	for name, want := range addEntries() {
		for _, pieces := range []int{1, 3, 7, math.MaxInt} { // MaxInt: a buffer per byte
			t.Run(fmt.Sprintf("%s/%d buffers", name, pieces), func(t *testing.T) {
				wire, err := proto.Marshal(want)
				if err != nil {
					t.Fatal(err)
				}
				data := split(wire, pieces)
				got, err := decodeAdds(t, data)
				if err != nil {
					t.Fatal(err)
				}
				if !proto.Equal(got, want) {
					t.Fatalf("decoded %v, want %v", got, want)
				}
				for i, e := range got.Entries {
					if len(e.Payload) > 0 && !isPooled(e.Payload) {
						t.Fatalf("entry %d: payload of cap %d is not a pooled buffer", i, cap(e.Payload))
					}
					if i > 0 && bytes.Equal(e.MasterKey, got.Entries[i-1].MasterKey) && &e.MasterKey[0] != &got.Entries[i-1].MasterKey[0] {
						t.Fatalf("entry %d: the same master key is not shared", i)
					}
				}
				// The payloads are copies: the received buffers are
				// gRPC's, reused as soon as Unmarshal returns.
				for _, b := range data {
					clear(b.ReadOnlyData())
				}
				if !proto.Equal(got, want) {
					t.Fatal("the decoded message changed with the buffers it was decoded from")
				}
				for _, e := range got.Entries {
					Release(e.Payload)
				}
			})
		}
	}
}

// appendField appends a raw field to a message's wire bytes.
func appendField(b []byte, num protowire.Number, typ protowire.Type, v uint64) []byte {
	b = protowire.AppendTag(b, num, typ)
	switch typ {
	case protowire.VarintType:
		return protowire.AppendVarint(b, v)
	case protowire.Fixed32Type:
		return protowire.AppendFixed32(b, uint32(v))
	case protowire.Fixed64Type:
		return protowire.AppendFixed64(b, v)
	default:
		return protowire.AppendBytes(b, fill(int(v), 5))
	}
}

// wrapEntry makes an AddEntriesRequest of one entry's raw bytes.
func wrapEntry(entry []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), entry)
}

// TestAddEntriesLeftToProtobuf: whatever the hand decoder does not cover
// decodes exactly as protobuf decodes it, unknown fields kept.
func TestAddEntriesLeftToProtobuf(t *testing.T) {
	one, err := proto.Marshal(&bookiepb.AddEntryRequest{LedgerId: 4, EntryId: 1, MasterKey: key, Payload: fill(2000, 9), RequestId: 3})
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string][]byte{
		"an unknown field in an entry":         wrapEntry(appendField(bytes.Clone(one), 20, protowire.VarintType, 5)),
		"an unknown bytes field in an entry":   wrapEntry(appendField(bytes.Clone(one), 10, protowire.BytesType, 40)),
		"a payload twice":                      wrapEntry(appendField(bytes.Clone(one), 7, protowire.BytesType, 30)),
		"an entry id twice":                    wrapEntry(appendField(bytes.Clone(one), 2, protowire.VarintType, 99)),
		"a varint as fixed64":                  wrapEntry(appendField(bytes.Clone(one), 1, protowire.Fixed64Type, 99)),
		"the checksum as a varint":             wrapEntry(appendField(bytes.Clone(one), 6, protowire.VarintType, 99)),
		"the payload as a varint":              wrapEntry(appendField(bytes.Clone(one), 7, protowire.VarintType, 99)),
		"an unknown field in the batch":        appendField(wrapEntry(one), 2, protowire.VarintType, 1),
		"an entry then a field of the batch":   append(wrapEntry(one), appendField(nil, 3, protowire.BytesType, 10)...),
		"a second entry with an unknown field": append(wrapEntry(one), wrapEntry(appendField(bytes.Clone(one), 15, protowire.Fixed32Type, 1))...),
	}
	for name, wire := range cases {
		t.Run(name, func(t *testing.T) {
			want := &bookiepb.AddEntriesRequest{}
			if err := proto.Unmarshal(wire, want); err != nil {
				t.Fatalf("protobuf: %v", err)
			}
			for _, pieces := range []int{1, 7, math.MaxInt} {
				got, err := decodeAdds(t, split(wire, pieces))
				if err != nil {
					t.Fatal(err)
				}
				if !proto.Equal(got, want) {
					t.Fatalf("%d buffers: decoded %v, want %v", pieces, got, want)
				}
			}
		})
	}
}

// TestMalformedAddEntries: truncated or corrupt input fails as protobuf
// fails it, and never panics.
func TestMalformedAddEntries(t *testing.T) {
	wire, err := proto.Marshal(addEntries()["16 entries of two ledgers"])
	if err != nil {
		t.Fatal(err)
	}
	for cut := 1; cut < len(wire); cut += 97 {
		b := wire[:cut]
		perr := proto.Unmarshal(b, &bookiepb.AddEntriesRequest{})
		for _, pieces := range []int{1, 7, math.MaxInt} {
			got, err := decodeAdds(t, split(b, pieces))
			if (err == nil) != (perr == nil) {
				t.Fatalf("cut at %d, %d buffers: error %v, protobuf's %v", cut, pieces, err, perr)
			}
			if err == nil {
				want := &bookiepb.AddEntriesRequest{}
				_ = proto.Unmarshal(b, want)
				if !proto.Equal(got, want) {
					t.Fatalf("cut at %d, %d buffers: decoded differently", cut, pieces)
				}
			}
		}
	}
}

func sendRequest(payload []byte) *brokerpb.ProduceRequest {
	return &brokerpb.ProduceRequest{Request: &brokerpb.ProduceRequest_Send{Send: &brokerpb.Send{
		SequenceId: 41, HighestSequenceId: 50,
		Metadata: &pulsarpb.MessageMetadata{
			ProducerName: proto.String(""), SequenceId: proto.Uint64(0), PublishTime: proto.Uint64(0),
			NumMessagesInBatch: proto.Int32(10), PartitionKey: proto.String("k"),
			Properties: []*pulsarpb.KeyValue{{Key: proto.String("a"), Value: proto.String("b")}},
		},
		Payload: payload,
	}}}
}

// sendsRequest holds the sends of the requests, in one Sends.
func sendsRequest(reqs ...*brokerpb.ProduceRequest) *brokerpb.ProduceRequest {
	sends := &brokerpb.Sends{}
	for _, r := range reqs {
		sends.Sends = append(sends.Sends, r.GetSend())
	}
	return &brokerpb.ProduceRequest{Request: &brokerpb.ProduceRequest_Sends{Sends: sends}}
}

// payloadsOf returns the payloads of a request's sends.
func payloadsOf(m *brokerpb.ProduceRequest) [][]byte {
	out := [][]byte{m.GetSend().GetPayload()}
	for _, s := range m.GetSends().GetSends() {
		out = append(out, s.GetPayload())
	}
	return out
}

func TestProduceDecodesAsProtobuf(t *testing.T) {
	cases := map[string]*brokerpb.ProduceRequest{
		"sends": sendsRequest(sendRequest(fill(700, 3)), sendRequest(nil),
			&brokerpb.ProduceRequest{Request: &brokerpb.ProduceRequest_Send{Send: &brokerpb.Send{SequenceId: 9, Payload: fill(20000, 4)}}},
			&brokerpb.ProduceRequest{Request: &brokerpb.ProduceRequest_Send{Send: &brokerpb.Send{}}}),
		"no sends":               sendsRequest(),
		"a send":                 sendRequest(fill(5000, 2)),
		"a send without payload": sendRequest(nil),
		"a send without metadata": {Request: &brokerpb.ProduceRequest_Send{Send: &brokerpb.Send{
			SequenceId: 1, Payload: fill(10, 1)}}},
		"a producer open": {Request: &brokerpb.ProduceRequest_Open{Open: &brokerpb.ProducerOpen{
			Topic: "persistent://public/default/t", ProducerName: "p", Properties: map[string]string{"x": "y"}}}},
		"nothing": {},
	}
	for name, want := range cases {
		for _, pieces := range []int{1, 4, math.MaxInt} { // MaxInt: a buffer per byte
			t.Run(fmt.Sprintf("%s/%d buffers", name, pieces), func(t *testing.T) {
				wire, err := proto.Marshal(want)
				if err != nil {
					t.Fatal(err)
				}
				data := split(wire, pieces)
				got := &brokerpb.ProduceRequest{}
				if err := Codec().Unmarshal(data, got); err != nil {
					t.Fatal(err)
				}
				for _, b := range data {
					clear(b.ReadOnlyData())
				}
				if !proto.Equal(got, want) {
					t.Fatalf("decoded %v, want %v", got, want)
				}
				for _, p := range payloadsOf(got) {
					if len(p) > 0 && !isPooled(p) {
						t.Fatalf("payload of cap %d is not a pooled buffer", cap(p))
					}
					Release(p)
				}
			})
		}
	}
	// Metadata missing Pulsar's required fields decodes as protobuf
	// decodes it.
	bad, err := proto.MarshalOptions{AllowPartial: true}.Marshal(&brokerpb.ProduceRequest{Request: &brokerpb.ProduceRequest_Send{Send: &brokerpb.Send{
		Metadata: &pulsarpb.MessageMetadata{PartitionKey: proto.String("k")}, Payload: fill(100, 1)}}})
	if err != nil {
		t.Fatal(err)
	}
	want := &brokerpb.ProduceRequest{}
	perr := proto.Unmarshal(bad, want)
	got := &brokerpb.ProduceRequest{}
	err = Codec().Unmarshal(split(bad, 1), got)
	if (err == nil) != (perr == nil) || (err == nil && !proto.Equal(got, want)) {
		t.Fatalf("metadata without its required fields: error %v, protobuf's %v", err, perr)
	}
}

// TestSendsLeftToProtobuf: Sends the hand decoder does not cover, after
// it took the payloads of the sends before, decode as protobuf decodes
// them.
func TestSendsLeftToProtobuf(t *testing.T) {
	one, err := proto.Marshal(&brokerpb.Send{SequenceId: 3, Payload: fill(2000, 9)})
	if err != nil {
		t.Fatal(err)
	}
	wrap := func(sends []byte) []byte { // as field 3 of a ProduceRequest
		return protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), sends)
	}
	cases := map[string][]byte{
		"an unknown field in the second send": wrap(append(wrapEntry(one), wrapEntry(appendField(bytes.Clone(one), 9, protowire.VarintType, 5))...)),
		"a payload twice in the second send":  wrap(append(wrapEntry(one), wrapEntry(appendField(bytes.Clone(one), 4, protowire.BytesType, 30))...)),
		"an unknown field of Sends":           wrap(appendField(wrapEntry(one), 2, protowire.VarintType, 1)),
	}
	for name, wire := range cases {
		t.Run(name, func(t *testing.T) {
			want := &brokerpb.ProduceRequest{}
			if err := proto.Unmarshal(wire, want); err != nil {
				t.Fatalf("protobuf: %v", err)
			}
			for _, pieces := range []int{1, 7, math.MaxInt} {
				got := &brokerpb.ProduceRequest{}
				if err := Codec().Unmarshal(split(wire, pieces), got); err != nil {
					t.Fatal(err)
				}
				if !proto.Equal(got, want) {
					t.Fatalf("%d buffers: decoded %v, want %v", pieces, got, want)
				}
			}
		})
	}
}

func TestReleasePoisons(t *testing.T) {
	saved := poison
	t.Cleanup(func() { poison = saved })
	poison = func() bool { return true }
	wire, err := proto.Marshal(sendRequest(fill(3000, 7)))
	if err != nil {
		t.Fatal(err)
	}
	m := &brokerpb.ProduceRequest{}
	if err := Codec().Unmarshal(split(wire, 1), m); err != nil {
		t.Fatal(err)
	}
	p := m.GetSend().GetPayload()
	Release(p)
	if !bytes.Equal(p[:cap(p)], bytes.Repeat([]byte{0xdb}, cap(p))) {
		t.Fatal("a released payload was not overwritten")
	}
	Release(nil) // no payload: nothing to do
}

// TestAddEntriesAllocatesNoPayloads: decoding a batch of 16 entries of
// 1 KiB, released after each round, allocates at least half the payload
// bytes less than protobuf's decode of the same batch (the entries and
// their pointers, not the bytes). The margin holds under the race
// detector, whose sync.Pool drops a quarter of what it is given.
func TestAddEntriesAllocatesNoPayloads(t *testing.T) {
	want := addEntries()["16 entries of two ledgers"]
	wire, err := proto.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	payloads := 0
	for _, e := range want.Entries {
		payloads += len(e.Payload)
	}
	data := split(wire, 1)
	perRound := func(round func()) int {
		for range 10 {
			round() // fill the pool
		}
		const rounds = 200
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range rounds {
			round()
		}
		runtime.ReadMemStats(&after)
		return int(after.TotalAlloc-before.TotalAlloc) / rounds
	}
	pooled := perRound(func() {
		m := &bookiepb.AddEntriesRequest{}
		if err := Codec().Unmarshal(data, m); err != nil {
			t.Fatal(err)
		}
		for _, e := range m.Entries {
			Release(e.Payload)
		}
	})
	protobuf := perRound(func() {
		if err := proto.Unmarshal(wire, &bookiepb.AddEntriesRequest{}); err != nil {
			t.Fatal(err)
		}
	})
	if pooled > protobuf-payloads/2 {
		t.Fatalf("%d bytes allocated per batch of %d payload bytes, protobuf %d: payloads are not pooled", pooled, payloads, protobuf)
	}
	t.Logf("%d bytes allocated per batch of %d payload bytes, protobuf %d", pooled, payloads, protobuf)
}

// FuzzAddEntries: on any input, the codec agrees with protobuf.
func FuzzAddEntries(f *testing.F) {
	for _, m := range addEntries() {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want := &bookiepb.AddEntriesRequest{}
		perr := proto.Unmarshal(b, want)
		got := &bookiepb.AddEntriesRequest{}
		err := Codec().Unmarshal(fuzzSplit(b), got)
		if (err == nil) != (perr == nil) {
			t.Fatalf("error %v, protobuf's %v", err, perr)
		}
		if err == nil && !proto.Equal(got, want) {
			t.Fatalf("decoded %v, protobuf %v", got, want)
		}
		for i, e := range got.Entries {
			if (e.Payload == nil) != (want.Entries[i].Payload == nil) || (e.MasterKey == nil) != (want.Entries[i].MasterKey == nil) {
				t.Fatalf("entry %d: nil and empty bytes differ from protobuf's", i)
			}
			Release(e.Payload)
		}
	})
}

// FuzzProduce: on any input, the codec agrees with protobuf.
func FuzzProduce(f *testing.F) {
	for _, m := range []*brokerpb.ProduceRequest{sendRequest(fill(100, 1)), sendRequest(nil), sendsRequest(sendRequest(fill(30, 2)), sendRequest(nil))} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want := &brokerpb.ProduceRequest{}
		perr := proto.Unmarshal(b, want)
		got := &brokerpb.ProduceRequest{}
		err := Codec().Unmarshal(fuzzSplit(b), got)
		if (err == nil) != (perr == nil) {
			t.Fatalf("error %v, protobuf's %v", err, perr)
		}
		if err == nil && !proto.Equal(got, want) {
			t.Fatalf("decoded %v, protobuf %v", got, want)
		}
		gotp, wantp := payloadsOf(got), payloadsOf(want)
		if len(gotp) != len(wantp) {
			t.Fatalf("%d payloads, protobuf %d", len(gotp), len(wantp))
		}
		for i, p := range gotp {
			if (p == nil) != (wantp[i] == nil) {
				t.Fatal("a nil and an empty payload differ from protobuf's")
			}
			Release(p)
		}
	})
}

// A Sends of more than MaxSends sends is refused before anything is
// allocated for it, protobuf included: empty sends are 2 bytes each, and
// millions fit in a request the transport takes.
func TestTooManySendsRefused(t *testing.T) {
	var sends []byte
	for range MaxSends + 1 {
		sends = protowire.AppendBytes(protowire.AppendTag(sends, 1, protowire.BytesType), nil)
	}
	wire := protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), sends)
	got := &brokerpb.ProduceRequest{}
	err := Codec().Unmarshal(split(wire, 1), got)
	if !errors.Is(err, ErrTooManySends) || got.Request != nil {
		t.Fatalf("%d sends: %v, %v; want ErrTooManySends and nothing decoded", MaxSends+1, err, got.Request)
	}
	// At the cap, decoded as protobuf decodes it.
	atCap := protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), sends[2:])
	want := &brokerpb.ProduceRequest{}
	if err := proto.Unmarshal(atCap, want); err != nil {
		t.Fatal(err)
	}
	got = &brokerpb.ProduceRequest{}
	if err := Codec().Unmarshal(split(atCap, 1), got); err != nil || !proto.Equal(got, want) || len(got.GetSends().GetSends()) != MaxSends {
		t.Fatalf("%d sends: %v, %d decoded", MaxSends, err, len(got.GetSends().GetSends()))
	}
}
