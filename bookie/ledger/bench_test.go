package ledger_test

import (
	"context"
	"fmt"
	"testing"

	"go.uber.org/zap"

	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/internal/testcluster"
	"github.com/magnetar-io/magnetar/internal/testutil"
)

// The ledger client over 3 local bookies, E3/Qw3/Qa2: appends in flight
// through AppendAsync, each latency measured from append to completion.
func BenchmarkLedgerAppend(b *testing.B) {
	c := testcluster.Start(b, 3, testcluster.Options{})
	cl := c.Client(ledger.Config{Logger: zap.NewNop()})
	for _, size := range []int{1 << 10, 64 << 10} {
		for _, inflight := range []int{1, 16, 256} {
			b.Run(fmt.Sprintf("E3Qw3Qa2/size=%dKiB/inflight=%d", size>>10, inflight), func(b *testing.B) {
				ctx := context.Background()
				w, err := cl.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2})
				if err != nil {
					b.Fatal(err)
				}
				defer w.Close(ctx)
				payload := make([]byte, size)
				var lat testutil.Latencies
				b.SetBytes(int64(size))
				b.ReportAllocs() // allocations per operation (issue 14)
				b.ResetTimer()
				testutil.RunClosedLoop(b, inflight, &lat, func(int) error {
					_, err := w.Append(ctx, payload)
					return err
				})
				b.StopTimer()
				lat.Report(b)
			})
		}
	}
}
