package wire

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Every sentinel survives the trip over the wire, as a status and as a
// stream result, keeping its message.
func TestRoundTrip(t *testing.T) {
	for _, row := range table {
		err := fmt.Errorf("%w: ledger 7", row.err)
		st := ToStatus(err)
		if s, ok := status.FromError(st); !ok || s.Code() != row.code || s.Message() != err.Error() {
			t.Fatalf("%v: status %v", row.err, st)
		}
		back := FromStatus(st)
		if !errors.Is(back, row.err) || back.Error() != err.Error() {
			t.Fatalf("%v: came back as %v", row.err, back)
		}
		if Reason(back) != row.reason {
			t.Fatalf("%v: reason %q", row.err, Reason(back))
		}
		code, reason, msg := ToResult(err)
		if res := FromResult(code, reason, msg); !errors.Is(res, row.err) || res.Error() != err.Error() {
			t.Fatalf("%v: result came back as %v", row.err, res)
		}
	}
	if ToStatus(nil) != nil || FromStatus(nil) != nil || FromResult(0, "", "") != nil {
		t.Fatal("nil does not stay nil")
	}
	if code, _, _ := ToResult(nil); code != 0 {
		t.Fatal("nil result has a code")
	}
}

func TestUnknownErrors(t *testing.T) {
	if s := status.Convert(ToStatus(errors.New("boom"))); s.Code() != codes.Internal {
		t.Fatalf("plain error became %v", s.Code())
	}
	if s := status.Convert(ToStatus(context.DeadlineExceeded)); s.Code() != codes.DeadlineExceeded {
		t.Fatalf("deadline became %v", s.Code())
	}
	// Transport failures without a reason are "unavailable" to the client.
	for _, c := range []codes.Code{codes.Unavailable, codes.DeadlineExceeded} {
		if err := FromStatus(status.Error(c, "x")); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("%v: %v", c, err)
		}
	}
	if err := FromStatus(status.Error(codes.Internal, "x")); errors.Is(err, ErrUnavailable) {
		t.Fatal("internal error taken for unavailability")
	}
	if err := FromResult(uint32(codes.Unavailable), "", "gone"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("result without reason: %v", err)
	}
}

func TestChecksumCoversEveryField(t *testing.T) {
	base := Checksum(1, 2, 3, 4, []byte("payload"))
	for name, sum := range map[string]uint32{
		"ledger":  Checksum(9, 2, 3, 4, []byte("payload")),
		"entry":   Checksum(1, 9, 3, 4, []byte("payload")),
		"lac":     Checksum(1, 2, 9, 4, []byte("payload")),
		"length":  Checksum(1, 2, 3, 9, []byte("payload")),
		"payload": Checksum(1, 2, 3, 4, []byte("paylоad")),
	} {
		if sum == base {
			t.Errorf("checksum ignores the %s", name)
		}
	}
}

// Checksum is the CRC-32C of the 32-byte big-endian header followed by the
// payload, and allocates nothing.
func TestChecksumDefinition(t *testing.T) {
	for _, tc := range []struct {
		ledger, entry, lac, length int64
		payload                    string
	}{{1, 2, 3, 4, "payload"}, {0, 0, -1, 0, ""}, {-1, 1 << 62, 1<<63 - 1, 123456789, "x"}} {
		b := binary.BigEndian.AppendUint64(nil, uint64(tc.ledger))
		b = binary.BigEndian.AppendUint64(b, uint64(tc.entry))
		b = binary.BigEndian.AppendUint64(b, uint64(tc.lac))
		b = binary.BigEndian.AppendUint64(b, uint64(tc.length))
		want := crc32.Checksum(append(b, tc.payload...), crc32.MakeTable(crc32.Castagnoli))
		if got := Checksum(tc.ledger, tc.entry, tc.lac, tc.length, []byte(tc.payload)); got != want {
			t.Errorf("%+v: %#x, want %#x", tc, got, want)
		}
	}
	payload := []byte("payload")
	if n := testing.AllocsPerRun(100, func() { Checksum(1, 2, 3, 4, payload) }); n != 0 {
		t.Errorf("%v allocations per checksum", n)
	}
}
