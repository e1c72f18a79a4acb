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
	cmd := &pulsarpb.BaseCommand{}
	if err := proto.Unmarshal(buf[:cmdSize], cmd); err != nil {
		return Frame{}, fmt.Errorf("%w: command: %v", ErrMalformed, err)
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
