package testutil

import (
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections from a 127.0.0.1 port to a target address.
// It can black-hole traffic (connections stay open, nothing passes: what a
// network partition looks like to TCP) and cut every open connection.
type Proxy struct {
	ln net.Listener

	mu struct {
		sync.Mutex
		target   string
		paused   bool
		resume   chan struct{} // closed when paused ends
		conns    map[net.Conn]struct{}
		accepted int
		closed   bool
		// held counts reads from the clients' side held back by the
		// current pause; heldCh is closed at the first one.
		held   int
		heldCh chan struct{}
	}
	wg sync.WaitGroup
}

// StartProxy listens on 127.0.0.1:0 and forwards to target (which may be
// set later with SetTarget) until the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &Proxy{ln: ln}
	p.mu.target = target
	p.mu.conns = make(map[net.Conn]struct{})
	p.mu.resume = make(chan struct{})
	close(p.mu.resume)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the address to dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetTarget changes where new connections go.
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.target = target
}

// Pause stops forwarding bytes in both directions; connections stay open.
func (p *Proxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.mu.paused {
		p.mu.paused = true
		p.mu.resume = make(chan struct{})
		p.mu.held, p.mu.heldCh = 0, make(chan struct{})
	}
}

// Held returns a channel closed once the current pause holds back bytes a
// client sent (a request is stuck in the proxy). Call it after Pause.
func (p *Proxy) Held() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.heldCh == nil {
		p.mu.heldCh = make(chan struct{})
	}
	return p.mu.heldCh
}

// Resume forwards again after Pause.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.paused {
		p.mu.paused = false
		close(p.mu.resume)
	}
}

// CutAll closes every open connection; new ones are still accepted.
func (p *Proxy) CutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.mu.conns {
		c.Close()
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		return
	}
	p.mu.closed = true
	if p.mu.paused {
		p.mu.paused = false
		close(p.mu.resume)
	}
	for c := range p.mu.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

// Accepted counts the connections accepted so far.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.accepted
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.closed {
		c.Close()
		return false
	}
	p.mu.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.mu.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.mu.accepted++
		p.mu.Unlock()
		p.mu.Lock()
		target := p.mu.target
		p.mu.Unlock()
		out, err := net.Dial("tcp", target)
		if err != nil {
			in.Close()
			continue
		}
		if !p.track(in) || !p.track(out) {
			in.Close()
			out.Close()
			continue
		}
		p.wg.Add(2)
		go p.pipe(in, out, true)
		go p.pipe(out, in, false)
	}
}

// pipe copies src to dst, holding bytes back while paused; fromClient:
// src is the accepted side.
func (p *Proxy) pipe(src, dst net.Conn, fromClient bool) {
	defer p.wg.Done()
	defer p.untrack(dst)
	defer p.untrack(src)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			resume := p.mu.resume
			if p.mu.paused && fromClient {
				if p.mu.held++; p.mu.held == 1 {
					close(p.mu.heldCh)
				}
			}
			p.mu.Unlock()
			<-resume
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
