package ledger_test

import (
	"context"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"

	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/internal/testcluster"
	"github.com/magnetar-io/magnetar/proto/bookiepb"
)

// The writers' add streams are encoded by the add codec: every AddEntries
// stream the client opens has a codec forced on it that references a large
// payload instead of copying it (codec_test.go tests the encoding itself).
func TestAddStreamsUseTheAddCodec(t *testing.T) {
	c := testcluster.Start(t, 1, testcluster.Options{})
	var mu sync.Mutex
	streams, referencing := 0, 0
	payload := make([]byte, 64<<10)
	probe := &bookiepb.AddEntriesRequest{Entries: []*bookiepb.AddEntryRequest{{LedgerId: 1, Payload: payload}}}
	intercept := grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if method == bookiepb.Bookie_AddEntries_FullMethodName {
			mu.Lock()
			streams++
			// The last codec forced is the one gRPC uses.
			var codec encoding.CodecV2
			for _, o := range opts {
				if f, ok := o.(grpc.ForceCodecV2CallOption); ok {
					codec = f.CodecV2
				}
			}
			if codec != nil {
				out, err := codec.Marshal(probe)
				if err != nil {
					t.Errorf("the forced codec: %v", err)
				}
				for _, b := range out {
					if d := b.ReadOnlyData(); len(d) == len(payload) && &d[0] == &payload[0] {
						referencing++
						break
					}
				}
				out.Free()
			}
			mu.Unlock()
		}
		return streamer(ctx, desc, cc, method, opts...)
	})
	cl := c.Client(ledger.Config{DialOptions: []grpc.DialOption{intercept}})
	ctx := ctxT(t)
	w, err := cl.Create(ctx, ledger.CreateOptions{Ensemble: 1, WriteQuorum: 1, AckQuorum: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Append(ctx, make([]byte, 8<<10)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if streams == 0 || referencing != streams {
		t.Fatalf("%d add streams, %d of them with a codec that references payloads", streams, referencing)
	}
}
