// Package entry is the byte layout of a stored entry, shared by the broker
// (which stores and reads entries) and the Go SDK (which builds them):
//
//	0x0e01 (2 bytes) | CRC-32C of the rest (4) | metadata size (4) | MessageMetadata | payload
//
// This is Pulsar's "headers and payload" with checksum, as its clients send
// it and as it sits in BookKeeper, so that an entry can later be served over
// Pulsar's binary protocol as it is. Integers are big-endian. The payload is
// one message, or a batch (MessageMetadata.num_messages_in_batch set): after
// decompression, a sequence of
//
//	size of SingleMessageMetadata (4) | SingleMessageMetadata | payload
//
// Everything read from the outside is length-checked before anything is
// allocated for it.
package entry

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/proto/pulsarpb"
)

// Magic starts every entry: Pulsar's magic number for a checksummed payload.
const Magic uint16 = 0x0e01

// MaxMetadataSize caps a MessageMetadata or SingleMessageMetadata.
const MaxMetadataSize = 1 << 20

const headerLen = 2 + 4 + 4

// ErrCorrupt is returned for bytes that are not a well-formed entry.
var ErrCorrupt = errors.New("entry: corrupt")

// ErrUnsupported is returned for an entry that may be well formed but that
// this package does not read: a compression type it does not know, a
// payload claiming more than MaxUncompressedSize, a batched message's
// metadata over MaxMetadataSize. A reader without those limits may read
// it: a consumer must not take it for corrupt and drop it.
var ErrUnsupported = errors.New("entry: not supported by this reader")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Encode lays out an entry.
func Encode(md *pulsarpb.MessageMetadata, payload []byte) ([]byte, error) {
	mb, err := proto.Marshal(md)
	if err != nil {
		return nil, fmt.Errorf("entry: encode metadata: %w", err)
	}
	if len(mb) > MaxMetadataSize {
		return nil, fmt.Errorf("entry: metadata of %d bytes exceeds %d", len(mb), MaxMetadataSize)
	}
	b := make([]byte, headerLen+len(mb)+len(payload))
	binary.BigEndian.PutUint16(b, Magic)
	binary.BigEndian.PutUint32(b[6:], uint32(len(mb)))
	copy(b[headerLen:], mb)
	copy(b[headerLen+len(mb):], payload)
	binary.BigEndian.PutUint32(b[2:], crc32.Checksum(b[6:], castagnoli))
	return b, nil
}

// Decode checks an entry and splits it; the payload aliases b.
func Decode(b []byte) (*pulsarpb.MessageMetadata, []byte, error) {
	if len(b) < headerLen {
		return nil, nil, fmt.Errorf("%w: %d bytes", ErrCorrupt, len(b))
	}
	if m := binary.BigEndian.Uint16(b); m != Magic {
		return nil, nil, fmt.Errorf("%w: magic %#04x", ErrCorrupt, m)
	}
	if sum := crc32.Checksum(b[6:], castagnoli); sum != binary.BigEndian.Uint32(b[2:]) {
		return nil, nil, fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	return DecodeUnchecked(b)
}

// DecodeUnchecked is Decode without the checksum, for a reader that only
// routes the entry (the broker's dispatcher: the consumer checks it).
func DecodeUnchecked(b []byte) (*pulsarpb.MessageMetadata, []byte, error) {
	if len(b) < headerLen {
		return nil, nil, fmt.Errorf("%w: %d bytes", ErrCorrupt, len(b))
	}
	if m := binary.BigEndian.Uint16(b); m != Magic {
		return nil, nil, fmt.Errorf("%w: magic %#04x", ErrCorrupt, m)
	}
	n := binary.BigEndian.Uint32(b[6:])
	if n > MaxMetadataSize || int(n) > len(b)-headerLen {
		return nil, nil, fmt.Errorf("%w: metadata size %d in %d bytes", ErrCorrupt, n, len(b))
	}
	md := decodeMetadata(b[headerLen : headerLen+int(n)])
	if md == nil {
		md = &pulsarpb.MessageMetadata{}
		if err := proto.Unmarshal(b[headerLen:headerLen+int(n)], md); err != nil {
			return nil, nil, fmt.Errorf("%w: metadata: %v", ErrCorrupt, err)
		}
	}
	return md, b[headerLen+int(n):], nil
}

// Single is one message of a batch.
type Single struct {
	Meta    *pulsarpb.SingleMessageMetadata
	Payload []byte
}

// AppendSingle appends one message to a batch payload being built; it sets
// the metadata's payload size.
func AppendSingle(buf []byte, smm *pulsarpb.SingleMessageMetadata, payload []byte) ([]byte, error) {
	smm.PayloadSize = proto.Int32(int32(len(payload)))
	// The metadata is marshaled in place, after room for its length.
	start := len(buf)
	buf, err := proto.MarshalOptions{}.MarshalAppend(append(buf, 0, 0, 0, 0), smm)
	if err != nil {
		return nil, fmt.Errorf("entry: encode message metadata: %w", err)
	}
	n := len(buf) - start - 4
	if n > MaxMetadataSize {
		return nil, fmt.Errorf("entry: message metadata of %d bytes exceeds %d", n, MaxMetadataSize)
	}
	binary.BigEndian.PutUint32(buf[start:], uint32(n))
	return append(buf, payload...), nil
}

// AppendSingleSeq appends a message whose metadata is only its sequence
// id (and payload size): the bytes AppendSingle makes of
// SingleMessageMetadata{SequenceId: seq}, without building the message.
func AppendSingleSeq(buf []byte, seq uint64, payload []byte) []byte {
	var md [2 + 2*binary.MaxVarintLen64]byte
	m := protowire.AppendTag(md[:0], 3, protowire.VarintType) // payload_size
	m = protowire.AppendVarint(m, uint64(int32(len(payload))))
	m = protowire.AppendTag(m, 8, protowire.VarintType) // sequence_id
	m = protowire.AppendVarint(m, seq)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(m)))
	buf = append(buf, m...)
	return append(buf, payload...)
}

// SplitBatch splits a (decompressed) batch payload into its n messages. The
// payloads alias b.
func SplitBatch(b []byte, n int) ([]Single, error) {
	if n < 1 || n > len(b)/4 {
		return nil, fmt.Errorf("%w: batch of %d messages in %d bytes", ErrCorrupt, n, len(b))
	}
	out := make([]Single, 0, n)
	for i := 0; i < n; i++ {
		if len(b) < 4 {
			return nil, fmt.Errorf("%w: batch message %d truncated", ErrCorrupt, i)
		}
		size := binary.BigEndian.Uint32(b)
		b = b[4:]
		if int64(size) > int64(len(b)) {
			return nil, fmt.Errorf("%w: batch message %d metadata size %d", ErrCorrupt, i, size)
		}
		if size > MaxMetadataSize {
			return nil, fmt.Errorf("%w: batch message %d metadata of %d bytes, over %d", ErrUnsupported, i, size, MaxMetadataSize)
		}
		smm := &pulsarpb.SingleMessageMetadata{}
		if err := proto.Unmarshal(b[:size], smm); err != nil {
			return nil, fmt.Errorf("%w: batch message %d metadata: %v", ErrCorrupt, i, err)
		}
		b = b[size:]
		ps := smm.GetPayloadSize()
		if ps < 0 || int(ps) > len(b) {
			return nil, fmt.Errorf("%w: batch message %d payload size %d", ErrCorrupt, i, ps)
		}
		out = append(out, Single{Meta: smm, Payload: b[:ps:ps]})
		b = b[ps:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the batch's last message", ErrCorrupt, len(b))
	}
	return out, nil
}
