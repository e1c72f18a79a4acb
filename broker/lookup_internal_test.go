package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/internal/testutil"
	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// A partition a broker unloaded for balance is placed on another broker by
// that broker's lookups, even where the registered counts (which lag) say
// it is among the least loaded; with no other broker left it stays.
func TestLookupsDoNotPlaceAMovedPartitionBack(t *testing.T) {
	e := testutil.StartEtcd(t)
	st := testutil.OpenStore(t, e.Endpoints(), "/lookup")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	register := func(addr string, topics int) {
		b, _ := json.Marshal(brokerInfo{Address: addr, Topics: topics})
		if _, err := st.Put(ctx, metastore.BrokerAvailableKey(addr), b); err != nil {
			t.Fatal(err)
		}
	}
	register("a:6650", 5)
	register("b:6650", 5)
	s := &Server{id: "a:6650", store: st, stop: make(chan struct{})}
	// Equal counts: the topic's hash chooses. Find partitions it places on
	// this broker.
	var mine []string
	for i := 0; len(mine) < 3; i++ {
		path := fmt.Sprintf("public/default/t-%d", i)
		got, err := s.leastLoaded(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		if got == s.id {
			mine = append(mine, path)
		}
	}
	for _, path := range mine[:2] {
		s.markMovedAway(path)
	}
	for i, path := range mine {
		want := "b:6650"
		if i == 2 { // not moved: still here
			want = s.id
		}
		if got, err := s.leastLoaded(ctx, path); err != nil || got != want {
			t.Errorf("lookup of %s: %q, %v; want %q", path, got, err, want)
		}
	}
	// Nor does it load one when a client comes back with a stale answer
	// (a lookup made while the unload was in progress).
	moved, err := topicname.Parse("persistent://" + mine[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := s.refuseMovedAway(ctx, moved); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("loading a partition moved away: %v, want ErrNotOwner", err)
	}
	// The only live broker serves what it moved away.
	if err := st.Delete(ctx, metastore.BrokerAvailableKey("b:6650")); err != nil {
		t.Fatal(err)
	}
	if err := s.refuseMovedAway(ctx, moved); err != nil {
		t.Fatalf("loading a partition moved away, alone: %v", err)
	}
	if got, err := s.leastLoaded(ctx, mine[0]); err != nil || got != s.id {
		t.Errorf("with no other broker: %q, %v; want %q", got, err, s.id)
	}
	// Once the window has passed, the counts decide again.
	register("b:6650", 5)
	s.mu.Lock()
	s.mu.movedAway[mine[0]] = time.Now().Add(-time.Second)
	s.mu.Unlock()
	if got, err := s.leastLoaded(ctx, mine[0]); err != nil || got != s.id {
		t.Errorf("after the window: %q, %v; want %q", got, err, s.id)
	}
}
