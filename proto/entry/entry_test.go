package entry

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/proto/pulsarpb"
)

func meta() *pulsarpb.MessageMetadata {
	return &pulsarpb.MessageMetadata{
		ProducerName: proto.String("p-1"),
		SequenceId:   proto.Uint64(0), // zero still travels: proto2 presence
		PublishTime:  proto.Uint64(1_700_000_000_000),
		PartitionKey: proto.String("key"),
		Properties:   []*pulsarpb.KeyValue{{Key: proto.String("a"), Value: proto.String("b")}},
	}
}

func TestEncodeDecode(t *testing.T) {
	b, err := Encode(meta(), []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	if b[0] != 0x0e || b[1] != 0x01 {
		t.Fatalf("magic %x", b[:2])
	}
	md, payload, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if string(payload) != "hello" || !proto.Equal(md, meta()) || md.SequenceId == nil {
		t.Fatalf("decoded %v %q", md, payload)
	}
	// Every single-byte corruption is caught.
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 0x40
		if _, _, err := Decode(c); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flipping byte %d went unnoticed: %v", i, err)
		}
	}
	for _, n := range []int{0, 5, 9} {
		if _, _, err := Decode(b[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%d bytes accepted", n)
		}
	}
	// Pulsar's required fields are required here too.
	if _, err := Encode(&pulsarpb.MessageMetadata{ProducerName: proto.String("x")}, nil); err == nil {
		t.Fatal("metadata without sequence id and publish time encoded")
	}
}

func TestBatchRoundTrip(t *testing.T) {
	var buf []byte
	var want []Single
	for i := 0; i < 10; i++ {
		smm := &pulsarpb.SingleMessageMetadata{PartitionKey: proto.String(fmt.Sprint("k", i)), SequenceId: proto.Uint64(uint64(i))}
		p := bytes.Repeat([]byte{byte(i)}, i*7)
		var err error
		if buf, err = AppendSingle(buf, smm, p); err != nil {
			t.Fatal(err)
		}
		want = append(want, Single{Meta: smm, Payload: p})
	}
	got, err := SplitBatch(buf, 10)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if !proto.Equal(got[i].Meta, want[i].Meta) || !bytes.Equal(got[i].Payload, want[i].Payload) {
			t.Fatalf("message %d: %v %x", i, got[i].Meta, got[i].Payload)
		}
	}
	for _, n := range []int{0, 9, 11, 1 << 30} {
		if _, err := SplitBatch(buf, n); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("batch split into %d: %v", n, err)
		}
	}
	// A message whose metadata is over MaxMetadataSize but within the
	// batch may be well formed: too large for this reader, not corrupt.
	big := binary.BigEndian.AppendUint32(nil, MaxMetadataSize+1)
	big = append(big, make([]byte, MaxMetadataSize+1)...)
	if _, err := SplitBatch(big, 1); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("batch message with %d bytes of metadata: %v, want ErrUnsupported", MaxMetadataSize+1, err)
	}
}

func TestCompressionRoundTrip(t *testing.T) {
	inputs := [][]byte{
		nil,
		[]byte("x"),
		bytes.Repeat([]byte("magnetar "), 10000),
		func() []byte { // incompressible
			b := make([]byte, 5000)
			for i := range b {
				b[i] = byte(i*7919 + i*i)
			}
			return b
		}(),
	}
	for _, ct := range []pulsarpb.CompressionType{pulsarpb.CompressionType_NONE, pulsarpb.CompressionType_LZ4, pulsarpb.CompressionType_ZLIB, pulsarpb.CompressionType_ZSTD, pulsarpb.CompressionType_SNAPPY} {
		for i, in := range inputs {
			c, err := Compress(ct, in)
			if err != nil {
				t.Fatalf("%s input %d: %v", ct, i, err)
			}
			out, err := Decompress(ct, c, len(in))
			if err != nil {
				t.Fatalf("%s input %d: %v", ct, i, err)
			}
			if !bytes.Equal(out, in) {
				t.Fatalf("%s input %d: round trip changed the bytes", ct, i)
			}
			if len(in) > 0 {
				if _, err := Decompress(ct, c, len(in)+1); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("%s input %d: wrong size accepted: %v", ct, i, err)
				}
			}
		}
		// Three bytes cannot make 64 MiB, but for ZSTD: only a frame says
		// (see the table below for claims a payload could make).
		want := ErrCorrupt
		if ct == pulsarpb.CompressionType_ZSTD {
			want = ErrUnsupported
		}
		if _, err := Decompress(ct, []byte{1, 2, 3}, MaxUncompressedSize+1); !errors.Is(err, want) {
			t.Fatalf("%s: oversized claim: %v, want %v", ct, err, want)
		}
	}
	if _, err := Decompress(pulsarpb.CompressionType(9), []byte{1, 2, 3}, 3); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("unknown compression: %v, want ErrUnsupported", err)
	}
	// A claim no payload of that size can make is corrupt, over the cap
	// or not: LZ4 expands 255 times at most, deflate 1032 times, and a
	// Snappy block says its own length.
	for _, tc := range []struct {
		ct   pulsarpb.CompressionType
		n    int
		size int
		want error
	}{
		{pulsarpb.CompressionType_LZ4, 19, 100 << 20, ErrCorrupt},
		{pulsarpb.CompressionType_LZ4, 512 << 10, 100 << 20, ErrUnsupported},
		{pulsarpb.CompressionType_ZLIB, 19, 100 << 20, ErrCorrupt},
		{pulsarpb.CompressionType_ZLIB, 128 << 10, 100 << 20, ErrUnsupported},
		{pulsarpb.CompressionType_ZSTD, 19, 100 << 20, ErrUnsupported},
	} {
		if _, err := Decompress(tc.ct, make([]byte, tc.n), tc.size); !errors.Is(err, tc.want) {
			t.Errorf("%s: %d bytes claiming %d: %v, want %v", tc.ct, tc.n, tc.size, err, tc.want)
		}
	}
	big, _ := Compress(pulsarpb.CompressionType_SNAPPY, make([]byte, 3<<10))
	if _, err := Decompress(pulsarpb.CompressionType_SNAPPY, big, 100<<20); !errors.Is(err, ErrCorrupt) {
		t.Errorf("snappy block of 3 KiB claiming 100 MiB: %v, want ErrCorrupt", err)
	}
	if _, err := Compress(pulsarpb.CompressionType(9), nil); err == nil {
		t.Fatal("unknown compression accepted")
	}
}

func FuzzDecode(f *testing.F) {
	b, _ := Encode(meta(), []byte("payload"))
	f.Add(b)
	f.Add([]byte{0x0e, 0x01, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		md, payload, err := Decode(b)
		if err != nil {
			return
		}
		again, err := Encode(md, payload)
		if err != nil {
			t.Fatalf("decoded entry does not encode: %v", err)
		}
		md2, p2, err := Decode(again)
		if err != nil || !proto.Equal(md, md2) || !bytes.Equal(payload, p2) {
			t.Fatalf("re-encoded entry differs: %v", err)
		}
	})
}

func FuzzSplitBatch(f *testing.F) {
	buf, _ := AppendSingle(nil, &pulsarpb.SingleMessageMetadata{}, []byte("a"))
	buf, _ = AppendSingle(buf, &pulsarpb.SingleMessageMetadata{PartitionKey: proto.String("k")}, []byte("bc"))
	f.Add(buf, 2)
	f.Add([]byte{0, 0, 0, 0}, 1)
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		msgs, err := SplitBatch(b, n)
		if err != nil {
			return
		}
		if len(msgs) != n {
			t.Fatalf("%d messages for n=%d", len(msgs), n)
		}
	})
}

func FuzzDecompress(f *testing.F) {
	for _, ct := range []pulsarpb.CompressionType{pulsarpb.CompressionType_LZ4, pulsarpb.CompressionType_ZLIB, pulsarpb.CompressionType_ZSTD, pulsarpb.CompressionType_SNAPPY} {
		c, _ := Compress(ct, []byte("some payload some payload"))
		f.Add(int32(ct), c, 26)
	}
	f.Fuzz(func(t *testing.T, ct int32, b []byte, size int) {
		out, err := Decompress(pulsarpb.CompressionType(ct), b, size)
		if err == nil && len(out) != size {
			t.Fatalf("decompressed to %d bytes, asked %d", len(out), size)
		}
	})
}

// Metadata over MaxMetadataSize is refused, for a batch's message as for
// an entry, and a batch's messages keep what came before them.
func TestMetadataTooLarge(t *testing.T) {
	big := &pulsarpb.SingleMessageMetadata{PartitionKey: proto.String(strings.Repeat("k", MaxMetadataSize))}
	if _, err := AppendSingle([]byte("prefix"), big, []byte("p")); err == nil || !strings.Contains(err.Error(), "exceeds") {
		t.Fatalf("AppendSingle with %d-byte metadata: %v", MaxMetadataSize, err)
	}
	md := &pulsarpb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(0), PublishTime: proto.Uint64(0),
		PartitionKey: proto.String(strings.Repeat("k", MaxMetadataSize))}
	if _, err := Encode(md, nil); err == nil || !strings.Contains(err.Error(), "exceeds") {
		t.Fatalf("Encode with %d-byte metadata: %v", MaxMetadataSize, err)
	}
	buf, err := AppendSingle([]byte("prefix"), &pulsarpb.SingleMessageMetadata{}, []byte("payload"))
	if err != nil || string(buf[:6]) != "prefix" {
		t.Fatalf("AppendSingle after a prefix: %q %v", buf, err)
	}
	msgs, err := SplitBatch(buf[6:], 1)
	if err != nil || len(msgs) != 1 || string(msgs[0].Payload) != "payload" || msgs[0].Meta.GetPayloadSize() != 7 {
		t.Fatalf("split: %+v %v", msgs, err)
	}
}

// AppendSingleSeq makes the bytes AppendSingle makes of a metadata with
// only a sequence id, and SplitBatch reads them back.
func TestAppendSingleSeqAsAppendSingle(t *testing.T) {
	for _, seq := range []uint64{0, 1, 127, 128, 1 << 35, math.MaxUint64} {
		for _, size := range []int{0, 1, 127, 128, 70000} {
			payload := bytes.Repeat([]byte{byte(size)}, size)
			prefix := []byte("earlier messages")
			want, err := AppendSingle(slices.Clone(prefix), &pulsarpb.SingleMessageMetadata{SequenceId: proto.Uint64(seq)}, payload)
			if err != nil {
				t.Fatal(err)
			}
			got := AppendSingleSeq(slices.Clone(prefix), seq, payload)
			if !bytes.Equal(got, want) {
				t.Fatalf("seq %d, %d bytes: AppendSingleSeq differs from AppendSingle", seq, size)
			}
			msgs, err := SplitBatch(got[len(prefix):], 1)
			if err != nil || msgs[0].Meta.GetSequenceId() != seq || !bytes.Equal(msgs[0].Payload, payload) {
				t.Fatalf("seq %d, %d bytes: read back %v, %v", seq, size, msgs, err)
			}
		}
	}
}
