package main

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/internal/config"
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
	// reasons counts failed sends by error text, for the first maxReasons
	// distinct texts (order keeps them in order of appearance); otherErrs
	// counts the failures of any other text.
	reasons   map[string]int64
	order     []string
	otherErrs int64
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

// maxReasons bounds the distinct error texts a run keeps.
const maxReasons = 5

func (s *stats) failed(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs++
	reason := err.Error()
	switch _, ok := s.reasons[reason]; {
	case ok:
		s.reasons[reason]++
	case len(s.order) < maxReasons:
		if s.reasons == nil {
			s.reasons = map[string]int64{}
		}
		s.reasons[reason] = 1
		s.order = append(s.order, reason)
	default:
		s.otherErrs++
	}
}

// failures returns the number of failed sends; if there were any, it
// prints them by reason.
func (s *stats) failures(w io.Writer) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.errs == 0 {
		return 0
	}
	fmt.Fprintf(w, "%d sends failed:\n", s.errs)
	for _, r := range s.order {
		fmt.Fprintf(w, "  %8d  %s\n", s.reasons[r], r)
	}
	if s.otherErrs > 0 {
		fmt.Fprintf(w, "  %8d  (other reasons)\n", s.otherErrs)
	}
	return s.errs
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

// inflight bounds the sends in flight and times each one from the moment
// it is handed to the producer, once a slot is free, to its
// acknowledgement: the wait for a slot is queueing in perf, not latency.
type inflight struct {
	slots chan struct{}
	wg    sync.WaitGroup
}

func newInflight(n int) *inflight { return &inflight{slots: make(chan struct{}, n)} }

// send waits for a free slot, or returns ctx's error if ctx ends first.
// With a slot it takes the time and calls send, which hands the message
// over and must call done exactly once (from any goroutine) with the
// outcome; then record gets the time from hand-over to done, and the slot
// is freed.
func (f *inflight) send(ctx context.Context, send func(at time.Time, done func(error)), record func(latency time.Duration, err error)) error {
	select {
	case f.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	f.wg.Add(1)
	at := time.Now()
	send(at, func(err error) {
		record(time.Since(at), err)
		<-f.slots
		f.wg.Done()
	})
	return nil
}

// wait returns once every send has been recorded.
func (f *inflight) wait() { f.wg.Wait() }

// payloads makes perf produce's messages: random bytes, so that neither
// the producer's nor the storage's compression flatters the figures, or,
// if compressible, zeros. The first 16 bytes are for the send time (stamp).
type payloads struct {
	size int
	// random is generated once; each message is a slice of it at a random
	// offset, so that making payloads costs a copy.
	random []byte
	rng    *rand.Rand
	// free holds payloads given back (put) for next to reuse: a new one
	// per message would cost the producer's process the allocation and
	// collection of 70 MB/s at 70,000 msg/s of 1 KiB.
	free sync.Pool
}

// put gives back a payload that the producer no longer reads: one whose
// send was acknowledged (a failed one may still be being written).
func (p *payloads) put(b []byte) {
	if cap(b) == p.size {
		p.free.Put(&b)
	}
}

// paceSlack: perf produce sleeps only when it is this far ahead of its
// rate, not before each message.
const paceSlack = 100 * time.Microsecond

// randomPool is the size of the random buffer messages are cut from: large
// enough that messages batched together rarely overlap (which compression
// would find).
const randomPool = 8 << 20

func newPayloads(size int, compressible bool) *payloads {
	p := &payloads{size: size}
	if !compressible {
		var seed [32]byte
		crand.Read(seed[:])
		src := rand.NewChaCha8(seed)
		p.random = make([]byte, max(randomPool, 2*size))
		src.Read(p.random)
		p.rng = rand.New(src)
	}
	return p
}

// next returns a payload (the producer keeps it until it is sent);
// stamp it before sending.
func (p *payloads) next() []byte {
	var b []byte
	if f, ok := p.free.Get().(*[]byte); ok {
		b = *f
		clear(b[:min(16, len(b))]) // the stamp's place, as in a new one
	} else {
		b = make([]byte, p.size)
	}
	if p.random != nil {
		off := p.rng.IntN(len(p.random) - p.size + 1)
		copy(b, p.random[off:])
	}
	return b
}

// produceOptions turns perf produce's flags into producer options.
func produceOptions(topic string, batchDelay time.Duration, disableBatching bool, maxPending int, ct client.CompressionType) (client.ProducerOptions, error) {
	if batchDelay < 0 {
		return client.ProducerOptions{}, fmt.Errorf("--batch-delay %v: must not be negative", batchDelay)
	}
	if maxPending < 1 {
		return client.ProducerOptions{}, fmt.Errorf("--max-pending %d: must be at least 1", maxPending)
	}
	if batchDelay == 0 {
		// The SDK reads 0 as its default (10ms): ask for the shortest
		// wait instead, so that a batch holds only what arrives together.
		batchDelay = time.Microsecond
	}
	// perf bounds the messages in flight itself (all partitions together);
	// the SDK's bound (per partition) is never the one that waits.
	return client.ProducerOptions{Topic: topic, BatchingMaxPublishDelay: batchDelay, DisableBatching: disableBatching,
		MaxPendingMessages: maxPending, CompressionType: ct}, nil
}

func newPerfCmd(g *globals) *cobra.Command {
	var url string
	var af authFlags
	cmd := &cobra.Command{Use: "perf", Short: "Measure produce and consume throughput and latency, and the host's pauses",
		PersistentPreRunE: func(c *cobra.Command, _ []string) error {
			if err := config.ApplyToFlags(c.Flags(), g.config); err != nil {
				return err
			}
			if _, err := af.authentication(); err != nil {
				return err
			}
			return checkURL(url)
		}}
	cmd.PersistentFlags().StringVar(&url, "url", defaultURL, "cluster URL: magnetar://HOST:PORT (several brokers comma-separated)")
	af.register(cmd.PersistentFlags())

	var (
		rate            float64
		size, count     int
		batchDelay      time.Duration
		disableBatching bool
		maxPending      int
		compression     string
		payloadKind     string
		duration        time.Duration
	)
	produce := &cobra.Command{
		Use:   "produce TOPIC",
		Short: "Publish at a given rate; report msg/s, MB/s and send latency",
		Long: `Publish at a given rate; report msg/s, MB/s and send latency: from the moment
a message is handed to the producer (once fewer than --max-pending are in
flight) to its acknowledgement. Messages are paced to --rate within 100µs
(a few at a time at high rates). Exits non-zero if any send failed, after
printing the reasons.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if rate < 0 || size < 0 || count < 0 {
				return errors.New("--rate, --size and -n must not be negative")
			}
			ct, err := parseCompression(compression)
			if err != nil {
				return err
			}
			var compressible bool
			switch payloadKind {
			case "random":
			case "compressible":
				compressible = true
			default:
				return fmt.Errorf("--payload %q: want random or compressible", payloadKind)
			}
			opts, err := produceOptions(args[0], batchDelay, disableBatching, maxPending, ct)
			if err != nil {
				return err
			}
			c, err := newCLIClient(url, &af)
			if err != nil {
				return err
			}
			defer c.Close()
			p, err := c.CreateProducer(opts)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if duration > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, duration)
				defer cancel()
			}
			// Sends in flight when the run ends (or is interrupted) are
			// waited for, up to the producer's send timeout.
			sendCtx := context.WithoutCancel(cmd.Context())
			pl := newPayloads(size, compressible)
			st := newStats()
			stop := startProgress(ctx, cmd.OutOrStdout(), st, "produce")
			fl := newInflight(maxPending)
			record := func(latency time.Duration, err error) {
				if err != nil {
					st.failed(err)
					return
				}
				st.record(size, latency)
			}
			start := time.Now()
			pace := time.NewTimer(0)
			defer pace.Stop()
			<-pace.C
			for i := 0; count == 0 || i < count; i++ {
				if rate > 0 { // pace: message i is due at start + i/rate
					// Sleeping only once ahead by paceSlack costs one wake-up
					// per few messages at high rates instead of one each.
					if wait := time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))); wait > paceSlack {
						pace.Reset(wait)
						select {
						case <-pace.C:
						case <-ctx.Done():
						}
					}
				}
				if ctx.Err() != nil {
					break
				}
				payload := pl.next()
				err := fl.send(ctx, func(at time.Time, done func(error)) {
					stamp(payload, at)
					p.SendAsync(sendCtx, &client.ProducerMessage{Payload: payload}, func(_ client.MessageID, _ *client.ProducerMessage, err error) {
						if err == nil {
							pl.put(payload) // acknowledged: the producer is done with it
						}
						done(err)
					})
				}, record)
				if err != nil {
					break
				}
			}
			p.Flush()
			fl.wait()
			p.Close()
			stop()
			out := cmd.OutOrStdout()
			failed := st.failures(out)
			st.summary(out, "produce")
			if failed > 0 {
				return fmt.Errorf("perf produce: %d sends failed", failed)
			}
			return nil
		},
	}
	produce.Flags().Float64Var(&rate, "rate", 100, "messages per second (0: as fast as possible)")
	produce.Flags().IntVar(&size, "size", 1024, "message size in bytes")
	produce.Flags().IntVarP(&count, "num-messages", "n", 0, "stop after this many messages (0: until interrupted)")
	produce.Flags().DurationVar(&batchDelay, "batch-delay", 10*time.Millisecond, "how long a batch waits for more messages (0: no wait, a batch holds only the messages that arrive together; see --disable-batching)")
	produce.Flags().BoolVar(&disableBatching, "disable-batching", false, "send every message as an entry of its own")
	produce.Flags().IntVar(&maxPending, "max-pending", 1000, "messages in flight, all partitions together (latency is counted from when a message gets a slot)")
	produce.Flags().StringVar(&compression, "compression", "none", "none, lz4, zlib, zstd or snappy")
	produce.Flags().StringVar(&payloadKind, "payload", "random", "random (incompressible) or compressible (zeros) message bytes, after a 16-byte send-time stamp")
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
			c, err := newCLIClient(url, &af)
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
	cmd.AddCommand(produce, consume, newPerfPausesCmd())
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
