package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/magnetar-io/magnetar/client"
)

// A send is timed from when it gets a slot, not from when it starts
// waiting for one: with one slot and a fixed round trip, every message's
// latency is that round trip (not 2x, 3x... for the ones that queued).
// synctest's clock moves only when every goroutine waits, so the times are
// exact.
func TestInflightTimesSendToAck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rtt = 10 * time.Millisecond
		f := newInflight(1)
		var (
			mu                  sync.Mutex
			latencies           []time.Duration
			inFlight, maxAtOnce int
		)
		start := time.Now()
		for i := 0; i < 3; i++ {
			err := f.send(context.Background(), func(at time.Time, done func(error)) {
				mu.Lock()
				inFlight++
				maxAtOnce = max(maxAtOnce, inFlight)
				mu.Unlock()
				go func() { // the fake broker
					time.Sleep(rtt)
					mu.Lock()
					inFlight--
					mu.Unlock()
					done(nil)
				}()
			}, func(latency time.Duration, err error) {
				if err != nil {
					t.Errorf("send: %v", err)
				}
				mu.Lock()
				latencies = append(latencies, latency)
				mu.Unlock()
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		f.wait()
		if len(latencies) != 3 {
			t.Fatalf("recorded %d sends, want 3", len(latencies))
		}
		for i, l := range latencies {
			if l != rtt {
				t.Errorf("send %d: latency %v, want the round trip %v (queueing for a slot is not latency)", i, l, rtt)
			}
		}
		if maxAtOnce != 1 {
			t.Errorf("%d sends in flight at once with one slot", maxAtOnce)
		}
		if took := time.Since(start); took != 3*rtt {
			t.Errorf("3 sends one at a time took %v, want %v", took, 3*rtt)
		}
	})
}

// A full window gives up when the run ends.
func TestInflightWaitEndsWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newInflight(1)
		var held func(error)
		if err := f.send(context.Background(), func(_ time.Time, done func(error)) { held = done }, func(time.Duration, error) {}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		err := f.send(ctx, func(time.Time, func(error)) { t.Error("sent without a slot") }, func(time.Duration, error) {})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("send on a full window: %v", err)
		}
		held(nil)
		f.wait()
	})
}

// --batch-delay 0 means no wait (the SDK would read 0 as its 10ms
// default); --disable-batching reaches the SDK; --max-pending is the
// producer's bound too, so that perf's own is the one that waits.
func TestProduceOptions(t *testing.T) {
	o, err := produceOptions("t", 0, false, 7, client.NoCompression)
	if err != nil || o.BatchingMaxPublishDelay != time.Microsecond || o.DisableBatching || o.MaxPendingMessages != 7 {
		t.Fatalf("--batch-delay 0: %+v %v", o, err)
	}
	o, err = produceOptions("t", 5*time.Millisecond, true, 1, client.ZSTD)
	if err != nil || o.BatchingMaxPublishDelay != 5*time.Millisecond || !o.DisableBatching || o.CompressionType != client.ZSTD {
		t.Fatalf("--disable-batching: %+v %v", o, err)
	}
	if _, err := produceOptions("t", -time.Millisecond, false, 1, client.NoCompression); err == nil || !strings.Contains(err.Error(), "--batch-delay") {
		t.Fatalf("negative delay: %v", err)
	}
	if _, err := produceOptions("t", 0, false, 0, client.NoCompression); err == nil || !strings.Contains(err.Error(), "--max-pending") {
		t.Fatalf("no slot: %v", err)
	}
}

// Bad perf produce flags are refused before connecting.
func TestPerfProduceBadFlags(t *testing.T) {
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--batch-delay", "-1s"}, "--batch-delay -1s: must not be negative"},
		{[]string{"--max-pending", "0"}, "--max-pending 0: must be at least 1"},
		{[]string{"--payload", "zeros"}, `--payload "zeros": want random or compressible`},
	} {
		args := append([]string{"perf", "produce", "t", "--url", "magnetar://127.0.0.1:1"}, tc.flags...)
		if err := run(context.Background(), io.Discard, args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error with %q", tc.flags, err, tc.want)
		}
	}
}

// Failed sends are counted by reason, the first few distinct reasons
// shown, the others summed up.
func TestPerfFailureReasons(t *testing.T) {
	st := newStats()
	var out strings.Builder
	if n := st.failures(&out); n != 0 || out.Len() != 0 {
		t.Fatalf("no failures: %d %q", n, out.String())
	}
	for i := 0; i < 3; i++ {
		st.failed(fmt.Errorf("%w: no receipt within 30s", client.ErrSendTimeout))
	}
	st.failed(client.ErrMessageTooLarge)
	for i := 0; i < 10; i++ {
		st.failed(fmt.Errorf("reason %d", i))
	}
	if n := st.failures(&out); n != 14 {
		t.Fatalf("failures = %d, want 14", n)
	}
	want := "14 sends failed:\n" +
		"         3  " + client.ErrSendTimeout.Error() + ": no receipt within 30s\n" +
		"         1  " + client.ErrMessageTooLarge.Error() + "\n" +
		"         1  reason 0\n" +
		"         1  reason 1\n" +
		"         1  reason 2\n" +
		"         7  (other reasons)\n"
	if out.String() != want {
		t.Fatalf("printed\n%s\nwant\n%s", out.String(), want)
	}
}

// Default payloads are random: a batch of them does not compress (so that
// the storage's and the producer's compression do not flatter the
// figures), also when each payload is given back for reuse; compressible
// ones do. Both carry the send-time stamp.
func TestPerfPayloads(t *testing.T) {
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	ratio := func(compressible bool) float64 {
		p := newPayloads(1024, compressible)
		var batch []byte
		for i := 0; i < 128; i++ { // a full batch (128 KiB)
			m := p.next()
			if len(m) != 1024 {
				t.Fatalf("payload of %d bytes, want 1024", len(m))
			}
			now := time.Now()
			stamp(m, now)
			if at, ok := stamped(m); !ok || !at.Equal(time.Unix(0, now.UnixNano())) {
				t.Fatal("payload without its stamp")
			}
			batch = append(batch, m...)
			p.put(m) // reused: the next message must still be a new one
		}
		return float64(len(enc.EncodeAll(batch, nil))) / float64(len(batch))
	}
	// Random: near 1 (the stamps' magic and high time bytes repeat, and
	// two of the 128 messages may overlap in the random buffer).
	random, compressible := ratio(false), ratio(true)
	t.Logf("zstd: random payloads to %.3f of their size, compressible ones to %.3f", random, compressible)
	if random < 0.9 {
		t.Errorf("random payloads compress to %.2f of their size", random)
	}
	if compressible > 0.1 {
		t.Errorf("compressible payloads compress only to %.2f of their size", compressible)
	}
	p := newPayloads(64, false)
	if a, b := p.next(), p.next(); bytes.Equal(a, b) {
		t.Error("two random payloads are the same")
	}
	if got := newPayloads(0, false).next(); len(got) != 0 {
		t.Errorf("empty payload of %d bytes", len(got))
	}
}
