package testutil

import (
	"fmt"
	"math"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// Metrics are the families of one scrape of /metrics, by name.
type Metrics map[string]*dto.MetricFamily

// Scrape reads http://addr/metrics (text format); a malformed answer
// fails the test.
func Scrape(t testing.TB, addr string) Metrics {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// Value is the value of the series name whose labels include labels
// (name, value pairs): a gauge's, a counter's, or a summary's or
// histogram's count. found is false without such a series; more than one
// fails the test.
func (m Metrics) Value(t testing.TB, name string, labels ...string) (v float64, found bool) {
	t.Helper()
	f := m[name]
	if f == nil {
		return 0, false
	}
	n := 0
	for _, s := range f.Metric {
		if !hasLabels(s, labels) {
			continue
		}
		n++
		switch {
		case s.Gauge != nil:
			v = s.Gauge.GetValue()
		case s.Counter != nil:
			v = s.Counter.GetValue()
		case s.Summary != nil:
			v = float64(s.Summary.GetSampleCount())
		case s.Histogram != nil:
			v = float64(s.Histogram.GetSampleCount())
		case s.Untyped != nil:
			v = s.Untyped.GetValue()
		}
	}
	if n > 1 {
		t.Fatalf("%s%v: %d series match", name, labels, n)
	}
	return v, n == 1
}

// Summary is the summary series name whose labels include labels (name,
// value pairs); nil without one; more than one fails the test.
func (m Metrics) Summary(t testing.TB, name string, labels ...string) *dto.Summary {
	t.Helper()
	f := m[name]
	if f == nil {
		return nil
	}
	var out *dto.Summary
	for _, s := range f.Metric {
		if !hasLabels(s, labels) {
			continue
		}
		if out != nil {
			t.Fatalf("%s%v: more than one series matches", name, labels)
		}
		out = s.Summary
	}
	return out
}

// Quantile is s's quantile q; NaN without it (or without s).
func Quantile(s *dto.Summary, q float64) float64 {
	for _, x := range s.GetQuantile() {
		if x.GetQuantile() == q {
			return x.GetValue()
		}
	}
	return math.NaN()
}

// Want fails the test unless the series exists with value want.
func (m Metrics) Want(t testing.TB, want float64, name string, labels ...string) {
	t.Helper()
	v, ok := m.Value(t, name, labels...)
	if !ok {
		t.Errorf("%s%v: no such series", name, labels)
		return
	}
	if v != want {
		t.Errorf("%s%v = %v, want %v", name, labels, v, want)
	}
}

// Labels lists the label names of name's series (of the first), for
// tests of what is exported at which level.
func (m Metrics) Labels(name string) []string {
	f := m[name]
	if f == nil || len(f.Metric) == 0 {
		return nil
	}
	var out []string
	for _, l := range f.Metric[0].Label {
		out = append(out, l.GetName())
	}
	return out
}

func hasLabels(s *dto.Metric, labels []string) bool {
	if len(labels)%2 != 0 {
		panic(fmt.Sprintf("labels %v: name, value pairs", labels))
	}
	for i := 0; i < len(labels); i += 2 {
		ok := false
		for _, l := range s.Label {
			if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// Gather collects g's metrics, as Scrape reads them from a server.
func Gather(t testing.TB, g prometheus.Gatherer) Metrics {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	m := Metrics{}
	for _, f := range fams {
		m[f.GetName()] = f
	}
	return m
}
