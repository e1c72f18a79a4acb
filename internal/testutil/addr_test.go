package testutil

import (
	"net"
	"strconv"
	"testing"
)

// FreePortOn picks a port outside the ephemeral range (where no outgoing
// connection can take it) that can be bound, never the same one twice.
func TestFreePortOn(t *testing.T) {
	low, high := reservedRange()
	if low >= high {
		t.Fatalf("empty range [%d, %d)", low, high)
	}
	seen := map[string]bool{}
	for range 20 {
		addr, err := FreePortOn("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if seen[addr] {
			t.Fatalf("%s returned twice", addr)
		}
		seen[addr] = true
		_, p, _ := net.SplitHostPort(addr)
		port, _ := strconv.Atoi(p)
		if port < low || port >= high {
			t.Fatalf("port %d outside [%d, %d)", port, low, high)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("the free port %s cannot be bound: %v", addr, err)
		}
		ln.Close()
	}
}
