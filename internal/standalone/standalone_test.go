package standalone

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/internal/testutil"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testutil.GoleakIgnores()...)
}

// A restart on the same data directory keeps every ledger, even when the
// bookies come back on other ports.
func TestRestartKeepsData(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.Bookies = 3
	cfg.MetastoreListen = "127.0.0.1:0"
	cfg.BookieListen = "127.0.0.1:0"
	cfg.BrokerListen, cfg.HTTPListen = "127.0.0.1:0", "127.0.0.1:0"
	s, err := Start(ctx, cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := ledger.New(s.Store, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cl.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if _, err := w.Append(ctx, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Start(ctx, cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	defer s.Close()
	cl, err = ledger.New(s.Store, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	r, err := cl.Open(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	entries, err := r.Read(ctx, 0, 9)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range entries {
		if len(e.Payload) != 1 || e.Payload[0] != byte(i) {
			t.Fatalf("entry %d: %v", i, e.Payload)
		}
	}
}

func TestValidate(t *testing.T) {
	for name, mod := range map[string]func(*Config){
		"no data dir":      func(c *Config) { c.DataDir = "" },
		"zero bookies":     func(c *Config) { c.Bookies = 0 },
		"too many bookies": func(c *Config) { c.Bookies = MaxBookies + 1 },
		"bad metastore":    func(c *Config) { c.MetastoreListen = "nowhere" },
		"bad bookie port":  func(c *Config) { c.BookieListen = "127.0.0.1:65535"; c.Bookies = 2 },
	} {
		c := DefaultConfig()
		mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}
