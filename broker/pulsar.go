package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/admin"
	"github.com/magnetar-io/magnetar/broker/internal/mledger"
	"github.com/magnetar-io/magnetar/broker/internal/naming"
	"github.com/magnetar-io/magnetar/broker/internal/pulsarwire"
	"github.com/magnetar-io/magnetar/internal/auth"
	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/brokerpb"
	"github.com/magnetar-io/magnetar/proto/entry"
	"github.com/magnetar-io/magnetar/proto/pulsarpb"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// Pulsar's binary protocol, served on the client port next to gRPC
// (internal/connmux tells them apart by the first byte) so that Pulsar's
// own clients connect to a broker as they would to Pulsar's. A connection
// is a pulsarConn: its reader (serve) takes one frame at a time, in order;
// answers go through its writer. Producers are the broker's own producer
// (the gRPC stream's): publish, deduplication, failure and unload behave
// as for the SDK.

const (
	// pulsarProtocolVersion is the highest protocol version served:
	// Pulsar's v19 (v20 adds topic migration, which Magnetar never sends).
	pulsarProtocolVersion = 19
	// pulsarKeepAlive: the broker pings an idle connection this often and
	// closes one silent for three times as long.
	pulsarKeepAlive = 30 * time.Second
	// pulsarConnectTimeout bounds the wait for CONNECT.
	pulsarConnectTimeout = 10 * time.Second
	// pulsarMaxInflight bounds a connection's sends being stored, and a
	// producer's sends whose answers its pump has not handed to the writer
	// yet (producer.slots): past either the reader stops reading (TCP
	// pushes back on the client).
	pulsarMaxInflight = 10000
	// pulsarMaxAsync bounds a connection's requests served off its reader
	// (lookups, topic loads for PRODUCER and SUBSCRIBE, schemas): past it
	// the reader waits for one to end.
	pulsarMaxAsync = 64
	// pulsarFrameOverhead is what a frame may carry beyond a message of
	// the maximum size: its command and the message's metadata.
	pulsarFrameOverhead = 1 << 20
	// pulsarMaxConnectFrame bounds the first frame (CONNECT).
	pulsarMaxConnectFrame = 64 << 10
	// noRequestID is the request id of a command the broker starts
	// (Pulsar's -1).
	noRequestID = math.MaxUint64
)

// servePulsar serves the connections of ln until it is closed.
func (s *Server) servePulsar(ln net.Listener) {
	backoff := 5 * time.Millisecond
	for {
		c, err := ln.Accept()
		if err != nil {
			if t, ok := err.(interface{ Temporary() bool }); ok && t.Temporary() && !errors.Is(err, net.ErrClosed) {
				time.Sleep(backoff) // out of descriptors and the like
				backoff = min(2*backoff, time.Second)
				continue
			}
			return
		}
		backoff = 5 * time.Millisecond
		pc := newPulsarConn(s, c)
		s.pulsar.Lock()
		if s.pulsar.closed {
			s.pulsar.Unlock()
			c.Close()
			continue
		}
		s.pulsar.conns[pc] = struct{}{}
		s.pulsar.wg.Add(1)
		s.pulsar.Unlock()
		go func() {
			defer s.pulsar.wg.Done()
			pc.serve()
			s.pulsar.Lock()
			delete(s.pulsar.conns, pc)
			s.pulsar.Unlock()
		}()
	}
}

// closePulsarConns closes every Pulsar connection and waits for their
// goroutines; new ones are refused. The broker's shutdown calls it once
// its topics are closed (their producers told to go elsewhere).
func (s *Server) closePulsarConns() {
	if s.pulsarLn != nil {
		s.pulsarLn.Close()
	}
	s.pulsar.Lock()
	s.pulsar.closed = true
	conns := make([]*pulsarConn, 0, len(s.pulsar.conns))
	for pc := range s.pulsar.conns {
		conns = append(conns, pc)
	}
	s.pulsar.Unlock()
	for _, pc := range conns {
		pc.close()
	}
	s.pulsar.wg.Wait()
}

// pulsarConn is one client connection of Pulsar's protocol.
//
// Goroutines: serve (the reader), the writer, and one per producer
// turning its answers into frames; close ends them all, and serve waits
// for the others before it returns.
type pulsarConn struct {
	s    *Server
	conn net.Conn
	log  *zap.Logger
	// ctx carries the caller's role once CONNECT is authenticated (set by
	// serve before any other goroutine reads it) and ends with the
	// connection; dying is its Done, for the writer.
	ctx    context.Context
	cancel context.CancelFunc
	dying  <-chan struct{}
	// inflight holds a slot per send being stored.
	inflight chan struct{}
	// async holds a slot per request served off the reader (goAsync).
	async chan struct{}
	// wg: the writer, the producers' and consumers' pumps, refreshAuth,
	// and the requests served off the reader.
	wg sync.WaitGroup

	// out is what the writer sends next; signal wakes it.
	out struct {
		sync.Mutex
		buf     []byte
		closed  bool
		writing bool // the writer holds frames taken from buf, not all written yet
		// written, made by a waiter, is closed by the writer when a
		// write completes (waitWritable, flush).
		written chan struct{}
	}
	signal chan struct{}
	// refreshed carries the expiry of the token of an accepted
	// AUTH_RESPONSE, from the reader to refreshAuth (the latest only).
	refreshed chan time.Time
	// authRefresh: the client said it answers AUTH_CHALLENGE (set by
	// serve at CONNECT, before any other goroutine reads it).
	authRefresh bool
	// clientVersion is the client's, from CONNECT (set likewise).
	clientVersion string

	mu struct {
		sync.Mutex
		producers map[uint64]*pulsarProducer
		consumers map[uint64]*pulsarConsumer
		// producerQueue and consumerQueue hold, per id, a channel closed
		// when the last request queued for the id has been served (see
		// inOrder).
		producerQueue, consumerQueue map[uint64]chan struct{}
		// waitingExclusive holds, per producer id waiting for exclusive
		// access, the channel a CLOSE_PRODUCER closes to give up the wait
		// (the CLOSE is queued behind the wait, see inOrder).
		waitingExclusive map[uint64]chan struct{}
		// closedProducers are the ids of producers the broker closed
		// (CLOSE_PRODUCER) and the client has not created again: their
		// SENDs, written before the client read the CLOSE_PRODUCER, are
		// dropped (the client sends them again once it has the producer
		// back), as Pulsar drops them. At most maxClosedProducers (then an
		// arbitrary one is forgotten for a new one).
		closedProducers map[uint64]struct{}
		// seekClosed are the consumers a seek closed (CLOSE_CONSUMER) and
		// the client has not subscribed again, or closed. A SEEK for one,
		// sent before the client handled the CLOSE_CONSUMER, is applied to
		// its subscription and answered, where Pulsar refuses it
		// ("Consumer not found"): pulsar-client-go's reader created at the
		// latest message inclusive seeks once while it is created, and a
		// Seek of the application's right after races the client's own
		// subscribing again (the client then subscribes again from where
		// it sought), if nothing came between (subscription.seekIdle). A
		// SUBSCRIBE or CLOSE_CONSUMER of the id forgets it. At most
		// maxClosedProducers, likewise.
		seekClosed map[uint64]seekClosedSub
	}
}

// seekClosedSub is the subscription of a consumer a seek closed.
type seekClosedSub struct {
	t   *topic
	sub *subscription
}

// maxClosedProducers bounds a connection's closedProducers.
const maxClosedProducers = 4096

// pulsarProducer is a producer of the connection.
type pulsarProducer struct {
	id uint64
	p  *producer
	t  *topic
	// pending counts its sends being stored; a client's CLOSE_PRODUCER
	// is answered once they are (closeRequest, for the pump).
	pending      pendingSends
	closeRequest atomic.Pointer[uint64]
	// schemaVersion is the version of the producer's schema (nil: none).
	schemaVersion []byte
}

// pendingSends counts a producer's sends being stored; wait returns once
// none is. (Not a WaitGroup: sends may start while another goroutine
// waits.)
type pendingSends struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0; nil while no one waits
}

func (p *pendingSends) add() {
	p.mu.Lock()
	p.n++
	p.mu.Unlock()
}

func (p *pendingSends) done() {
	p.mu.Lock()
	p.n--
	if p.n == 0 && p.idle != nil {
		close(p.idle)
		p.idle = nil
	}
	p.mu.Unlock()
}

func (p *pendingSends) wait() {
	p.mu.Lock()
	if p.n == 0 {
		p.mu.Unlock()
		return
	}
	if p.idle == nil {
		p.idle = make(chan struct{})
	}
	ch := p.idle
	p.mu.Unlock()
	<-ch
}

func newPulsarConn(s *Server, c net.Conn) *pulsarConn {
	pc := &pulsarConn{s: s, conn: c, log: s.log.With(zap.String("pulsar-client", c.RemoteAddr().String())),
		inflight: make(chan struct{}, pulsarMaxInflight), async: make(chan struct{}, pulsarMaxAsync),
		signal: make(chan struct{}, 1), refreshed: make(chan time.Time, 1)}
	pc.ctx, pc.cancel = context.WithCancel(s.hardCtx)
	pc.dying = pc.ctx.Done()
	pc.mu.producers = map[uint64]*pulsarProducer{}
	pc.mu.consumers = map[uint64]*pulsarConsumer{}
	pc.mu.producerQueue = map[uint64]chan struct{}{}
	pc.mu.consumerQueue = map[uint64]chan struct{}{}
	pc.mu.waitingExclusive = map[uint64]chan struct{}{}
	pc.mu.closedProducers = map[uint64]struct{}{}
	pc.mu.seekClosed = map[uint64]seekClosedSub{}
	return pc
}

// goAsync serves a request off the reader, so that a slow one (a topic
// whose load recovers a ledger, a lookup waiting for an owner) does not
// hold up the connection's other producers and consumers. Called by the
// reader only; it waits while pulsarMaxAsync are running.
func (pc *pulsarConn) goAsync(f func()) {
	select {
	case pc.async <- struct{}{}:
	case <-pc.dying:
		return
	}
	pc.wg.Add(1)
	go func() {
		defer pc.wg.Done()
		defer func() { <-pc.async }()
		f()
	}()
}

// inOrder runs f, a request for one producer's (or consumer's) id, after
// the requests for that id read before it: off the reader when async (or
// when an earlier one is still running), else on it. A CLOSE that follows
// a slow PRODUCER closes what the open made; a PRODUCER retried after its
// CLOSE opens again after it. queue is pc.mu.producerQueue or
// pc.mu.consumerQueue. Called by the reader only.
func (pc *pulsarConn) inOrder(queue map[uint64]chan struct{}, id uint64, async bool, f func()) {
	pc.mu.Lock()
	prev := queue[id]
	if prev == nil && !async {
		pc.mu.Unlock()
		f()
		return
	}
	mine := make(chan struct{})
	queue[id] = mine
	pc.mu.Unlock()
	pc.goAsync(func() {
		defer func() {
			pc.mu.Lock()
			if queue[id] == mine {
				delete(queue, id)
			}
			pc.mu.Unlock()
			close(mine)
		}()
		if prev != nil {
			select {
			case <-prev:
			case <-pc.dying:
				return
			}
		}
		f()
	})
}

// close ends the connection (safe to call more than once).
func (pc *pulsarConn) close() {
	pc.cancel()
	pc.conn.Close()
	pc.out.Lock()
	pc.out.closed = true
	pc.out.Unlock()
	pc.wake()
}

func (pc *pulsarConn) wake() {
	select {
	case pc.signal <- struct{}{}:
	default:
	}
}

// send queues a frame for the writer.
func (pc *pulsarConn) send(cmd *pulsarpb.BaseCommand, payload []byte) {
	pc.out.Lock()
	if !pc.out.closed {
		var err error
		if pc.out.buf, err = pulsarwire.Append(pc.out.buf, cmd, payload); err != nil {
			pc.log.Error("a frame could not be encoded", zap.Stringer("type", cmd.GetType()), zap.Error(err))
		}
	}
	pc.out.Unlock()
	pc.wake()
}

// sendReceipt queues a SEND_RECEIPT for the writer, as send does, without
// building the command (one per message stored).
func (pc *pulsarConn) sendReceipt(r pulsarwire.Receipt) {
	pc.out.Lock()
	if !pc.out.closed {
		pc.out.buf = pulsarwire.AppendReceipt(pc.out.buf, r)
	}
	pc.out.Unlock()
	pc.wake()
}

// writer sends the queued frames, and a PING when the connection is idle.
func (pc *pulsarConn) writer() {
	defer pc.wg.Done()
	defer pc.wroteAll() // nothing more will be written: no one waits for it
	ping := time.NewTicker(pulsarKeepAlive)
	defer ping.Stop()
	var buf []byte
	for {
		select {
		case <-pc.signal:
		case <-ping.C:
			pc.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PING.Enum(), Ping: &pulsarpb.CommandPing{}}, nil)
			continue
		case <-pc.dying:
			return
		}
		pc.out.Lock()
		buf, pc.out.buf = pc.out.buf, buf[:0]
		closed := pc.out.closed
		pc.out.writing = len(buf) > 0
		pc.out.Unlock()
		if closed {
			return
		}
		if len(buf) == 0 {
			continue
		}
		pc.conn.SetWriteDeadline(time.Now().Add(3 * pulsarKeepAlive))
		if _, err := pc.conn.Write(buf); err != nil {
			pc.close()
			return
		}
		pc.wroteAll()
	}
}

// wroteAll records that the writer holds nothing unwritten, and wakes
// whoever waits for a write to complete.
func (pc *pulsarConn) wroteAll() {
	pc.out.Lock()
	pc.out.writing = false
	if pc.out.written != nil {
		close(pc.out.written)
		pc.out.written = nil
	}
	pc.out.Unlock()
}

// pulsarWriteHighWater bounds what a connection queues for its writer
// while the client does not read: the reader and the consumers' pumps
// wait above it (waitWritable), and with consumer.maxOutstanding a client
// granting huge FLOW permits and not reading costs the broker a bounded
// amount, not the backlog.
const pulsarWriteHighWater = 4 << 20

// waitWritable returns once less than pulsarWriteHighWater is queued
// for the writer, true; false if the connection ended first.
func (pc *pulsarConn) waitWritable() bool {
	return pc.waitOut(pc.writableLocked, nil)
}

// writableLocked reports whether less than the high-water mark is queued;
// out must be locked.
func (pc *pulsarConn) writableLocked() bool { return len(pc.out.buf) < pulsarWriteHighWater }

// waitOut waits until done (called with out locked) holds, rechecking it
// after each completed write; false if the connection ended (or timeout,
// if not nil, fired) first.
func (pc *pulsarConn) waitOut(done func() bool, timeout <-chan time.Time) bool {
	for {
		pc.out.Lock()
		if done() {
			pc.out.Unlock()
			return true
		}
		if pc.out.closed {
			pc.out.Unlock()
			return false
		}
		if pc.out.written == nil {
			pc.out.written = make(chan struct{})
		}
		ch := pc.out.written
		pc.out.Unlock()
		select {
		case <-ch:
		case <-pc.dying:
			return false
		case <-timeout:
			return false
		}
	}
}

// serve reads and handles frames until the connection ends.
func (pc *pulsarConn) serve() {
	defer func() {
		pc.close()
		pc.mu.Lock()
		producers, consumers := pc.mu.producers, pc.mu.consumers
		pc.mu.producers, pc.mu.consumers = map[uint64]*pulsarProducer{}, map[uint64]*pulsarConsumer{}
		pc.mu.Unlock()
		for _, pp := range producers {
			pc.dropProducer(pp)
		}
		for _, pcons := range consumers {
			pc.dropConsumer(pcons, false)
		}
		pc.wg.Wait()
	}()
	pc.wg.Add(1)
	go pc.writer()
	// Before CONNECT (and its authentication) a peer gets a small frame
	// only.
	r := pulsarwire.NewReader(pc.conn, pulsarMaxConnectFrame)
	pc.conn.SetReadDeadline(time.Now().Add(pulsarConnectTimeout))
	f, err := r.Read()
	if err != nil {
		return
	}
	if !pc.connect(f.Cmd) {
		return
	}
	r.SetMax(pc.s.cfg.MaxMessageSize + pulsarFrameOverhead)
	// When its token expires the client is asked for a fresh one
	// (AUTH_CHALLENGE); without one the connection ends.
	if at := auth.Expiry(pc.ctx); !at.IsZero() {
		pc.wg.Add(1)
		go pc.refreshAuth(at, pc.authRefresh)
	}
	for {
		pc.conn.SetReadDeadline(time.Now().Add(3 * pulsarKeepAlive))
		f, err := r.Read()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && pc.ctx.Err() == nil {
				pc.log.Info("pulsar connection closed", zap.Error(err))
			}
			return
		}
		// Whatever the answers (PONG, receipts, lookups), no more than
		// the high-water mark waits for a client that does not read: the
		// reader stops reading it meanwhile, as Pulsar's broker stops
		// reading an unwritable channel.
		if !pc.waitWritable() || !pc.handle(f) {
			return
		}
	}
}

// connect handles the first frame, which must be CONNECT.
func (pc *pulsarConn) connect(cmd *pulsarpb.BaseCommand) bool {
	c := cmd.GetConnect()
	if cmd.GetType() != pulsarpb.BaseCommand_CONNECT || c == nil {
		pc.log.Info("pulsar connection not started by CONNECT", zap.Stringer("type", cmd.GetType()))
		return false
	}
	pc.authRefresh = c.GetFeatureFlags().GetSupportsAuthRefresh()
	pc.clientVersion = c.GetClientVersion()
	if v := pc.s.auth; v != nil {
		if c.GetAuthMethodName() != "token" {
			pc.fail(noRequestID, fmt.Errorf("%w: authentication method %q: this broker takes a token (AuthenticationToken)", auth.ErrUnauthenticated, c.GetAuthMethodName()))
			return false
		}
		ctx, err := v.Authenticate(pc.ctx, string(c.GetAuthData()))
		if err != nil {
			pc.fail(noRequestID, err)
			return false
		}
		pc.ctx = ctx
	}
	pc.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_CONNECTED.Enum(), Connected: &pulsarpb.CommandConnected{
		ServerVersion:   proto.String("Magnetar"),
		ProtocolVersion: proto.Int32(min(c.GetProtocolVersion(), pulsarProtocolVersion)),
		MaxMessageSize:  proto.Int32(int32(pc.s.cfg.MaxMessageSize)),
	}}, nil)
	return true
}

// pulsarAuthRefresh is the challenge's data when the broker asks for
// fresh credentials: Pulsar's AuthData.REFRESH_AUTH_DATA.
const pulsarAuthRefresh = "PulsarAuthRefresh"

// refreshAuth asks the client for a fresh token when the connection's
// expires at expiry (AUTH_CHALLENGE, as Pulsar's broker does, to a client
// whose CONNECT says it supports refresh; the client answers
// AUTH_RESPONSE with its provider's current token), and closes the
// connection unless a fresh one (valid, expiring later than the old one
// and after now) is accepted within the verifier's leeway (the grace the
// gRPC streams get too). It runs until the connection ends or a token
// without an expiry is accepted.
func (pc *pulsarConn) refreshAuth(expiry time.Time, challenge bool) {
	defer pc.wg.Done()
	for {
		t := time.NewTimer(time.Until(expiry))
	valid:
		for {
			select {
			case <-t.C:
				break valid
			case e := <-pc.refreshed: // refreshed early, unasked
				if e.IsZero() {
					t.Stop()
					return
				}
				if e.After(expiry) {
					expiry = e
					t.Reset(time.Until(expiry))
				}
			case <-pc.dying:
				t.Stop()
				return
			}
		}
		if challenge {
			pc.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_AUTH_CHALLENGE.Enum(), AuthChallenge: &pulsarpb.CommandAuthChallenge{
				ServerVersion: proto.String("Magnetar"), ProtocolVersion: proto.Int32(pulsarProtocolVersion),
				Challenge: &pulsarpb.AuthData{AuthMethodName: proto.String("token"), AuthData: []byte(pulsarAuthRefresh)},
			}}, nil)
		}
		deadline := time.NewTimer(time.Until(expiry.Add(auth.Leeway)))
	fresh:
		for {
			select {
			case e := <-pc.refreshed:
				if e.IsZero() {
					deadline.Stop()
					return
				}
				// One that has expired too (accepted within the leeway)
				// is no refresh: the deadline stands, and the client is
				// not challenged again in a loop.
				if e.After(expiry) && e.After(time.Now()) {
					expiry = e
					deadline.Stop()
					break fresh
				}
			case <-deadline.C:
				pc.log.Info("pulsar connection closed: its token expired and no fresh one came", zap.Time("expired", expiry))
				pc.close()
				return
			case <-pc.dying:
				deadline.Stop()
				return
			}
		}
	}
}

// authResponse checks a fresh token from the client: it must be valid and
// for the connection's role (a connection does not change hands; the
// grants checked on its producers and consumers stay true). A bad one
// ends the connection with ERROR AuthenticationError.
func (pc *pulsarConn) authResponse(c *pulsarpb.CommandAuthResponse) bool {
	v := pc.s.auth
	if v == nil {
		return true // nothing to refresh: ignored, as Pulsar's broker does without authentication
	}
	if m := c.GetResponse().GetAuthMethodName(); m != "token" {
		pc.fail(noRequestID, fmt.Errorf("%w: authentication method %q: this broker takes a token (AuthenticationToken)", auth.ErrUnauthenticated, m))
		return false
	}
	ctx, err := v.Authenticate(pc.ctx, string(c.GetResponse().GetAuthData()))
	if err != nil {
		pc.fail(noRequestID, err)
		return false
	}
	if got, want := auth.Role(ctx), auth.Role(pc.ctx); got != want {
		pc.fail(noRequestID, fmt.Errorf("%w: the fresh token is for role %q, the connection's is %q", auth.ErrUnauthenticated, got, want))
		return false
	}
	select { // keep the latest only
	case <-pc.refreshed:
	default:
	}
	pc.refreshed <- auth.Expiry(ctx)
	return true
}

// fail answers a request with an ERROR frame, and lets the writer send it
// before the connection closes.
func (pc *pulsarConn) fail(requestID uint64, err error) {
	pc.send(errorCommand(requestID, err), nil)
	pc.flush()
}

// flush waits (a second at most) for the writer to send what is queued.
func (pc *pulsarConn) flush() {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	pc.waitOut(func() bool { return len(pc.out.buf) == 0 && !pc.out.writing }, t.C)
}

// handle handles one frame; false ends the connection.
func (pc *pulsarConn) handle(f pulsarwire.Frame) bool {
	cmd := f.Cmd
	switch cmd.GetType() {
	case pulsarpb.BaseCommand_PING:
		pc.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PONG.Enum(), Pong: &pulsarpb.CommandPong{}}, nil)
	case pulsarpb.BaseCommand_PONG:
	case pulsarpb.BaseCommand_PARTITIONED_METADATA:
		if c := cmd.GetPartitionMetadata(); c != nil {
			pc.goAsync(func() { pc.partitionedMetadata(c) })
			return true
		}
	case pulsarpb.BaseCommand_LOOKUP:
		if c := cmd.GetLookupTopic(); c != nil {
			pc.goAsync(func() { pc.lookup(c) })
			return true
		}
	case pulsarpb.BaseCommand_PRODUCER:
		if c := cmd.GetProducer(); c != nil {
			pc.inOrder(pc.mu.producerQueue, c.GetProducerId(), true, func() { pc.openProducer(c) })
			return true
		}
	case pulsarpb.BaseCommand_SEND:
		if c := cmd.GetSend(); c != nil {
			pc.publish(c, f.Payload)
			return true
		}
	case pulsarpb.BaseCommand_CLOSE_PRODUCER:
		if c := cmd.GetCloseProducer(); c != nil {
			pc.mu.Lock()
			if giveUp := pc.mu.waitingExclusive[c.GetProducerId()]; giveUp != nil {
				delete(pc.mu.waitingExclusive, c.GetProducerId())
				close(giveUp) // the open it follows waits for exclusive access: no longer
			}
			pc.mu.Unlock()
			pc.inOrder(pc.mu.producerQueue, c.GetProducerId(), false, func() { pc.closeProducer(c) })
			return true
		}
	case pulsarpb.BaseCommand_SUBSCRIBE:
		if c := cmd.GetSubscribe(); c != nil {
			pc.inOrder(pc.mu.consumerQueue, c.GetConsumerId(), true, func() { pc.subscribe(c) })
			return true
		}
	case pulsarpb.BaseCommand_FLOW:
		if c := cmd.GetFlow(); c != nil {
			pc.flow(c)
			return true
		}
	case pulsarpb.BaseCommand_ACK:
		if c := cmd.GetAck(); c != nil {
			pc.ack(c)
			return true
		}
	case pulsarpb.BaseCommand_REDELIVER_UNACKNOWLEDGED_MESSAGES:
		if c := cmd.GetRedeliverUnacknowledgedMessages(); c != nil {
			pc.redeliver(c)
			return true
		}
	case pulsarpb.BaseCommand_SEEK:
		if c := cmd.GetSeek(); c != nil {
			pc.inOrder(pc.mu.consumerQueue, c.GetConsumerId(), true, func() { pc.seek(c) })
			return true
		}
	case pulsarpb.BaseCommand_GET_LAST_MESSAGE_ID:
		if c := cmd.GetGetLastMessageId(); c != nil {
			pc.inOrder(pc.mu.consumerQueue, c.GetConsumerId(), true, func() { pc.lastMessageID(c) })
			return true
		}
	case pulsarpb.BaseCommand_CLOSE_CONSUMER:
		if c := cmd.GetCloseConsumer(); c != nil {
			pc.inOrder(pc.mu.consumerQueue, c.GetConsumerId(), false, func() { pc.closeConsumer(c) })
			return true
		}
	case pulsarpb.BaseCommand_UNSUBSCRIBE:
		if c := cmd.GetUnsubscribe(); c != nil {
			pc.inOrder(pc.mu.consumerQueue, c.GetConsumerId(), true, func() { pc.unsubscribe(c) })
			return true
		}
	case pulsarpb.BaseCommand_AUTH_RESPONSE:
		if c := cmd.GetAuthResponse(); c != nil {
			return pc.authResponse(c)
		}
	case pulsarpb.BaseCommand_GET_SCHEMA:
		if c := cmd.GetGetSchema(); c != nil {
			pc.goAsync(func() { pc.getSchema(c) })
			return true
		}
	case pulsarpb.BaseCommand_GET_OR_CREATE_SCHEMA:
		if c := cmd.GetGetOrCreateSchema(); c != nil {
			pc.goAsync(func() { pc.getOrCreateSchema(c) })
			return true
		}
	case pulsarpb.BaseCommand_GET_TOPICS_OF_NAMESPACE:
		if c := cmd.GetGetTopicsOfNamespace(); c != nil {
			pc.goAsync(func() { pc.topicsOfNamespace(c) })
			return true
		}
	default:
		if id, ok := pulsarwire.TxnRequestID(cmd); ok {
			// As Pulsar's broker with transactions off answers them.
			pc.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_ERROR.Enum(), Error: &pulsarpb.CommandError{
				RequestId: proto.Uint64(id), Error: pulsarpb.ServerError_NotAllowedError.Enum(), Message: proto.String("Transactions are not enabled."),
			}}, nil)
			return true
		}
		// A command this broker does not serve (topic-list watches, what
		// a broker sends, a transaction command without its request id):
		// the connection ends, as Pulsar's broker ends it for a command it
		// cannot handle.
		pc.log.Info("pulsar command not served: closing the connection", zap.Stringer("type", cmd.GetType()))
		return false
	}
	if cmd.GetType() == pulsarpb.BaseCommand_PING || cmd.GetType() == pulsarpb.BaseCommand_PONG {
		return true
	}
	pc.log.Info("pulsar command without its body: closing the connection", zap.Stringer("type", cmd.GetType()))
	return false
}

func (pc *pulsarConn) partitionedMetadata(c *pulsarpb.CommandPartitionedTopicMetadata) {
	resp := &pulsarpb.CommandPartitionedTopicMetadataResponse{RequestId: proto.Uint64(c.GetRequestId())}
	parts, err := func() (int, error) {
		n, err := parseTopic(c.GetTopic())
		if err != nil {
			return 0, err
		}
		if err := pc.s.authz.checkTopic(pc.ctx, n, opLookup, ""); err != nil {
			return 0, err
		}
		if _, err := pc.s.md.policies(pc.ctx, n.NamespaceName()); err != nil {
			return 0, err
		}
		return pc.s.md.partitions(pc.ctx, n)
	}()
	if err != nil {
		resp.Response = pulsarpb.CommandPartitionedTopicMetadataResponse_Failed.Enum()
		resp.Error, resp.Message = serverError(err).Enum(), proto.String(err.Error())
	} else {
		resp.Response = pulsarpb.CommandPartitionedTopicMetadataResponse_Success.Enum()
		resp.Partitions = proto.Uint32(uint32(parts))
	}
	pc.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PARTITIONED_METADATA_RESPONSE.Enum(), PartitionMetadataResponse: resp}, nil)
}

// lookup answers with the owner's client address: the client connects
// there (a partition nobody owns is assigned first, as for the SDK).
func (pc *pulsarConn) lookup(c *pulsarpb.CommandLookupTopic) {
	resp := &pulsarpb.CommandLookupTopicResponse{RequestId: proto.Uint64(c.GetRequestId())}
	owner, err := func() (string, error) {
		n, err := parseTopic(c.GetTopic())
		if err != nil {
			return "", err
		}
		if err := pc.s.authz.checkTopic(pc.ctx, n, opLookup, ""); err != nil {
			return "", err
		}
		start := time.Now()
		owner, err := pc.s.lookup(pc.ctx, n)
		pc.s.metrics.lookedUp(pc.s.id, owner, err, time.Since(start))
		return owner, err
	}()
	var url string
	var tlsURL bool
	if err == nil {
		url, tlsURL, err = pc.s.pulsarAddrOf(pc.ctx, owner)
	}
	if err != nil {
		resp.Response = pulsarpb.CommandLookupTopicResponse_Failed.Enum()
		resp.Error, resp.Message = serverError(err).Enum(), proto.String(err.Error())
	} else {
		resp.Response = pulsarpb.CommandLookupTopicResponse_Connect.Enum()
		if tlsURL {
			resp.BrokerServiceUrlTls = proto.String("pulsar+ssl://" + url)
		} else {
			resp.BrokerServiceUrl = proto.String("pulsar://" + url)
		}
		resp.Authoritative = proto.Bool(true)
	}
	pc.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_LOOKUP_RESPONSE.Enum(), LookupTopicResponse: resp}, nil)
}

// pulsarAddrOf is where a broker serves Pulsar's protocol: its port of
// its own if it has one (TLS or not), else its client address.
func (s *Server) pulsarAddrOf(ctx context.Context, owner string) (string, bool, error) {
	if owner == s.id {
		if s.pulsarLn != nil {
			return s.AdvertisedPulsarAddr(), s.tls != nil, nil
		}
		return s.id, false, nil
	}
	kv, err := s.store.Get(ctx, metastore.BrokerAvailableKey(owner))
	if err != nil {
		return "", false, errorf(ErrServiceNotReady, "the owner, broker %s, has no registration to read now (%v); try again", owner, err)
	}
	var info brokerInfo
	if err := json.Unmarshal(kv.Value, &info); err != nil {
		return "", false, err
	}
	if info.Pulsar != "" {
		return info.Pulsar, info.PulsarTLS, nil
	}
	return owner, false, nil
}

func (pc *pulsarConn) topicsOfNamespace(c *pulsarpb.CommandGetTopicsOfNamespace) {
	topics, err := func() ([]string, error) {
		ns := c.GetNamespace()
		if _, err := pc.s.md.policies(pc.ctx, ns); err != nil {
			return nil, err
		}
		tenant, _, _ := strings.Cut(ns, "/")
		if err := pc.s.authz.check(pc.ctx, tenant, ns, topicname.Name{}, opLookup, ""); err != nil {
			return nil, err
		}
		// Every mode the enum holds is one (an unknown one decodes as
		// PERSISTENT, the default).
		want, _ := topicname.DomainsOfMode(c.GetMode().String())
		var out []string
		for _, d := range want {
			list, err := pc.s.md.topicList(pc.ctx, ns, d)
			if err != nil {
				return nil, err
			}
			out = append(out, list...)
		}
		return out, nil
	}()
	if err != nil {
		pc.send(errorCommand(c.GetRequestId(), err), nil)
		return
	}
	pc.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_GET_TOPICS_OF_NAMESPACE_RESPONSE.Enum(),
		GetTopicsOfNamespaceResponse: &pulsarpb.CommandGetTopicsOfNamespaceResponse{RequestId: proto.Uint64(c.GetRequestId()), Topics: topics}}, nil)
}

// openProducer opens a producer on the topic, which must be owned here
// (the client looked it up).
func (pc *pulsarConn) openProducer(c *pulsarpb.CommandProducer) {
	id := c.GetProducerId()
	pp, err := func() (*pulsarProducer, error) {
		n, err := parseTopic(c.GetTopic())
		if err != nil {
			return nil, err
		}
		pc.mu.Lock()
		existing := pc.mu.producers[id]
		pc.mu.Unlock()
		if existing != nil {
			// A client asking again (its first answer was late): as
			// Pulsar, the same producer is answered again.
			if existing.t.name == n {
				return existing, errAlreadyOpen
			}
			return nil, errorf(ErrProducerBusy, "producer id %d is in use on this connection for %s", id, existing.t.name)
		}
		if name := c.GetProducerName(); name != "" {
			if err := naming.Check("producer", name); err != nil {
				return nil, err
			}
		}
		// Checked before anything is created for the producer.
		client, err := newClientInfo(c.GetMetadata(), pc.clientVersion, pc.conn.RemoteAddr().String())
		if err != nil {
			return nil, err
		}
		if err := pc.s.authz.checkTopic(pc.ctx, n, opProduce, ""); err != nil {
			return nil, err
		}
		t, err := pc.s.getTopic(pc.ctx, n, true)
		if err != nil {
			return nil, err
		}
		version, err := pc.s.registerSchema(pc.ctx, n, c.GetSchema())
		if err != nil {
			return nil, err
		}
		// The subscription the producer asks for (a dead-letter topic's
		// producer names its consumers' one), created from the first
		// message if missing, as Pulsar does: what it writes is kept for
		// them.
		if sub := c.GetInitialSubscriptionName(); sub != "" {
			if err := naming.Check("subscription", sub); err != nil {
				return nil, err
			}
			if err := pc.s.authz.checkTopic(pc.ctx, n, opConsume, sub); err != nil {
				return nil, err
			}
			if err := t.createSubscription(pc.ctx, sub, admin.SubscriptionStart{Earliest: true}); err != nil && !errors.Is(err, ErrConflict) {
				return nil, err
			}
		}
		p := newProducer(c.GetProducerName(), pulsarMaxInflight)
		p.t, p.client = t, client
		wait, err := t.addProducerAccess(p, c.GetProducerAccessMode())
		if err != nil {
			return nil, err
		}
		if wait != nil {
			if err := pc.waitExclusive(c, id, t, p, wait); err != nil {
				return nil, err
			}
		}
		return &pulsarProducer{id: id, p: p, t: t, schemaVersion: version}, nil
	}()
	again := errors.Is(err, errAlreadyOpen)
	if err != nil && !again {
		pc.send(errorCommand(c.GetRequestId(), err), nil)
		return
	}
	if !again {
		pc.mu.Lock()
		if pc.ctx.Err() != nil { // the connection ended meanwhile
			pc.mu.Unlock()
			pc.dropProducer(pp)
			return
		}
		pc.mu.producers[id] = pp
		delete(pc.mu.closedProducers, id)
		pc.mu.Unlock()
	}
	pc.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PRODUCER_SUCCESS.Enum(), ProducerSuccess: &pulsarpb.CommandProducerSuccess{
		RequestId: proto.Uint64(c.GetRequestId()), ProducerName: proto.String(pp.p.name), LastSequenceId: proto.Int64(pp.p.lastSequence),
		SchemaVersion: pp.schemaVersion, TopicEpoch: proto.Uint64(pp.t.topicEpoch()), ProducerReady: proto.Bool(true),
	}}, nil)
	if !again {
		pc.wg.Add(1)
		go pc.pump(pp)
	}
}

// pump turns a producer's answers into SEND_RECEIPT and SEND_ERROR
// frames. When the producer is disconnected by the broker (its topic
// unloads), the client is told to close it (and to look the topic up
// again).
func (pc *pulsarConn) pump(pp *pulsarProducer) {
	defer pc.wg.Done()
	closing := false // closing the producer for a refusal (closeOnRefusal)
	for {
		q, err := pp.p.next()
		for _, r := range q {
			// Handed to the writer below (or dropped): the send's slot
			// goes back.
			pp.p.release(r)
			switch r := r.Response.(type) {
			case *brokerpb.ProduceResponse_Receipt:
				id := r.Receipt.GetMessageId()
				rc := pulsarwire.Receipt{ProducerID: pp.id, SequenceID: r.Receipt.GetSequenceId(),
					LedgerID: uint64(id.GetLedgerId()), EntryID: uint64(id.GetEntryId()), Partition: id.GetPartition()}
				if r.Receipt.GetDuplicate() { // Pulsar's -1:-1
					rc.LedgerID, rc.EntryID = math.MaxUint64, math.MaxUint64
				}
				pc.sendReceipt(rc)
			case *brokerpb.ProduceResponse_Error:
				if why := closeOnRefusal(r.Error.GetReason()); why != nil {
					// A refusal the client is told by closing the producer,
					// once the sends stored before are answered: its client
					// then fails to create it again (and fails what it has
					// pending) or waits. pulsar-client-go would drop the
					// whole connection on a quota's SEND_ERROR (consumers
					// draining the backlog included), and on a
					// TopicTerminatedError drop the producer without
					// failing its pending sends, which then time out.
					if !closing {
						closing = true
						pc.wg.Add(1)
						go func() {
							defer pc.wg.Done()
							pp.pending.wait()
							pp.p.disconnect(why)
						}()
					}
					continue
				}
				if closing {
					continue // refused after it: the client sends it again
				}
				pc.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SEND_ERROR.Enum(), SendError: &pulsarpb.CommandSendError{
					ProducerId: proto.Uint64(pp.id), SequenceId: proto.Uint64(r.Error.GetSequenceId()),
					Error: reasonServerError(r.Error.GetReason()).Enum(), Message: proto.String(r.Error.GetMessage()),
				}}, nil)
			}
		}
		if err == nil {
			continue
		}
		if id := pp.closeRequest.Load(); id != nil {
			// The client closed it: answered after its last receipt.
			pc.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SUCCESS.Enum(), Success: &pulsarpb.CommandSuccess{RequestId: proto.Uint64(*id)}}, nil)
			return
		}
		pc.mu.Lock()
		mine := pc.mu.producers[pp.id] == pp
		if mine {
			delete(pc.mu.producers, pp.id)
			if len(pc.mu.closedProducers) >= maxClosedProducers {
				for id := range pc.mu.closedProducers { // one of them goes (a client's that never came back, most likely)
					delete(pc.mu.closedProducers, id)
					break
				}
			}
			pc.mu.closedProducers[pp.id] = struct{}{}
		}
		pc.mu.Unlock()
		if mine && pc.ctx.Err() == nil {
			pp.t.removeProducer(pp.p)
			pc.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pulsarpb.CommandCloseProducer{
				ProducerId: proto.Uint64(pp.id), RequestId: proto.Uint64(noRequestID),
			}}, nil)
		}
		return
	}
}

// dropProducer removes a producer from its topic and ends its pump.
func (pc *pulsarConn) dropProducer(pp *pulsarProducer) {
	pp.t.removeProducer(pp.p)
	pp.p.disconnect(io.EOF)
}

// waitExclusive waits, for a WaitForExclusive PRODUCER, until the topic
// is granted: the client is told at once that the producer is not ready
// (PRODUCER_SUCCESS with producer_ready false, as Pulsar does; the
// client then waits with no timeout). A CLOSE_PRODUCER for the id, or
// the connection's end, gives up the wait.
func (pc *pulsarConn) waitExclusive(c *pulsarpb.CommandProducer, id uint64, t *topic, p *producer, wait <-chan error) error {
	giveUp := make(chan struct{})
	pc.mu.Lock()
	pc.mu.waitingExclusive[id] = giveUp
	pc.mu.Unlock()
	defer func() {
		pc.mu.Lock()
		if pc.mu.waitingExclusive[id] == giveUp {
			delete(pc.mu.waitingExclusive, id)
		}
		pc.mu.Unlock()
	}()
	pc.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PRODUCER_SUCCESS.Enum(), ProducerSuccess: &pulsarpb.CommandProducerSuccess{
		RequestId: proto.Uint64(c.GetRequestId()), ProducerName: proto.String(p.name), ProducerReady: proto.Bool(false),
	}}, nil)
	var why error
	select {
	case err := <-wait:
		return err // nil: granted
	case <-giveUp:
		why = errorf(ErrProducerBusy, "producer %d closed while waiting for exclusive access to %s", id, t.name)
	case <-pc.dying:
		why = errorf(ErrServiceNotReady, "the connection ended")
	}
	if !t.cancelExclusiveWait(p) {
		t.removeProducer(p) // granted meanwhile
	}
	return why
}

// closeProducer handles the client's CLOSE_PRODUCER: the sends it has
// in flight are stored and answered first (the client would otherwise
// fail them, stored or not), then SUCCESS comes through the pump.
func (pc *pulsarConn) closeProducer(c *pulsarpb.CommandCloseProducer) {
	pc.mu.Lock()
	pp := pc.mu.producers[c.GetProducerId()]
	delete(pc.mu.producers, c.GetProducerId())
	delete(pc.mu.closedProducers, c.GetProducerId())
	pc.mu.Unlock()
	if pp == nil {
		pc.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SUCCESS.Enum(), Success: &pulsarpb.CommandSuccess{RequestId: proto.Uint64(c.GetRequestId())}}, nil)
		return
	}
	id := c.GetRequestId()
	pp.closeRequest.Store(&id)
	pc.wg.Add(1)
	go func() {
		defer pc.wg.Done()
		pp.pending.wait()
		pc.dropProducer(pp) // the pump sends what is queued, then SUCCESS
	}()
}

// publish stores a SEND's message; its answer comes through the
// producer's pump, in order.
func (pc *pulsarConn) publish(c *pulsarpb.CommandSend, payload []byte) {
	seq := c.GetSequenceId()
	pc.mu.Lock()
	pp := pc.mu.producers[c.GetProducerId()]
	_, closed := pc.mu.closedProducers[c.GetProducerId()]
	pc.mu.Unlock()
	if pp == nil && closed {
		return // sent before the client read our CLOSE_PRODUCER: it sends it again
	}
	if pp == nil {
		pc.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SEND_ERROR.Enum(), SendError: &pulsarpb.CommandSendError{
			ProducerId: c.ProducerId, SequenceId: c.SequenceId, Error: pulsarpb.ServerError_NotAllowedError.Enum(),
			Message: proto.String(fmt.Sprintf("no producer %d on this connection", c.GetProducerId())),
		}}, nil)
		return
	}
	p := pp.p
	// A slot per send until the pump hands its answer to the writer:
	// answers waiting behind an earlier send (refusals decided at once)
	// are bounded, as those waiting for the writer are (waitWritable).
	if !p.acquire(pc.ctx) {
		return // the connection ends, or the producer was closed: the client sends it again
	}
	// Its answer goes out after those of the sends before it, even when
	// it is decided first (refused here, or by publishEntry at once).
	ticket := p.take()
	// Counted from here, so that closing the producer waits for it even
	// while it waits for the connection's inflight slot below.
	pp.pending.add()
	refuse := func(err error) {
		p.fail(ticket, seq, err)
		pp.pending.done()
	}
	if p.hasFailed() {
		refuse(errorf(ErrServiceNotReady, "an earlier send of this producer failed: reconnect and resend from it"))
		return
	}
	md, body, err := entry.Decode(payload)
	if err != nil {
		refuse(errorf(ErrChecksum, "sequence id %d: %v", seq, err))
		return
	}
	if len(body) > pc.s.cfg.MaxMessageSize {
		refuse(errorf(ErrMessageTooLarge, "message of %d bytes, the maximum is %d", len(body), pc.s.cfg.MaxMessageSize))
		return
	}
	select {
	case pc.inflight <- struct{}{}:
	case <-pc.ctx.Done():
		// The connection is ending: nothing more goes out, but every
		// ticket is answered all the same.
		refuse(errorf(ErrServiceNotReady, "the connection ended"))
		return
	}
	send := &brokerpb.Send{SequenceId: seq, HighestSequenceId: c.GetHighestSequenceId(), Metadata: md, Payload: body}
	pp.t.publishEntry(pc.ctx, p, send, payload, func(pos mledger.Position, dup bool, err error) {
		defer func() { <-pc.inflight; pp.pending.done() }()
		if err != nil {
			p.fail(ticket, seq, err)
			return
		}
		p.answer(ticket, &brokerpb.ProduceResponse{Response: &brokerpb.ProduceResponse_Receipt{Receipt: &brokerpb.SendReceipt{
			SequenceId: seq, MessageId: pp.t.messageID(pos, -1, 0), Duplicate: dup,
		}}})
	})
}

// errQuotaClosed disconnects a producer refused by a backlog quota.
var errQuotaClosed = errors.New("closed by a backlog quota")

// closeOnRefusal is why a Pulsar client's producer is closed rather than
// sent a SEND_ERROR for a send refused for reason r (see pump), nil for a
// SEND_ERROR.
func closeOnRefusal(r brokerpb.ErrorReason) error {
	switch r {
	case brokerpb.ErrorReason_PRODUCER_BLOCKED_QUOTA_EXCEEDED_ERROR, brokerpb.ErrorReason_PRODUCER_BLOCKED_QUOTA_EXCEEDED_EXCEPTION:
		return errQuotaClosed
	case brokerpb.ErrorReason_TOPIC_TERMINATED:
		return ErrTopicTerminated
	}
	return nil
}

// errAlreadyOpen: a PRODUCER or SUBSCRIBE for an id the connection
// already has open on the same topic (answered again, not refused).
var errAlreadyOpen = errors.New("already open")

// Errors of Pulsar's protocol that the broker's own sentinels do not
// name. ErrChecksum is an ErrInvalidMessage (the SDK's reason for it),
// answered to Pulsar's clients as ChecksumError.
var (
	ErrIncompatibleSchema = errors.New("incompatible schema")
	ErrChecksum           = fmt.Errorf("%w: checksum mismatch", ErrInvalidMessage)
)

// authorizedTopic parses a request's topic and checks that the
// connection's role may op it.
func (pc *pulsarConn) authorizedTopic(name string, op topicOp) (topicname.Name, error) {
	n, err := topicname.Parse(name)
	if err != nil {
		return n, errorf(ErrInvalidArgument, "%v", err)
	}
	return n, pc.s.authz.checkTopic(pc.ctx, n, op, "")
}

// getSchema answers GET_SCHEMA: the topic's schema at the version asked
// for (the latest without one); Pulsar's TopicNotFound "no schema" when
// there is none.
func (pc *pulsarConn) getSchema(c *pulsarpb.CommandGetSchema) {
	resp := &pulsarpb.CommandGetSchemaResponse{RequestId: c.RequestId}
	err := func() error {
		n, err := pc.authorizedTopic(c.GetTopic(), opLookup)
		if err != nil {
			return err
		}
		resp.Schema, resp.SchemaVersion, err = pc.s.schemaAt(pc.ctx, n, c.GetSchemaVersion())
		return err
	}()
	if err != nil {
		code := serverError(err)
		if errors.Is(err, ErrNoSchema) {
			code = pulsarpb.ServerError_TopicNotFound // Pulsar's answer: "Topic not found or no-schema"
		}
		resp.ErrorCode, resp.ErrorMessage = code.Enum(), proto.String(err.Error())
	}
	pc.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_GET_SCHEMA_RESPONSE.Enum(), GetSchemaResponse: resp}, nil)
}

// getOrCreateSchema answers GET_OR_CREATE_SCHEMA (a producer sending a
// message of another schema): the schema's version, added if new.
func (pc *pulsarConn) getOrCreateSchema(c *pulsarpb.CommandGetOrCreateSchema) {
	resp := &pulsarpb.CommandGetOrCreateSchemaResponse{RequestId: c.RequestId}
	err := func() error {
		n, err := pc.authorizedTopic(c.GetTopic(), opProduce)
		if err != nil {
			return err
		}
		resp.SchemaVersion, err = pc.s.registerSchema(pc.ctx, n, c.GetSchema())
		if resp.SchemaVersion == nil && err == nil {
			resp.SchemaVersion = []byte{} // bytes: no schema, no version
		}
		return err
	}()
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = serverError(err).Enum(), proto.String(err.Error())
	}
	pc.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_GET_OR_CREATE_SCHEMA_RESPONSE.Enum(), GetOrCreateSchemaResponse: resp}, nil)
}

// errorCommand is an ERROR frame answering requestID.
func errorCommand(requestID uint64, err error) *pulsarpb.BaseCommand {
	return &pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_ERROR.Enum(), Error: &pulsarpb.CommandError{
		RequestId: proto.Uint64(requestID), Error: serverError(err).Enum(), Message: proto.String(err.Error()),
	}}
}

// serverError is Pulsar's code for an error. Pulsar's clients retry
// ServiceNotReady (and the quota hold) after a new lookup; the others
// fail the operation.
func serverError(err error) pulsarpb.ServerError {
	switch {
	case errors.Is(err, ErrIncompatibleSchema):
		return pulsarpb.ServerError_IncompatibleSchema
	case errors.Is(err, ErrProducerFenced):
		return pulsarpb.ServerError_ProducerFenced
	case errors.Is(err, ErrChecksum):
		return pulsarpb.ServerError_ChecksumError
	case errors.Is(err, ErrNotImplemented):
		return pulsarpb.ServerError_NotAllowedError
	}
	reason, _, _ := reasonOf(err)
	return reasonServerError(reason)
}

func reasonServerError(r brokerpb.ErrorReason) pulsarpb.ServerError {
	switch r {
	case brokerpb.ErrorReason_INVALID_TOPIC_NAME:
		return pulsarpb.ServerError_InvalidTopicName
	case brokerpb.ErrorReason_TOPIC_NOT_FOUND:
		return pulsarpb.ServerError_TopicNotFound
	case brokerpb.ErrorReason_SUBSCRIPTION_NOT_FOUND:
		return pulsarpb.ServerError_SubscriptionNotFound
	case brokerpb.ErrorReason_CONSUMER_BUSY:
		return pulsarpb.ServerError_ConsumerBusy
	case brokerpb.ErrorReason_PRODUCER_BUSY:
		return pulsarpb.ServerError_ProducerBusy
	case brokerpb.ErrorReason_PERSISTENCE_ERROR:
		return pulsarpb.ServerError_PersistenceError
	case brokerpb.ErrorReason_SERVICE_NOT_READY, brokerpb.ErrorReason_NOT_OWNER, brokerpb.ErrorReason_TOPIC_CLOSED, brokerpb.ErrorReason_NOT_ENOUGH_BOOKIES:
		return pulsarpb.ServerError_ServiceNotReady
	case brokerpb.ErrorReason_AUTHENTICATION_ERROR:
		return pulsarpb.ServerError_AuthenticationError
	case brokerpb.ErrorReason_AUTHORIZATION_ERROR:
		return pulsarpb.ServerError_AuthorizationError
	case brokerpb.ErrorReason_PRODUCER_BLOCKED_QUOTA_EXCEEDED_ERROR:
		return pulsarpb.ServerError_ProducerBlockedQuotaExceededError
	case brokerpb.ErrorReason_PRODUCER_BLOCKED_QUOTA_EXCEEDED_EXCEPTION:
		return pulsarpb.ServerError_ProducerBlockedQuotaExceededException
	case brokerpb.ErrorReason_TOPIC_TERMINATED:
		return pulsarpb.ServerError_TopicTerminatedError
	case brokerpb.ErrorReason_INCOMPATIBLE_SCHEMA:
		return pulsarpb.ServerError_IncompatibleSchema
	case brokerpb.ErrorReason_INVALID_MESSAGE: // a SEND whose payload does not decode
		return pulsarpb.ServerError_ChecksumError
	case brokerpb.ErrorReason_NOT_ALLOWED, brokerpb.ErrorReason_MESSAGE_TOO_LARGE, brokerpb.ErrorReason_INVALID_ARGUMENT:
		return pulsarpb.ServerError_NotAllowedError
	}
	return pulsarpb.ServerError_UnknownError
}
