// Package connmux shares one listener between two protocols, told apart
// by the first byte each connection sends: a broker's client port serves
// gRPC (an HTTP/2 client preface, "PRI * ...", or a TLS handshake, 0x16)
// and Pulsar's binary protocol (a frame's 4-byte big-endian size, whose
// first byte is 0 for any frame under 16 MiB).
package connmux

import (
	"bufio"
	"net"
	"sync"
	"time"
)

// Mux accepts connections on a listener and hands each to Primary or to
// Pulsar once its first byte is read.
//
// Ownership: Serve runs the accept loop and one goroutine per connection
// being sniffed; Close stops all of them and closes the listener.
type Mux struct {
	ln      net.Listener
	timeout time.Duration
	primary *chanListener
	pulsar  *chanListener

	wg   sync.WaitGroup
	once sync.Once
	done chan struct{}

	// sniffing are the connections whose first byte is awaited: Close
	// closes them rather than wait up to the timeout.
	mu       sync.Mutex
	sniffing map[net.Conn]struct{}
}

// New shares ln. A connection that sends nothing within timeout is
// closed.
func New(ln net.Listener, timeout time.Duration) *Mux {
	m := &Mux{ln: ln, timeout: timeout, done: make(chan struct{}), sniffing: map[net.Conn]struct{}{}}
	m.primary = &chanListener{m: m, conns: make(chan net.Conn)}
	m.pulsar = &chanListener{m: m, conns: make(chan net.Conn)}
	return m
}

// Primary is the listener of every connection that is not Pulsar's
// protocol (gRPC, with or without TLS).
func (m *Mux) Primary() net.Listener { return m.primary }

// Pulsar is the listener of the connections that speak Pulsar's binary
// protocol.
func (m *Mux) Pulsar() net.Listener { return m.pulsar }

// Serve accepts connections until the listener fails or Close; it
// returns the listener's error.
func (m *Mux) Serve() error {
	backoff := 5 * time.Millisecond
	for {
		c, err := m.ln.Accept()
		if err != nil {
			select {
			case <-m.done:
				m.Close()
				return err
			default:
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() || isTemporary(err) {
				// Out of file descriptors and the like: try again, as
				// net/http and gRPC do, rather than close the port.
				time.Sleep(backoff)
				backoff = min(2*backoff, time.Second)
				continue
			}
			m.Close()
			return err
		}
		backoff = 5 * time.Millisecond
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.route(c)
		}()
	}
}

// isTemporary reports an accept error that may go away (EMFILE, ENFILE,
// ECONNABORTED...).
func isTemporary(err error) bool {
	t, ok := err.(interface{ Temporary() bool })
	return ok && t.Temporary()
}

// route reads the connection's first byte and hands it on.
func (m *Mux) route(c net.Conn) {
	m.mu.Lock()
	select {
	case <-m.done:
		m.mu.Unlock()
		c.Close()
		return
	default:
	}
	m.sniffing[c] = struct{}{}
	m.mu.Unlock()
	c.SetReadDeadline(time.Now().Add(m.timeout))
	r := bufio.NewReader(c)
	first, err := r.Peek(1)
	m.mu.Lock()
	delete(m.sniffing, c)
	m.mu.Unlock()
	if err != nil {
		c.Close()
		return
	}
	c.SetReadDeadline(time.Time{})
	to := m.primary
	if first[0] == 0 {
		to = m.pulsar
	}
	pc := &peekedConn{Conn: c, r: r}
	select {
	case to.conns <- pc:
	case <-m.done:
		c.Close()
	}
}

// Close closes the listener and stops handing out connections; it waits
// for the connections being sniffed (closed, not handed out).
func (m *Mux) Close() error {
	err := m.shut()
	m.wg.Wait()
	return err
}

// shut stops the mux: no more connections are handed out, the listener
// and the connections being sniffed are closed.
func (m *Mux) shut() error {
	var err error
	m.once.Do(func() {
		m.mu.Lock()
		close(m.done)
		for c := range m.sniffing {
			c.Close()
		}
		m.mu.Unlock()
		err = m.ln.Close()
	})
	return err
}

// chanListener is a net.Listener fed by the mux.
type chanListener struct {
	m     *Mux
	conns chan net.Conn
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.m.done:
		return nil, net.ErrClosed
	}
}

// Close closes the whole mux: the two listeners share one port.
func (l *chanListener) Close() error {
	l.m.shut()
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.m.ln.Addr() }

// peekedConn reads the bytes sniffed first.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(b []byte) (int, error) { return c.r.Read(b) }
