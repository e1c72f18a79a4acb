package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	mathrand "math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/magnetar-io/magnetar/proto/brokerpb"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// ClientOptions configure a Client.
type ClientOptions struct {
	// URL of the cluster: "magnetar://host:port", several brokers
	// comma-separated ("magnetar://h1:6650,h2:6650"). Calls that any
	// broker can answer (partitioned metadata, lookups) try each in turn,
	// then all again with backoff, until OperationTimeout.
	URL string
	// OperationTimeout bounds lookups, subscriptions and producer
	// creation, retries included. Default 30s.
	OperationTimeout time.Duration
	// MaxMessageSize caps the messages a producer sends, in bytes. Default
	// (0): the broker's limit, which it tells each producer when it
	// connects (5 MiB unless the broker is configured otherwise), as a
	// Pulsar client learns it from CONNECTED. A larger value has no effect:
	// the broker's limit applies. A message over the limit fails at once
	// with ErrMessageTooLarge.
	MaxMessageSize int

	// Authentication, if set, presents credentials to the brokers: a
	// token (NewAuthenticationToken, NewAuthenticationTokenFromFile) or a
	// client certificate (NewAuthenticationTLS, with TLS).
	Authentication Authentication

	// TLS, with a magnetar+ssl:// URL: the brokers' certificates must be
	// signed by the authorities in TLSTrustCertsFilePath (PEM; default:
	// the system's) and name the host dialed.
	// TLSAllowInsecureConnection skips that check (tests only: anyone on
	// the path can then read and change the traffic).
	TLSTrustCertsFilePath      string
	TLSAllowInsecureConnection bool

	// MetricsRegisterer, if set, gets the client's Prometheus collectors,
	// pulsar-client-go's pulsar_client_* (messages and bytes published and
	// received, publish latency, pending sends, errors, acks, nacks,
	// producers, consumers and readers opened and closed, lookups).
	// Clients registering on one Registerer share them. Unlike
	// pulsar-client-go, nothing is registered by default: pass
	// prometheus.DefaultRegisterer for that.
	MetricsRegisterer prometheus.Registerer
	// MetricsCardinality: which labels the series carry (tenant,
	// namespace, topic). Default MetricsCardinalityNamespace.
	MetricsCardinality MetricsCardinality
	// CustomMetricsLabels are added to every series (beside client="go").
	CustomMetricsLabels map[string]string

	// Logger hears what the client cannot return to a caller: entries a
	// consumer could not read and dropped, or left unacknowledged.
	// Default: slog.Default().
	Logger *slog.Logger
}

// logger is the Logger of the options, or slog's default at the time.
func (c *client) logger() *slog.Logger {
	if c.opts.Logger != nil {
		return c.opts.Logger
	}
	return slog.Default()
}

// maxBrokerMessageSize is the largest limit a broker may have (its
// configuration refuses more): the gRPC limits of the client's connections
// allow it, whatever the client's MaxMessageSize.
const maxBrokerMessageSize = 64 << 20

// defaultMaxMessageSize is the limit assumed until a broker says, and with
// brokers that do not.
const defaultMaxMessageSize = 5 << 20

// Client is a connection to a Magnetar cluster.
type Client interface {
	CreateProducer(ProducerOptions) (Producer, error)
	Subscribe(ConsumerOptions) (Consumer, error)
	CreateReader(ReaderOptions) (Reader, error)
	// TopicPartitions lists a topic's partitions (the topic itself when it
	// is not partitioned).
	TopicPartitions(topic string) ([]string, error)
	Close()
}

type client struct {
	opts    ClientOptions
	brokers []string
	metrics *metrics    // nil without MetricsRegisterer
	tls     *tls.Config // nil: plaintext (magnetar://)
	// lookupFrom is the broker calls to any broker start with (the one
	// after the last that failed).
	lookupFrom atomic.Int32
	// onBrokerFailed, if set (tests), hears of every failed attempt
	// (addr empty: a connection attempt).
	onBrokerFailed func(addr string, err error)

	mu struct {
		sync.Mutex
		conns   map[string]*grpc.ClientConn
		closed  bool
		closers map[closer]struct{}
	}
}

type closer interface{ Close() }

// NewClient checks the options and returns a client; connections are made
// when first needed.
func NewClient(opts ClientOptions) (Client, error) {
	rest, ok := strings.CutPrefix(opts.URL, "magnetar://")
	var tlsConf *tls.Config
	if !ok {
		if rest, ok = strings.CutPrefix(opts.URL, "magnetar+ssl://"); ok {
			var err error
			if tlsConf, err = opts.tlsConfig(); err != nil {
				return nil, err
			}
		}
	}
	if !ok {
		if opts.URL == "" {
			return nil, fmt.Errorf("%w: URL is required (magnetar://host:port)", ErrInvalidOptions)
		}
		return nil, fmt.Errorf("%w: URL %q must start with magnetar:// or magnetar+ssl://", ErrInvalidOptions, opts.URL)
	}
	if _, isTLS := opts.Authentication.(tlsAuth); isTLS && tlsConf == nil {
		return nil, fmt.Errorf("%w: a client certificate (NewAuthenticationTLS) needs a magnetar+ssl:// URL", ErrInvalidOptions)
	}
	var brokers []string
	for _, h := range strings.Split(strings.TrimSuffix(rest, "/"), ",") {
		if _, _, err := net.SplitHostPort(h); err != nil {
			return nil, fmt.Errorf("%w: URL %q: broker %q: %v", ErrInvalidOptions, opts.URL, h, err)
		}
		brokers = append(brokers, h)
	}
	if opts.OperationTimeout == 0 {
		opts.OperationTimeout = 30 * time.Second
	}
	if opts.OperationTimeout < 0 {
		return nil, fmt.Errorf("%w: negative operation timeout", ErrInvalidOptions)
	}
	if opts.MaxMessageSize < 0 {
		return nil, fmt.Errorf("%w: negative max message size", ErrInvalidOptions)
	}
	if opts.MetricsCardinality < 0 || opts.MetricsCardinality > MetricsCardinalityTopic {
		return nil, fmt.Errorf("%w: metrics cardinality %d", ErrInvalidOptions, opts.MetricsCardinality)
	}
	m, err := newMetrics(opts)
	if err != nil {
		return nil, err
	}
	c := &client{opts: opts, brokers: brokers, metrics: m, tls: tlsConf}
	c.mu.conns = map[string]*grpc.ClientConn{}
	c.mu.closers = map[closer]struct{}{}
	return c, nil
}

// conn returns the shared connection to a broker address.
func (c *client) conn(addr string) (brokerpb.BrokerClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return nil, ErrClosed
	}
	cc := c.mu.conns[addr]
	if cc == nil {
		maxMsg := max(c.opts.MaxMessageSize, maxBrokerMessageSize) + 1<<20
		var err error
		// No stats handler or interceptor that reads messages after Send
		// returns: the producer reuses a batch's buffer once its Send has
		// returned (batchbuf.go).
		opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		if c.tls != nil {
			opts[0] = grpc.WithTransportCredentials(credentials.NewTLS(c.tls))
		}
		if _, isTLS := c.opts.Authentication.(tlsAuth); c.opts.Authentication != nil && !isTLS {
			opts = append(opts, grpc.WithPerRPCCredentials(perRPC{c.opts.Authentication}))
		}
		opts = append(opts, testDialOptions...)
		cc, err = grpc.NewClient(addr, append(opts,
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsg), grpc.MaxCallSendMsgSize(maxMsg)),
			// A broker that stops answering (paused, cut off) is noticed
			// within about 8 s (the broker permits pings every 5 s).
			grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 5 * time.Second, Timeout: 3 * time.Second}),
			grpc.WithWriteBufferSize(256<<10), grpc.WithReadBufferSize(256<<10),
			grpc.WithInitialWindowSize(4<<20), grpc.WithInitialConnWindowSize(8<<20),
		)...)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		c.mu.conns[addr] = cc
	}
	return brokerpb.NewBrokerClient(cc), nil
}

// testDialOptions, set by tests, are added to every connection's options
// (an interceptor that holds a send, say). As for any option: nothing in
// them may read a message after Send returns (see the dial options).
var testDialOptions []grpc.DialOption

// reconnectTimeout bounds one connection attempt (lookup, stream open,
// the broker's answer): a stalled broker is given up for the next
// attempt, which looks the partition up again.
const reconnectTimeout = 5 * time.Second

// brokerAttemptTimeout bounds one broker's answer to a call any broker can
// answer (partitioned metadata; a lookup, which may include claiming the
// partition and recovering its ledger): a stalled broker does not hold up
// the others.
const brokerAttemptTimeout = 5 * time.Second

// anyBroker calls fn on the brokers of the URL in turn, starting with the
// one after the broker that last failed, until one answers. An answer is
// a success or an error no other broker would cure (the topic does not
// exist, say). When every broker failed for a reason that may pass (not
// reachable, stalled, not ready) it tries them all again, with backoff,
// until ctx ends, and then returns the last failure.
func (c *client) anyBroker(ctx context.Context, fn func(ctx context.Context, bc brokerpb.BrokerClient) error) error {
	var bo backoff
	var lastErr error
	for {
		first := int(c.lookupFrom.Load())
		for i := range c.brokers {
			idx := (first + i) % len(c.brokers)
			addr := c.brokers[idx]
			bc, err := c.conn(addr)
			if err != nil {
				return err
			}
			actx, cancel := context.WithTimeout(ctx, brokerAttemptTimeout)
			err = fromStatus(fn(actx, bc))
			cancel()
			if err == nil || !retriable(err) {
				return err
			}
			lastErr = fmt.Errorf("broker %s: %w", addr, err)
			if c.onBrokerFailed != nil {
				c.onBrokerFailed(addr, err)
			}
			c.lookupFrom.Store(int32((idx + 1) % len(c.brokers)))
			if ctx.Err() != nil {
				return lastErr
			}
		}
		select {
		case <-time.After(bo.next()):
		case <-ctx.Done():
			return lastErr
		}
	}
}

// lookup finds the broker serving a topic; any broker of the URL answers.
func (c *client) lookup(ctx context.Context, topic string) (brokerpb.BrokerClient, error) {
	var addr string
	err := c.anyBroker(ctx, func(ctx context.Context, bc brokerpb.BrokerClient) error {
		if c.metrics != nil {
			c.metrics.lookups.Inc()
		}
		resp, err := bc.Lookup(ctx, &brokerpb.LookupRequest{Topic: topic})
		if err != nil {
			return err
		}
		addr = resp.BrokerAddress
		return nil
	})
	if err != nil {
		return nil, err
	}
	return c.conn(addr)
}

// retryConnect makes a producer's, consumer's or reader's first
// connection: attempt is tried until it succeeds or fails for a reason a
// retry cannot cure, each attempt bounded by reconnectTimeout and spaced
// by backoff, until ctx (the operation timeout) ends. The partition's
// owner may be a broker that just died (its ownership lasts until its
// lease expires, then another broker takes the partition) or one not up
// yet.
//
// A name found busy after an attempt that failed on the way (timed out,
// cut) is tried again too: the broker may still hold the producer or
// consumer that attempt registered, until it notices the stream gone.
func (c *client) retryConnect(ctx context.Context, attempt func(ctx context.Context) error) error {
	var bo backoff
	leftBehind := false
	for {
		actx, cancel := context.WithTimeout(ctx, reconnectTimeout)
		err := attempt(actx)
		cancel()
		if err == nil {
			return nil
		}
		busy := errors.Is(err, ErrProducerBusy) || errors.Is(err, ErrConsumerBusy)
		if !retriable(err) && !(busy && leftBehind) {
			return err
		}
		leftBehind = leftBehind || retriable(err)
		if c.onBrokerFailed != nil {
			c.onBrokerFailed("", err)
		}
		select {
		case <-time.After(bo.next()):
		case <-ctx.Done():
			return fmt.Errorf("%w (still failing when the operation timeout of %v ended)", err, c.opts.OperationTimeout)
		}
	}
}

// partitions returns the topic's partition names and their count (0 for
// a non-partitioned topic, whose only "partition" is itself).
func (c *client) partitions(ctx context.Context, topic string) ([]string, int, error) {
	n, err := topicname.Parse(topic)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %v", ErrInvalidTopicName, err)
	}
	var count int
	err = c.anyBroker(ctx, func(ctx context.Context, bc brokerpb.BrokerClient) error {
		resp, err := bc.PartitionedMetadata(ctx, &brokerpb.PartitionedMetadataRequest{Topic: n.String()})
		if err != nil {
			return err
		}
		count = int(resp.Partitions)
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	if count == 0 {
		return []string{n.String()}, 0, nil
	}
	names := make([]string, count)
	for i := range names {
		names[i] = n.Partition(i).String()
	}
	return names, count, nil
}

func (c *client) TopicPartitions(topic string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.OperationTimeout)
	defer cancel()
	names, _, err := c.partitions(ctx, topic)
	return names, err
}

func (c *client) register(x closer) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return ErrClosed
	}
	c.mu.closers[x] = struct{}{}
	return nil
}

func (c *client) unregister(x closer) {
	c.mu.Lock()
	delete(c.mu.closers, x)
	c.mu.Unlock()
}

// Close closes every producer, consumer and reader, then the connections.
func (c *client) Close() {
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return
	}
	closers := make([]closer, 0, len(c.mu.closers))
	for x := range c.mu.closers {
		closers = append(closers, x)
	}
	c.mu.Unlock()
	// At once: each may wait for its broker (a producer's Close, up to
	// the operation timeout if the broker does not answer).
	var wg sync.WaitGroup
	for _, x := range closers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x.Close()
		}()
	}
	wg.Wait()
	c.mu.Lock()
	c.mu.closed = true
	conns := c.mu.conns
	c.mu.conns = map[string]*grpc.ClientConn{}
	c.mu.Unlock()
	for _, cc := range conns {
		cc.Close()
	}
}

// backoff grows a reconnection delay.
// backoff spaces reconnection attempts: 100 ms doubling up to 1 s, with
// ±20% jitter so that the clients of a failed broker do not all come back
// at once. The cap is low because a partition whose owner died is taken
// over as soon as the owner's lease expires: a client should find out
// within a second.
type backoff struct{ d time.Duration }

func (b *backoff) next() time.Duration {
	if b.d == 0 {
		b.d = 100 * time.Millisecond
	} else {
		b.d = min(2*b.d, time.Second)
	}
	return time.Duration(float64(b.d) * (0.8 + 0.4*mathrand.Float64()))
}

func (b *backoff) reset() { b.d = 0 }
