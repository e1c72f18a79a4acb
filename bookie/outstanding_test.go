package bookie

import (
	"context"
	"testing"
	"time"
)

// A stream's wait for a slot, all maxStreamOutstanding taken, ends with
// its context (the client gave up).
func TestOutstandingEndsWithContext(t *testing.T) {
	o := newOutstanding()
	for i := 0; i < maxStreamOutstanding; i++ {
		if !o.add(context.Background()) {
			t.Fatalf("slot %d refused", i)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan bool, 1)
	go func() { got <- o.add(ctx) }()
	cancel()
	select {
	case ok := <-got:
		if ok {
			t.Fatal("a slot taken beyond maxStreamOutstanding")
		}
	case <-time.After(30 * time.Second): // a bound: it returns at once
		t.Fatal("the wait for a slot goes on after its context ended")
	}
	o.done() // a slot free again: the next add takes it
	if !o.add(context.Background()) {
		t.Fatal("the freed slot refused")
	}
}
