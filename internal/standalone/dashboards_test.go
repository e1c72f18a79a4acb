package standalone

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/internal/testutil"
)

// dashboard is what the test reads of a Grafana dashboard.
type dashboard struct {
	UID    string `json:"uid"`
	Title  string `json:"title"`
	Panels []struct {
		Title   string          `json:"title"`
		GridPos json.RawMessage `json:"gridPos"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Query any `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

var (
	// A selector: a metric name and its braces (the dashboards write every
	// selector with braces, so that this finds them all).
	selectorRE = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\{`)
	// A metric name of ours anywhere, to check the convention above.
	ourNameRE = regexp.MustCompile(`\b(?:pulsar|bookie|bookkeeper|magnetar|replication|auditor)_[a-zA-Z0-9_:]*`)
)

// Every metric the Grafana dashboards in charts/magnetar/dashboards query
// is exported by a running standalone (broker, bookies, autorecovery),
// once it has topics, subscriptions and traffic.
func TestDashboardsQueryExportedMetrics(t *testing.T) {
	files, err := filepath.Glob("../../charts/magnetar/dashboards/*.json")
	if err != nil || len(files) < 3 {
		t.Fatalf("dashboards: %v %v, want at least 3 (cluster, topic, bookie)", files, err)
	}
	queried := map[string][]string{} // metric: where
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if d.UID == "" || d.Title == "" || len(d.Panels) == 0 {
			t.Fatalf("%s: no uid, title or panels", f)
		}
		var exprs []string
		for _, p := range d.Panels {
			if len(p.Targets) == 0 || len(p.GridPos) == 0 {
				t.Errorf("%s: panel %q has no query or no position", f, p.Title)
			}
			for _, tg := range p.Targets {
				exprs = append(exprs, tg.Expr)
			}
		}
		for _, v := range d.Templating.List {
			if q, ok := v.Query.(string); ok {
				exprs = append(exprs, q)
			}
		}
		for _, e := range exprs {
			selected := map[string]bool{}
			for _, m := range selectorRE.FindAllStringSubmatch(e, -1) {
				selected[m[1]] = true
				queried[m[1]] = append(queried[m[1]], filepath.Base(f))
			}
			for _, name := range ourNameRE.FindAllString(e, -1) {
				if !selected[name] {
					t.Errorf("%s: %q names %s without braces: write selectors as name{...}", f, e, name)
				}
			}
		}
	}

	cfg := testConfig(t, 2) // with autorecovery
	ctx, s := start(t, cfg)
	cl := sdkClient(t, s, client.ClientOptions{})
	cons, err := cl.Subscribe(client.ConsumerOptions{Topic: "dashboards", SubscriptionName: "s", Type: client.Shared})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "dashboards"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := 0; i < 10; i++ {
		if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cons.Ack(m)
	}

	// Some appear after a first check (disk usage, the auditor's count).
	var missing []string
	deadline := time.Now().Add(time.Minute)
	for {
		m := testutil.Scrape(t, s.Broker.HTTPAddr())
		missing = missing[:0]
		for name := range queried {
			if !exported(m, name) {
				missing = append(missing, name)
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	slices.Sort(missing)
	for _, n := range missing {
		t.Errorf("%s, queried by %s, is not exported", n, strings.Join(slices.Compact(queried[n]), ", "))
	}
}

// exported reports whether name is a series of m: a family, or the
// _count, _sum or _bucket of a summary or histogram.
func exported(m testutil.Metrics, name string) bool {
	if f := m[name]; f != nil && len(f.Metric) > 0 {
		return true
	}
	for _, suffix := range []string{"_count", "_sum", "_bucket"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		if f := m[base]; f != nil && len(f.Metric) > 0 && (f.GetType() == dto.MetricType_SUMMARY || f.GetType() == dto.MetricType_HISTOGRAM) {
			return true
		}
	}
	return false
}
