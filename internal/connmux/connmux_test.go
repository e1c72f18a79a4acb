package connmux

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/internal/testutil"
)

func start(t *testing.T, timeout time.Duration) (*Mux, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := New(ln, timeout)
	served := make(chan struct{})
	go func() { m.Serve(); close(served) }()
	t.Cleanup(func() { m.Close(); <-served })
	return m, ln.Addr().String()
}

// accept takes one connection from l and reads want from it.
func accept(t *testing.T, l net.Listener, want string) {
	t.Helper()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != want {
		t.Fatalf("read %q %v, want %q: the sniffed bytes are kept", got, err, want)
	}
}

// Each connection goes to the listener of its protocol, with every byte
// it sent, first one included.
func TestRoutesByFirstByte(t *testing.T) {
	m, addr := start(t, 5*time.Second)
	for _, tc := range []struct {
		name, sent string
		to         net.Listener
	}{
		{"gRPC's preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", m.Primary()},
		{"a TLS handshake", "\x16\x03\x01\x02\x00", m.Primary()},
		{"a Pulsar frame", "\x00\x00\x00\x0c\x00\x00\x00\x08CONNECT!", m.Pulsar()},
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte(tc.sent)); err != nil {
			t.Fatal(err)
		}
		accept(t, tc.to, tc.sent)
		c.Close()
	}
}

// A connection that sends nothing is closed after the timeout, without
// holding up the others.
func TestSilentConnectionClosed(t *testing.T) {
	m, addr := start(t, 100*time.Millisecond)
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	other, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	other.Write([]byte{0, 0, 0, 4})
	accept(t, m.Pulsar(), "\x00\x00\x00\x04")
	silent.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("silent connection: %v, want it closed (EOF)", err)
	}
}

// Closing either listener closes the port: Accept fails with
// net.ErrClosed on both, and nothing more connects.
func TestCloseStopsBoth(t *testing.T) {
	m, addr := start(t, time.Second)
	m.Primary().Close()
	for _, l := range []net.Listener{m.Primary(), m.Pulsar()} {
		if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close: %v", err)
		}
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatal("the port still accepts connections")
	}
}

// Close does not wait for a connection that has sent nothing yet: it is
// closed (with an hour-long sniffing timeout, a Close that waited would
// hang the test).
func TestCloseClosesSilentConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := New(ln, time.Hour)
	served := make(chan struct{})
	go func() { m.Serve(); close(served) }()
	silent, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	// Once the connection is being sniffed (Serve accepted it), close.
	testutil.Eventually(t, 10*time.Second, "the connection being sniffed", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return len(m.sniffing) == 1
	})
	m.Close()
	<-served
	silent.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("the silent connection after Close: %v, want it closed", err)
	}
}
