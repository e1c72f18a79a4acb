package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/client"
)

// stats accumulates a perf run: counts and an HDR latency histogram
// (microseconds), for each reporting interval and in total.
type stats struct {
	mu         sync.Mutex
	msgs, byts int64
	errs       int64
	interval   *hdrhistogram.Histogram
	total      *hdrhistogram.Histogram
	totalMsgs  int64
	totalBytes int64
	start      time.Time
	last       time.Time
}

func newStats() *stats {
	now := time.Now()
	return &stats{interval: hdrhistogram.New(1, 600_000_000, 3), total: hdrhistogram.New(1, 600_000_000, 3), start: now, last: now}
}

func (s *stats) record(bytes int, latency time.Duration) {
	us := max(latency.Microseconds(), 1)
	s.mu.Lock()
	s.msgs++
	s.byts += int64(bytes)
	s.interval.RecordValue(us)
	s.total.RecordValue(us)
	s.mu.Unlock()
}

func (s *stats) failed() {
	s.mu.Lock()
	s.errs++
	s.mu.Unlock()
}

func ms(us int64) float64 { return float64(us) / 1000 }

// report prints the interval's figures and starts a new interval.
func (s *stats) report(w io.Writer, what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	secs := now.Sub(s.last).Seconds()
	h := s.interval
	fmt.Fprintf(w, "%s: %8.0f msg/s %8.2f MB/s | latency ms p50 %.2f p95 %.2f p99 %.2f p99.9 %.2f max %.2f | errors %d\n",
		what, float64(s.msgs)/secs, float64(s.byts)/secs/1e6,
		ms(h.ValueAtQuantile(50)), ms(h.ValueAtQuantile(95)), ms(h.ValueAtQuantile(99)), ms(h.ValueAtQuantile(99.9)), ms(h.Max()), s.errs)
	s.totalMsgs += s.msgs
	s.totalBytes += s.byts
	s.msgs, s.byts = 0, 0
	s.interval.Reset()
	s.last = now
}

func (s *stats) summary(w io.Writer, what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	msgs, byts := s.totalMsgs+s.msgs, s.totalBytes+s.byts
	secs := time.Since(s.start).Seconds()
	h := s.total
	fmt.Fprintf(w, "%s summary: %d messages in %.1fs: %.0f msg/s %.2f MB/s | latency ms p50 %.2f p95 %.2f p99 %.2f p99.9 %.2f max %.2f | errors %d\n",
		what, msgs, secs, float64(msgs)/secs, float64(byts)/secs/1e6,
		ms(h.ValueAtQuantile(50)), ms(h.ValueAtQuantile(95)), ms(h.ValueAtQuantile(99)), ms(h.ValueAtQuantile(99.9)), ms(h.Max()), s.errs)
}

// startProgress prints a progress line every second until ctx ends or the
// returned stop is called; stop returns once the printing goroutine has
// exited, so that nothing is printed after it (the summary comes last).
func startProgress(ctx context.Context, w io.Writer, s *stats, what string) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.report(w, what)
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

func newPerfCmd(g *globals) *cobra.Command {
	var url string
	cmd := &cobra.Command{Use: "perf", Short: "Measure produce and consume throughput and latency",
		PersistentPreRunE: func(*cobra.Command, []string) error { return checkURL(url) }}
	cmd.PersistentFlags().StringVar(&url, "url", defaultURL, "cluster URL: magnetar://HOST:PORT (several brokers comma-separated)")

	var (
		rate        float64
		size, count int
		batchDelay  time.Duration
		maxPending  int
		compression string
		duration    time.Duration
	)
	produce := &cobra.Command{
		Use:   "produce TOPIC",
		Short: "Publish at a given rate; report msg/s, MB/s and send latency",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if rate < 0 || size < 0 || count < 0 {
				return errors.New("--rate, --size and -n must not be negative")
			}
			ct, err := parseCompression(compression)
			if err != nil {
				return err
			}
			c, err := client.NewClient(client.ClientOptions{URL: url})
			if err != nil {
				return err
			}
			defer c.Close()
			p, err := c.CreateProducer(client.ProducerOptions{Topic: args[0], BatchingMaxPublishDelay: batchDelay,
				MaxPendingMessages: maxPending, CompressionType: ct})
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if duration > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, duration)
				defer cancel()
			}
			st := newStats()
			stop := startProgress(ctx, cmd.OutOrStdout(), st, "produce")
			var wg sync.WaitGroup
			start := time.Now()
			for i := 0; count == 0 || i < count; i++ {
				if rate > 0 { // pace: message i is due at start + i/rate
					if wait := time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))); wait > 0 {
						select {
						case <-time.After(wait):
						case <-ctx.Done():
						}
					}
				}
				if ctx.Err() != nil {
					break
				}
				sent := time.Now()
				payload := make([]byte, size) // the producer keeps it until sent
				stamp(payload, sent)
				wg.Add(1)
				p.SendAsync(cmd.Context(), &client.ProducerMessage{Payload: payload}, func(_ client.MessageID, _ *client.ProducerMessage, err error) {
					defer wg.Done()
					if err != nil {
						st.failed()
						return
					}
					st.record(size, time.Since(sent))
				})
			}
			p.Flush()
			wg.Wait()
			p.Close()
			stop()
			st.summary(cmd.OutOrStdout(), "produce")
			return nil
		},
	}
	produce.Flags().Float64Var(&rate, "rate", 100, "messages per second (0: as fast as possible)")
	produce.Flags().IntVar(&size, "size", 1024, "message size in bytes")
	produce.Flags().IntVarP(&count, "num-messages", "n", 0, "stop after this many messages (0: until interrupted)")
	produce.Flags().DurationVar(&batchDelay, "batch-delay", 10*time.Millisecond, "batching max publish delay")
	produce.Flags().IntVar(&maxPending, "max-pending", 1000, "messages in flight")
	produce.Flags().StringVar(&compression, "compression", "none", "none, lz4, zlib, zstd or snappy")
	produce.Flags().DurationVar(&duration, "time", 0, "stop after this long (0: no limit)")

	var (
		sub, subType string
		queue        int
		earliest     bool
	)
	consume := &cobra.Command{
		Use:   "consume TOPIC",
		Short: "Consume and acknowledge; report msg/s, MB/s and end-to-end latency (from the send time perf produce stamps in the payload, else the publish time)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if sub == "" {
				return errors.New("a subscription name is required: -s NAME")
			}
			typ, err := parseSubscriptionType(subType)
			if err != nil {
				return err
			}
			c, err := client.NewClient(client.ClientOptions{URL: url})
			if err != nil {
				return err
			}
			defer c.Close()
			opts := client.ConsumerOptions{Topic: args[0], SubscriptionName: sub, Type: typ, ReceiverQueueSize: queue}
			if earliest {
				opts.SubscriptionInitialPosition = client.SubscriptionPositionEarliest
			}
			cons, err := c.Subscribe(opts)
			if err != nil {
				return err
			}
			defer cons.Close()
			ctx := cmd.Context()
			if duration > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, duration)
				defer cancel()
			}
			st := newStats()
			stop := startProgress(ctx, cmd.OutOrStdout(), st, "consume")
			for n := 0; count == 0 || n < count; n++ {
				m, err := cons.Receive(ctx)
				if err != nil {
					break
				}
				sent, ok := stamped(m.Payload())
				if !ok {
					sent = m.PublishTime() // millisecond precision
				}
				st.record(len(m.Payload()), time.Since(sent))
				cons.Ack(m)
			}
			stop()
			st.summary(cmd.OutOrStdout(), "consume")
			return nil
		},
	}
	consume.Flags().StringVarP(&sub, "subscription-name", "s", "", "subscription name (required)")
	consume.Flags().StringVarP(&subType, "subscription-type", "t", "exclusive", "exclusive, failover, shared or key_shared")
	consume.Flags().IntVar(&queue, "receiver-queue-size", 1000, "messages fetched ahead per partition")
	consume.Flags().BoolVar(&earliest, "earliest", false, "a new subscription starts at the earliest message")
	consume.Flags().IntVarP(&count, "num-messages", "n", 0, "stop after this many messages (0: until interrupted)")
	consume.Flags().DurationVar(&duration, "time", 0, "stop after this long (0: no limit)")
	cmd.AddCommand(produce, consume)
	return cmd
}

// perfMagic starts a payload of 16 bytes or more sent by perf produce; the
// next 8 bytes are the send time (Unix nanoseconds, big endian), so that
// perf consume measures end-to-end latency precisely (producer and
// consumer on the same clock).
const perfMagic = "mgperf\x00\x01"

func stamp(payload []byte, t time.Time) {
	if len(payload) >= 16 {
		copy(payload, perfMagic)
		binary.BigEndian.PutUint64(payload[8:], uint64(t.UnixNano()))
	}
}

func stamped(payload []byte) (time.Time, bool) {
	if len(payload) < 16 || string(payload[:8]) != perfMagic {
		return time.Time{}, false
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(payload[8:]))), true
}

func parseCompression(s string) (client.CompressionType, error) {
	switch s {
	case "none", "":
		return client.NoCompression, nil
	case "lz4":
		return client.LZ4, nil
	case "zlib":
		return client.ZLib, nil
	case "zstd":
		return client.ZSTD, nil
	case "snappy":
		return client.Snappy, nil
	}
	return 0, fmt.Errorf("compression %q: want none, lz4, zlib, zstd or snappy", s)
}
