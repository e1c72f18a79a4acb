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
// port is chosen below the kernel's ephemeral range: a port found with
// ":0" and closed is one the kernel hands out next to an outgoing
// connection, which then takes it before the process binds it ("address
// already in use"); a port outside the range is never handed out so.
// Only another test picking the same port at random can collide.
func FreePortOn(ip string) (string, error) {
	low, high := reservedRange()
	for range 200 {
		addr := net.JoinHostPort(ip, strconv.Itoa(low+rand.IntN(high-low)))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue // taken
		}
		ln.Close()
		return addr, nil
	}
	// Nothing free in the range: fall back to one the kernel picks.
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// reservedRange is [low, high) of the ports FreePortOn picks from: from
// 10000 up to the start of the ephemeral range (Linux's
// ip_local_port_range; 32768 if unreadable), or 10000 to 20000 when that
// leaves too few.
func reservedRange() (low, high int) {
	high = 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				high = v
			}
		}
	}
	if high < 11000 {
		return 10000, 20000
	}
	return 10000, high
}
