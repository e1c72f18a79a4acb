// Package pulsarwire reads and writes the frames of Apache Pulsar's
// binary protocol:
//
//	total size (4) | command size (4) | BaseCommand | [payload]
//
// Integers are big-endian; the total size counts what follows it. SEND
// and MESSAGE frames carry a payload after the command: a message's
// checksummed headers and payload, the layout of a stored entry (package
// proto/entry). Every size read from the peer is checked against the
// reader's limit before anything is allocated for it.
package pulsarwire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/proto/pulsarpb"
)

var (
	// ErrTooLarge: a frame over the reader's limit.
	ErrTooLarge = errors.New("pulsarwire: frame too large")
	// ErrMalformed: sizes that do not add up, or a command that does not
	// parse.
	ErrMalformed = errors.New("pulsarwire: malformed frame")
)

// Frame is one frame.
type Frame struct {
	Cmd *pulsarpb.BaseCommand
	// Payload is what follows the command (nil if nothing does). It
	// aliases a buffer of the frame's own.
	Payload []byte
}

// Reader reads frames.
type Reader struct {
	r   *bufio.Reader
	max int
	hdr [8]byte
}

// NewReader reads frames of at most max bytes (the total size) from r.
func NewReader(r io.Reader, max int) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// SetMax changes the limit for the frames read next.
func (r *Reader) SetMax(max int) { r.max = max }

// Read reads the next frame. io.EOF at a frame boundary is returned as
// is; a frame cut short is io.ErrUnexpectedEOF.
func (r *Reader) Read() (Frame, error) {
	if _, err := io.ReadFull(r.r, r.hdr[:4]); err != nil {
		return Frame{}, err
	}
	total := binary.BigEndian.Uint32(r.hdr[:4])
	if int64(total) > int64(r.max) {
		return Frame{}, fmt.Errorf("%w: %d bytes, the limit is %d", ErrTooLarge, total, r.max)
	}
	if total < 4 {
		return Frame{}, fmt.Errorf("%w: total size %d", ErrMalformed, total)
	}
	if _, err := io.ReadFull(r.r, r.hdr[4:8]); err != nil {
		return Frame{}, noEOF(err)
	}
	cmdSize := binary.BigEndian.Uint32(r.hdr[4:8])
	if cmdSize > total-4 {
		return Frame{}, fmt.Errorf("%w: command of %d bytes in a frame of %d", ErrMalformed, cmdSize, total)
	}
	buf := make([]byte, total-4)
	if _, err := io.ReadFull(r.r, buf); err != nil {
		return Frame{}, noEOF(err)
	}
	cmd := decodeSend(buf[:cmdSize])
	if cmd == nil {
		cmd = &pulsarpb.BaseCommand{}
		if err := proto.Unmarshal(buf[:cmdSize], cmd); err != nil {
			return Frame{}, fmt.Errorf("%w: command: %v", ErrMalformed, err)
		}
	}
	f := Frame{Cmd: cmd}
	if int(cmdSize) < len(buf) {
		f.Payload = buf[cmdSize:]
	}
	return f, nil
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Append appends a frame of cmd and payload (nil for none) to dst.
func Append(dst []byte, cmd *pulsarpb.BaseCommand, payload []byte) ([]byte, error) {
	size := proto.Size(cmd)
	total := 4 + size + len(payload)
	if uint64(total) > 1<<32-1 {
		return dst, fmt.Errorf("%w: %d bytes", ErrTooLarge, total)
	}
	start := len(dst)
	dst = binary.BigEndian.AppendUint32(dst, uint32(total))
	dst = binary.BigEndian.AppendUint32(dst, uint32(size))
	dst, err := proto.MarshalOptions{}.MarshalAppend(dst, cmd)
	if err != nil {
		return dst[:start], err // nothing of the frame is left
	}
	return append(dst, payload...), nil
}

// Receipt is a SEND_RECEIPT: the message id of what a producer's send was
// stored as.
type Receipt struct {
	ProducerID, SequenceID uint64
	LedgerID, EntryID      uint64
	Partition              int32
}

// Field numbers of the messages AppendReceipt writes (commands.proto,
// pulsar.proto).
const (
	fieldBaseCommandType        = 1
	fieldBaseCommandSendReceipt = 7
	fieldReceiptProducerID      = 1
	fieldReceiptSequenceID      = 2
	fieldReceiptMessageID       = 3
	fieldMessageIDLedgerID      = 1
	fieldMessageIDEntryID       = 2
	fieldMessageIDPartition     = 3
)

// AppendReceipt appends the frame of r to dst: the bytes Append writes for
// the same BaseCommand, without building one (a receipt per message is
// the hot path of producing; TestAppendReceipt compares the two).
func AppendReceipt(dst []byte, r Receipt) []byte {
	partition := uint64(int64(r.Partition)) // int32 fields are sign-extended
	idSize := 1 + protowire.SizeVarint(r.LedgerID) + 1 + protowire.SizeVarint(r.EntryID) + 1 + protowire.SizeVarint(partition)
	receiptSize := 1 + protowire.SizeVarint(r.ProducerID) + 1 + protowire.SizeVarint(r.SequenceID) + 1 + protowire.SizeBytes(idSize)
	size := 1 + protowire.SizeVarint(uint64(pulsarpb.BaseCommand_SEND_RECEIPT)) + 1 + protowire.SizeBytes(receiptSize)
	dst = binary.BigEndian.AppendUint32(dst, uint32(4+size))
	dst = binary.BigEndian.AppendUint32(dst, uint32(size))
	dst = appendVarintField(dst, fieldBaseCommandType, uint64(pulsarpb.BaseCommand_SEND_RECEIPT))
	dst = appendLengthField(dst, fieldBaseCommandSendReceipt, receiptSize)
	dst = appendVarintField(dst, fieldReceiptProducerID, r.ProducerID)
	dst = appendVarintField(dst, fieldReceiptSequenceID, r.SequenceID)
	dst = appendLengthField(dst, fieldReceiptMessageID, idSize)
	dst = appendVarintField(dst, fieldMessageIDLedgerID, r.LedgerID)
	dst = appendVarintField(dst, fieldMessageIDEntryID, r.EntryID)
	return appendVarintField(dst, fieldMessageIDPartition, partition)
}

// appendVarintField appends field num holding v.
func appendVarintField(dst []byte, num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(dst, num, protowire.VarintType), v)
}

// appendLengthField appends the tag and length of field num, a message of
// size bytes that the caller appends next.
func appendLengthField(dst []byte, num protowire.Number, size int) []byte {
	return protowire.AppendVarint(protowire.AppendTag(dst, num, protowire.BytesType), uint64(size))
}

// sendCommand is a SEND's BaseCommand with its fields in one allocation
// (decodeSend).
type sendCommand struct {
	base                                               pulsarpb.BaseCommand
	send                                               pulsarpb.CommandSend
	typ                                                pulsarpb.BaseCommand_Type
	producerID, sequenceID, txnLeast, txnMost, highest uint64
	numMessages                                        int32
	isChunk, marker                                    bool
}

// Field numbers of CommandSend (commands.proto) and of BaseCommand's send.
const (
	fieldBaseCommandSend = 6
	fieldSendProducerID  = 1
	fieldSendSequenceID  = 2
	fieldSendNumMessages = 3
	fieldSendTxnLeast    = 4
	fieldSendTxnMost     = 5
	fieldSendHighest     = 6
	fieldSendIsChunk     = 7
	fieldSendMarker      = 8
)

// decodeSend decodes a SEND command (a frame per message produced, the
// hot path of reading) with one allocation where proto.Unmarshal makes
// one per field set, or returns nil for proto.Unmarshal to do it: any
// other command, a field it does not know (a SEND's message_id among
// them), a required field missing, anything malformed. What it returns is
// what proto.Unmarshal gives (FuzzDecodeSend compares the two).
func decodeSend(b []byte) *pulsarpb.BaseCommand {
	var c sendCommand
	var sawType, sawSend bool
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		switch {
		case num == fieldBaseCommandType && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 || v != uint64(pulsarpb.BaseCommand_SEND) {
				return nil
			}
			b, sawType = b[n:], true
		case num == fieldBaseCommandSend && typ == protowire.BytesType && !sawSend:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 || !c.decodeFields(v) {
				return nil
			}
			b, sawSend = b[n:], true
		default:
			return nil
		}
	}
	if !sawType || !sawSend || c.send.ProducerId == nil || c.send.SequenceId == nil {
		return nil
	}
	c.typ = pulsarpb.BaseCommand_SEND
	c.base.Type, c.base.Send = &c.typ, &c.send
	return &c.base
}

// decodeFields decodes a CommandSend of varint fields only.
func (c *sendCommand) decodeFields(b []byte) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.VarintType {
			return false
		}
		b = b[n:]
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch num {
		case fieldSendProducerID:
			c.producerID, c.send.ProducerId = v, &c.producerID
		case fieldSendSequenceID:
			c.sequenceID, c.send.SequenceId = v, &c.sequenceID
		case fieldSendNumMessages:
			c.numMessages, c.send.NumMessages = int32(v), &c.numMessages
		case fieldSendTxnLeast:
			c.txnLeast, c.send.TxnidLeastBits = v, &c.txnLeast
		case fieldSendTxnMost:
			c.txnMost, c.send.TxnidMostBits = v, &c.txnMost
		case fieldSendHighest:
			c.highest, c.send.HighestSequenceId = v, &c.highest
		case fieldSendIsChunk:
			c.isChunk, c.send.IsChunk = protowire.DecodeBool(v), &c.isChunk
		case fieldSendMarker:
			c.marker, c.send.Marker = protowire.DecodeBool(v), &c.marker
		default:
			return false
		}
	}
	return true
}

// TxnRequestID is the request id of a transaction command (NEW_TXN,
// ADD_PARTITION_TO_TXN, ADD_SUBSCRIPTION_TO_TXN, END_TXN,
// END_TXN_ON_PARTITION, END_TXN_ON_SUBSCRIPTION, TC_CLIENT_CONNECT_REQUEST),
// which a broker without transactions answers with an error (Pulsar's
// "Transactions are not enabled"); ok is false for any other command, or
// one without its body or request id. pulsarpb leaves these commands out:
// the body is BaseCommand's field of the type's number (as in Pulsar's
// PulsarApi.proto), kept as an unknown field, its request id field 1.
func TxnRequestID(cmd *pulsarpb.BaseCommand) (id uint64, ok bool) {
	switch cmd.GetType() {
	case pulsarpb.BaseCommand_NEW_TXN, pulsarpb.BaseCommand_ADD_PARTITION_TO_TXN, pulsarpb.BaseCommand_ADD_SUBSCRIPTION_TO_TXN,
		pulsarpb.BaseCommand_END_TXN, pulsarpb.BaseCommand_END_TXN_ON_PARTITION, pulsarpb.BaseCommand_END_TXN_ON_SUBSCRIPTION,
		pulsarpb.BaseCommand_TC_CLIENT_CONNECT_REQUEST:
	default:
		return 0, false
	}
	body, found := lastField(cmd.ProtoReflect().GetUnknown(), protowire.Number(cmd.GetType()), protowire.BytesType)
	if !found {
		return 0, false
	}
	v, found := lastField(body, 1, protowire.VarintType)
	if !found {
		return 0, false
	}
	id, n := protowire.ConsumeVarint(v)
	return id, n > 0
}

// lastField returns the value of the last occurrence of field num of type
// typ in the message b (the bytes of a length-delimited field, or the
// encoded varint); found is false if it is absent or b is malformed.
func lastField(b []byte, num protowire.Number, typ protowire.Type) (v []byte, found bool) {
	for len(b) > 0 {
		n, t, l := protowire.ConsumeTag(b)
		if l < 0 {
			return nil, false
		}
		b = b[l:]
		l = protowire.ConsumeFieldValue(n, t, b)
		if l < 0 {
			return nil, false
		}
		if n == num && t == typ {
			v, found = b[:l], true
			if typ == protowire.BytesType {
				var m int
				if v, m = protowire.ConsumeBytes(v); m < 0 {
					return nil, false
				}
			}
		}
		b = b[l:]
	}
	return v, found
}
