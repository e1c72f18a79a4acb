package entry

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/magnetar-io/magnetar/proto/pulsarpb"
)

// MaxUncompressedSize caps what a decompressed payload may claim to be.
const MaxUncompressedSize = 64 << 20

var (
	zstdOnce sync.Once
	zstdEnc  *zstd.Encoder
	zstdDec  *zstd.Decoder
	zstdErr  error
)

func zstdCodec() (*zstd.Encoder, *zstd.Decoder, error) {
	zstdOnce.Do(func() {
		zstdEnc, zstdErr = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
		if zstdErr == nil {
			zstdDec, zstdErr = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(MaxUncompressedSize))
		}
	})
	return zstdEnc, zstdDec, zstdErr
}

// Compress compresses a payload the way Pulsar clients do: LZ4 and Snappy as
// raw blocks, ZLIB as a zlib stream, ZSTD as a frame.
func Compress(t pulsarpb.CompressionType, src []byte) ([]byte, error) {
	switch t {
	case pulsarpb.CompressionType_NONE:
		return src, nil
	case pulsarpb.CompressionType_LZ4:
		dst := make([]byte, lz4.CompressBlockBound(len(src)))
		n, err := lz4.CompressBlock(src, dst, nil)
		if err != nil {
			return nil, fmt.Errorf("entry: lz4: %w", err)
		}
		if n == 0 && len(src) > 0 { // incompressible: lz4 wants a literal-only block
			return lz4LiteralBlock(src), nil
		}
		return dst[:n], nil
	case pulsarpb.CompressionType_ZLIB:
		var buf bytes.Buffer
		w := zlib.NewWriter(&buf)
		if _, err := w.Write(src); err != nil {
			return nil, fmt.Errorf("entry: zlib: %w", err)
		}
		if err := w.Close(); err != nil {
			return nil, fmt.Errorf("entry: zlib: %w", err)
		}
		return buf.Bytes(), nil
	case pulsarpb.CompressionType_ZSTD:
		enc, _, err := zstdCodec()
		if err != nil {
			return nil, err
		}
		return enc.EncodeAll(src, nil), nil
	case pulsarpb.CompressionType_SNAPPY:
		return snappy.Encode(nil, src), nil
	}
	return nil, fmt.Errorf("entry: unknown compression type %d", t)
}

// lz4LiteralBlock encodes src as one LZ4 sequence of literals only, which
// every LZ4 block decoder accepts.
func lz4LiteralBlock(src []byte) []byte {
	n := len(src)
	out := make([]byte, 0, n+n/255+16)
	if n < 15 {
		out = append(out, byte(n<<4))
	} else {
		out = append(out, 0xf0)
		rest := n - 15
		for rest >= 255 {
			out = append(out, 255)
			rest -= 255
		}
		out = append(out, byte(rest))
	}
	return append(out, src...)
}

// maxExpansion bounds what n bytes of codec t can decompress to, so that
// a claim beyond it is known corrupt rather than merely too large for
// this reader: an LZ4 block expands 255 times at most, a deflate stream
// (zlib) 1032 times, a Snappy block says its length (checked against the
// claim in Decompress). ZSTD has no such bound short of reading the frame.
func maxExpansion(t pulsarpb.CompressionType, n int) int64 {
	switch t {
	case pulsarpb.CompressionType_NONE:
		return int64(n)
	case pulsarpb.CompressionType_LZ4:
		return 255*int64(n) + 64
	case pulsarpb.CompressionType_ZLIB:
		return 1032*int64(n) + 64
	}
	return math.MaxInt64
}

// Decompress reverses Compress. size is the uncompressed size the metadata
// claims; it is checked against MaxUncompressedSize before allocating, and
// the result must have exactly that size.
func Decompress(t pulsarpb.CompressionType, src []byte, size int) ([]byte, error) {
	if size < 0 || int64(size) > maxExpansion(t, len(src)) {
		return nil, fmt.Errorf("%w: uncompressed size %d from %d bytes of %s", ErrCorrupt, size, len(src), t)
	}
	if t == pulsarpb.CompressionType_SNAPPY {
		n, err := s2.DecodedLen(src)
		if err != nil {
			return nil, fmt.Errorf("%w: snappy: %v", ErrCorrupt, err)
		}
		if n != size {
			return nil, fmt.Errorf("%w: snappy block of %d bytes, metadata says %d", ErrCorrupt, n, size)
		}
	}
	if size > MaxUncompressedSize {
		return nil, fmt.Errorf("%w: uncompressed size %d, over %d", ErrUnsupported, size, MaxUncompressedSize)
	}
	var out []byte
	var err error
	switch t {
	case pulsarpb.CompressionType_NONE:
		out = src
	case pulsarpb.CompressionType_LZ4:
		out = make([]byte, size)
		var n int
		n, err = lz4.UncompressBlock(src, out)
		out = out[:max(n, 0)]
	case pulsarpb.CompressionType_ZLIB:
		var r io.ReadCloser
		r, err = zlib.NewReader(bytes.NewReader(src))
		if err == nil {
			out, err = io.ReadAll(io.LimitReader(r, int64(size)+1))
			r.Close()
		}
	case pulsarpb.CompressionType_ZSTD:
		var dec *zstd.Decoder
		if _, dec, err = zstdCodec(); err == nil {
			out, err = dec.DecodeAll(src, make([]byte, 0, size))
		}
	case pulsarpb.CompressionType_SNAPPY:
		out, err = snappy.Decode(nil, src)
	default:
		return nil, fmt.Errorf("%w: unknown compression type %d", ErrUnsupported, t)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, t, err)
	}
	if len(out) != size {
		return nil, fmt.Errorf("%w: %s payload decompressed to %d bytes, metadata says %d", ErrCorrupt, t, len(out), size)
	}
	return out, nil
}
