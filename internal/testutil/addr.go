package testutil

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// DeadAddr is a 127.0.0.1 address nothing listens on: connections are
// refused (a process that died, or is not up yet).
func DeadAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// StalledAddr is the address of a listener that accepts connections and
// never answers on them: a process paused with SIGSTOP (the kernel still
// completes the TCP handshake). It closes when the test ends.
func StalledAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}

// FreePortOn returns ip:port, a TCP port free on ip now, for a process a
// test starts (which must be told its ports before it binds them). The
// port is chosen outside the kernel's ephemeral range: a port found with
// ":0" and closed is one the kernel hands out next to an outgoing
// connection, which then takes it before the process binds it ("address
// already in use"); a port outside the range is never handed out so. A
// port is returned once per test process; only another test process
// picking the same port at random can collide.
func FreePortOn(ip string) (string, error) {
	low, high := reservedRange()
	if high-low >= 1000 {
		for range 200 {
			port := low + rand.IntN(high-low)
			handedOut.Lock()
			taken := handedOut.ports[port]
			handedOut.ports[port] = true
			handedOut.Unlock()
			if taken {
				continue
			}
			addr := net.JoinHostPort(ip, strconv.Itoa(port))
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				continue // in use
			}
			ln.Close()
			return addr, nil
		}
	}
	// No room outside the ephemeral range: one the kernel picks.
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// handedOut holds the ports FreePortOn returned in this process.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// reservedRange is [low, high) of the ports FreePortOn picks from, outside
// the ephemeral range (Linux's ip_local_port_range; 32768-60999 if
// unreadable): below it from 10000, or above it when that leaves more.
func reservedRange() (low, high int) {
	first, last := 32768, 60999
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			a, err1 := strconv.Atoi(f[0])
			b, err2 := strconv.Atoi(f[1])
			if err1 == nil && err2 == nil && a <= b {
				first, last = a, b
			}
		}
	}
	below, above := max(first-10000, 0), max(65536-(last+1), 0)
	if below >= above {
		return 10000, max(first, 10000)
	}
	return last + 1, 65536
}
