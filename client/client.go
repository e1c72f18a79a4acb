package client

import (
	"context"
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/magnetar-io/magnetar/proto/brokerpb"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// ClientOptions configure a Client.
type ClientOptions struct {
	// URL of the cluster: "magnetar://host:port", several brokers
	// comma-separated ("magnetar://h1:6650,h2:6650"). Required.
	URL string
	// OperationTimeout bounds lookups, subscriptions and producer
	// creation. Default 30s.
	OperationTimeout time.Duration
	// MaxMessageSize is the largest message the client sends. Default
	// 5 MiB, the broker's default.
	MaxMessageSize int
}

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
	// lookupFrom is the broker lookups start with (after one that failed).
	lookupFrom atomic.Int32

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
	if !ok {
		if opts.URL == "" {
			return nil, fmt.Errorf("%w: URL is required (magnetar://host:port)", ErrInvalidOptions)
		}
		return nil, fmt.Errorf("%w: URL %q must start with magnetar://", ErrInvalidOptions, opts.URL)
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
	if opts.MaxMessageSize == 0 {
		opts.MaxMessageSize = 5 << 20
	}
	if opts.MaxMessageSize < 0 {
		return nil, fmt.Errorf("%w: negative max message size", ErrInvalidOptions)
	}
	c := &client{opts: opts, brokers: brokers}
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
		maxMsg := c.opts.MaxMessageSize + 1<<20
		var err error
		cc, err = grpc.NewClient(addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsg), grpc.MaxCallSendMsgSize(maxMsg)),
			// A broker that stops answering (paused, cut off) is noticed
			// within about 8 s (the broker permits pings every 5 s).
			grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 5 * time.Second, Timeout: 3 * time.Second}),
			grpc.WithWriteBufferSize(256<<10), grpc.WithReadBufferSize(256<<10),
			grpc.WithInitialWindowSize(4<<20), grpc.WithInitialConnWindowSize(8<<20),
		)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		c.mu.conns[addr] = cc
	}
	return brokerpb.NewBrokerClient(cc), nil
}

// lookup finds the broker serving a topic: any broker of the URL answers
// (trying them in turn).
// reconnectTimeout bounds one reconnection attempt (lookup, stream open,
// the broker's answer): a stalled broker is given up for the next attempt,
// which looks the partition up again.
const reconnectTimeout = 5 * time.Second

// lookupAttemptTimeout bounds one broker's answer to a lookup (which may
// include claiming the partition and recovering its ledger).
const lookupAttemptTimeout = 5 * time.Second

func (c *client) lookup(ctx context.Context, topic string) (brokerpb.BrokerClient, error) {
	var lastErr error
	// Start after the broker that last failed to answer, so that a dead
	// or stalled one is asked last.
	first := int(c.lookupFrom.Load())
	for i := range c.brokers {
		idx := (first + i) % len(c.brokers)
		b := c.brokers[idx]
		bc, err := c.conn(b)
		if err != nil {
			return nil, err
		}
		// Bounded per broker: a stalled one must not hold up the others.
		lctx, cancel := context.WithTimeout(ctx, lookupAttemptTimeout)
		resp, err := bc.Lookup(lctx, &brokerpb.LookupRequest{Topic: topic})
		cancel()
		if err != nil {
			lastErr = fromStatus(err)
			if !retriable(lastErr) {
				return nil, lastErr
			}
			c.lookupFrom.Store(int32((idx + 1) % len(c.brokers)))
			continue
		}
		return c.conn(resp.BrokerAddress)
	}
	return nil, lastErr
}

// partitions returns the topic's partition names and their count (0 for
// a non-partitioned topic, whose only "partition" is itself).
func (c *client) partitions(ctx context.Context, topic string) ([]string, int, error) {
	n, err := topicname.Parse(topic)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %v", ErrInvalidTopicName, err)
	}
	var lastErr error
	for _, b := range c.brokers {
		bc, err := c.conn(b)
		if err != nil {
			return nil, 0, err
		}
		resp, err := bc.PartitionedMetadata(ctx, &brokerpb.PartitionedMetadataRequest{Topic: n.String()})
		if err != nil {
			lastErr = fromStatus(err)
			if !retriable(lastErr) {
				return nil, 0, lastErr
			}
			continue
		}
		if resp.Partitions == 0 {
			return []string{n.String()}, 0, nil
		}
		names := make([]string, resp.Partitions)
		for i := range names {
			names[i] = n.Partition(i).String()
		}
		return names, int(resp.Partitions), nil
	}
	return nil, 0, lastErr
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
	for _, x := range closers {
		x.Close()
	}
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
