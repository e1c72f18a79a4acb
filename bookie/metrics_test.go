package bookie

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// A twin exports the summary's figures under both names: the same count,
// sum and quantiles for each label value.
func TestTwinSummaryExportsBothNames(t *testing.T) {
	vec := prometheus.NewSummaryVec(prometheus.SummaryOpts{Name: "x_REQUEST", Help: "h", Objectives: objectives,
		MaxAge: time.Minute, AgeBuckets: ageBuckets}, []string{"success"})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(twin{vec, prometheus.NewDesc("x", "h", []string{"success"}, nil)})
	for i := range 1000 {
		vec.WithLabelValues("true").Observe(float64(i))
	}
	vec.WithLabelValues("false").Observe(7)

	check := func(families []*dto.MetricFamily) {
		t.Helper()
		byName := map[string]*dto.MetricFamily{}
		for _, f := range families {
			byName[f.GetName()] = f
		}
		a, b := byName["x_REQUEST"], byName["x"]
		if a == nil || b == nil {
			t.Fatalf("families %v: want x_REQUEST and x", byName)
		}
		if a.GetType() != dto.MetricType_SUMMARY || b.GetType() != dto.MetricType_SUMMARY || len(a.Metric) != 2 || len(b.Metric) != 2 {
			t.Fatalf("types %v %v, %d and %d metrics; want summaries with 2 each", a.GetType(), b.GetType(), len(a.Metric), len(b.Metric))
		}
		for i := range a.Metric {
			ma, mb := a.Metric[i], b.Metric[i]
			la, lb := ma.Label[0].GetValue(), mb.Label[0].GetValue()
			sa, sb := ma.Summary, mb.Summary
			if la != lb || sa.GetSampleCount() != sb.GetSampleCount() || sa.GetSampleSum() != sb.GetSampleSum() || len(sa.Quantile) != len(sb.Quantile) {
				t.Fatalf("success=%s: x_REQUEST %v, x success=%s %v", la, sa, lb, sb)
			}
			for j := range sa.Quantile {
				if sa.Quantile[j].GetQuantile() != sb.Quantile[j].GetQuantile() || sa.Quantile[j].GetValue() != sb.Quantile[j].GetValue() {
					t.Fatalf("success=%s quantiles: %v and %v", la, sa.Quantile, sb.Quantile)
				}
			}
		}
		if got := a.Metric[1].Summary.GetSampleCount(); got < 1000 { // "true" sorts after "false"
			t.Fatalf("success=true count %d, want 1000 or more", got)
		}
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	check(families)

	// Scraped while observations go on: still equal (one reading).
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
				vec.WithLabelValues("true").Observe(float64(i % 100))
			}
		}
	}()
	for range 200 {
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		check(families)
	}
	close(stop)
	<-done
}
