package broker

import (
	"fmt"
	"strings"
	"testing"

	"github.com/magnetar-io/magnetar/proto/brokerpb"
)

// The receipts at the front of a producer's queue go out in one Receipts,
// in order, up to maxReceiptsTogether; an error (or anything else) ends
// the run and goes out alone.
func TestReceiptsTogether(t *testing.T) {
	receipt := func(seq uint64) *brokerpb.ProduceResponse {
		return &brokerpb.ProduceResponse{Response: &brokerpb.ProduceResponse_Receipt{Receipt: &brokerpb.SendReceipt{SequenceId: seq}}}
	}
	failure := &brokerpb.ProduceResponse{Response: &brokerpb.ProduceResponse_Error{Error: &brokerpb.SendError{SequenceId: 3}}}
	q := []*brokerpb.ProduceResponse{receipt(1), receipt(2), failure, receipt(4)}
	if n := receiptsAhead(q); n != 2 {
		t.Fatalf("receipts ahead of an error: %d, want 2", n)
	}
	if n := receiptsAhead(q[2:]); n != 0 {
		t.Fatalf("receipts ahead at an error: %d, want 0", n)
	}
	got := receiptsOf(q[:2]).GetReceipts().GetReceipts()
	if len(got) != 2 || got[0].SequenceId != 1 || got[1].SequenceId != 2 {
		t.Fatalf("Receipts %v, want 1 and 2", got)
	}
	long := make([]*brokerpb.ProduceResponse, maxReceiptsTogether+5)
	for i := range long {
		long[i] = receipt(uint64(i))
	}
	if n := receiptsAhead(long); n != maxReceiptsTogether {
		t.Fatalf("receipts ahead of a long queue: %d, want the cap %d", n, maxReceiptsTogether)
	}
}

// Receipts go together only to a client that asked (an older one reads
// one receipt per response), in order, errors alone.
func TestNextResponse(t *testing.T) {
	receipt := func(seq uint64) *brokerpb.ProduceResponse {
		return &brokerpb.ProduceResponse{Response: &brokerpb.ProduceResponse_Receipt{Receipt: &brokerpb.SendReceipt{SequenceId: seq}}}
	}
	failure := &brokerpb.ProduceResponse{Response: &brokerpb.ProduceResponse_Error{Error: &brokerpb.SendError{SequenceId: 3}}}
	for _, together := range []bool{false, true} {
		q := []*brokerpb.ProduceResponse{receipt(1), receipt(2), failure, receipt(4)}
		var got []string
		for len(q) > 0 {
			var r *brokerpb.ProduceResponse
			r, q = nextResponse(q, together)
			switch x := r.Response.(type) {
			case *brokerpb.ProduceResponse_Receipt:
				got = append(got, "receipt")
			case *brokerpb.ProduceResponse_Receipts:
				got = append(got, fmt.Sprintf("receipts of %d", len(x.Receipts.Receipts)))
			case *brokerpb.ProduceResponse_Error:
				got = append(got, "error")
			}
		}
		want := "receipt receipt error receipt"
		if together {
			want = "receipts of 2 error receipt"
		}
		if g := strings.Join(got, " "); g != want {
			t.Errorf("together=%v: %s, want %s", together, g, want)
		}
	}
}
