package bookie

import (
	"context"
	"testing"
	"time"
)

// A stream's wait for a slot, all maxStreamOutstanding taken, ends with
// its context (the client gave up): one that ended before, or while it
// waits.
func TestOutstandingEndsWithContext(t *testing.T) {
	o := newOutstanding()
	for i := 0; i < maxStreamOutstanding; i++ {
		if !o.add(context.Background()) {
			t.Fatalf("slot %d refused", i)
		}
	}
	// add's result, within a bound: it returns at once.
	add := func(ctx context.Context, cancel context.CancelFunc) bool {
		t.Helper()
		got := make(chan bool, 1)
		go func() { got <- o.add(ctx) }()
		cancel() // before the wait, or while it waits: either way it ends
		select {
		case ok := <-got:
			return ok
		case <-time.After(30 * time.Second):
			t.Fatal("the wait for a slot goes on after its context ended")
			return false
		}
	}
	ended, cancelEnded := context.WithCancel(context.Background())
	cancelEnded()
	if add(ended, func() {}) {
		t.Fatal("a slot taken beyond maxStreamOutstanding, the context ended before")
	}
	ctx, cancel := context.WithCancel(context.Background())
	if add(ctx, cancel) {
		t.Fatal("a slot taken beyond maxStreamOutstanding")
	}
	o.done() // a slot free again: the next add takes it
	if !o.add(context.Background()) {
		t.Fatal("the freed slot refused")
	}
}
