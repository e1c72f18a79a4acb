package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/rest"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/magnetar-io/magnetar/client"
)

// adminCall is one call of the official Go admin library (pulsaradmin,
// pinned in go.mod) against a standalone: it must succeed and pass check,
// or fail with HTTP status want (Pulsar's answer, or the one
// docs/pulsar-compatibility.md gives for what Magnetar does not have).
type adminCall struct {
	name  string
	call  func() (any, error)
	want  int              // 0: success
	check func(any) string // "" when the answer is right
}

func runAdminCalls(t *testing.T, calls []adminCall) {
	t.Helper()
	for _, c := range calls {
		out, err := c.call()
		var rerr rest.Error
		switch {
		case c.want == 0 && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != 0 && err == nil:
			t.Errorf("%s: succeeded (%+v), want HTTP %d", c.name, out, c.want)
		case c.want != 0 && !errors.As(err, &rerr):
			t.Errorf("%s: %v, want an HTTP %d answer", c.name, err, c.want)
		case c.want != 0 && rerr.Code != c.want:
			t.Errorf("%s: HTTP %d (%s), want %d", c.name, rerr.Code, rerr.Reason, c.want)
		case c.want != 0 && (rerr.Reason == "" || strings.HasPrefix(rerr.Reason, "{")):
			// The library keeps the raw body when it cannot decode it.
			t.Errorf("%s: the library could not read the error's reason: %q", c.name, rerr.Reason)
		case c.want == 0 && c.check != nil:
			if msg := c.check(out); msg != "" {
				t.Errorf("%s: %s (got %+v)", c.name, msg, out)
			}
		}
	}
}

// The clusters, tenants, brokers and broker-stats calls of pulsaradmin
// v0.19.0, against `magnetar standalone`, as a user moving from Pulsar
// makes them.
func TestPulsarAdminClustersTenantsBrokers(t *testing.T) {
	ports := freePorts(t, 4)
	s := startStandalone(t, t.TempDir(), ports, "--cluster-name", "standalone")
	t.Cleanup(func() { s.stop() })
	admin, err := pulsaradmin.NewClient(&pulsaradmin.Config{WebServiceURL: "http://" + s.httpAddr})
	if err != nil {
		t.Fatal(err)
	}
	// A topic owned by the broker, for the calls that list what it owns.
	c, err := client.NewClient(client.ClientOptions{URL: "magnetar://" + s.brokerAddr, OperationTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := c.CreateProducer(client.ProducerOptions{Topic: "persistent://public/default/admin-calls"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	p.Close()

	const cluster = "standalone"
	clusters, tenants, brokers, stats := admin.Clusters(), admin.Tenants(), admin.Brokers(), admin.BrokerStats()
	domain := utils.FailureDomainData{ClusterName: cluster, DomainName: "rack-1", BrokerList: []string{s.brokerAddr}}
	equal := func(want any) func(any) string {
		return func(got any) string {
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(want)
			if string(g) != string(w) {
				return "want " + string(w)
			}
			return ""
		}
	}
	runAdminCalls(t, []adminCall{
		// Clusters: the one this deployment is.
		{name: "clusters list", call: func() (any, error) { return clusters.List() }, check: equal([]string{cluster})},
		{name: "clusters get", call: func() (any, error) { return clusters.Get(cluster) }, check: func(v any) string {
			d := v.(utils.ClusterData)
			if d.ServiceURL != "http://"+s.httpAddr || d.BrokerServiceURL != "pulsar://"+s.brokerAddr {
				return "want the standalone's admin URL and its client port as Pulsar's"
			}
			return ""
		}},
		{name: "clusters get, unknown", call: func() (any, error) { return clusters.Get("elsewhere") }, want: 404},
		{name: "clusters create, existing", call: func() (any, error) {
			return nil, clusters.Create(utils.ClusterData{Name: cluster, ServiceURL: "http://" + s.httpAddr})
		}, want: 409},
		{name: "clusters create, another", call: func() (any, error) {
			return nil, clusters.Create(utils.ClusterData{Name: "second", ServiceURL: "http://127.0.0.1:1"})
		}, want: 501},
		{name: "clusters update", call: func() (any, error) { return nil, clusters.Update(utils.ClusterData{Name: cluster}) }, want: 501},
		{name: "clusters update, unknown", call: func() (any, error) { return nil, clusters.Update(utils.ClusterData{Name: "elsewhere"}) }, want: 404},
		{name: "clusters delete", call: func() (any, error) { return nil, clusters.Delete(cluster) }, want: 501},
		{name: "clusters delete, unknown", call: func() (any, error) { return nil, clusters.Delete("elsewhere") }, want: 404},
		{name: "clusters get peers", call: func() (any, error) { return clusters.GetPeerClusters(cluster) }, check: equal([]string{})},
		{name: "clusters update peers", call: func() (any, error) { return nil, clusters.UpdatePeerClusters(cluster, []string{"x"}) }, want: 501},
		{name: "clusters list failure domains", call: func() (any, error) { return clusters.ListFailureDomains(cluster) }, check: equal(utils.FailureDomainMap{})},
		{name: "clusters get failure domain", call: func() (any, error) { return clusters.GetFailureDomain(cluster, "rack-1") }, want: 404},
		{name: "clusters get failure domain, unknown cluster", call: func() (any, error) { return clusters.GetFailureDomain("elsewhere", "rack-1") }, want: 412},
		{name: "clusters create failure domain", call: func() (any, error) { return nil, clusters.CreateFailureDomain(domain) }, want: 501},
		{name: "clusters update failure domain", call: func() (any, error) { return nil, clusters.UpdateFailureDomain(domain) }, want: 501},
		{name: "clusters delete failure domain", call: func() (any, error) { return nil, clusters.DeleteFailureDomain(domain) }, want: 501},

		// Tenants.
		{name: "tenants create", call: func() (any, error) {
			return nil, tenants.Create(utils.TenantData{Name: "acme", AdminRoles: []string{"ops"}, AllowedClusters: []string{cluster}})
		}},
		{name: "tenants create, existing", call: func() (any, error) {
			return nil, tenants.Create(utils.TenantData{Name: "acme", AllowedClusters: []string{cluster}})
		}, want: 409},
		{name: "tenants list", call: func() (any, error) { return tenants.List() }, check: func(v any) string {
			if l := v.([]string); !slices.Contains(l, "acme") || !slices.Contains(l, "public") {
				return "want acme and public"
			}
			return ""
		}},
		{name: "tenants update", call: func() (any, error) {
			return nil, tenants.Update(utils.TenantData{Name: "acme", AdminRoles: []string{"ops", "dev"}, AllowedClusters: []string{cluster}})
		}},
		{name: "tenants get", call: func() (any, error) { return tenants.Get("acme") }, check: func(v any) string {
			d := v.(utils.TenantData)
			if !slices.Equal(d.AdminRoles, []string{"ops", "dev"}) || !slices.Equal(d.AllowedClusters, []string{cluster}) {
				return "want the updated roles and the cluster"
			}
			return ""
		}},
		{name: "tenants get, unknown", call: func() (any, error) { return tenants.Get("nobody") }, want: 404},
		{name: "tenants create, unknown cluster", call: func() (any, error) {
			return nil, tenants.Create(utils.TenantData{Name: "other", AllowedClusters: []string{"elsewhere"}})
		}, want: 412},
		{name: "tenants update, unknown cluster", call: func() (any, error) {
			return nil, tenants.Update(utils.TenantData{Name: "acme", AllowedClusters: []string{"elsewhere"}})
		}, want: 412},
		{name: "tenants delete, with namespaces", call: func() (any, error) { return nil, tenants.Delete("public") }, want: 409},
		{name: "tenants delete", call: func() (any, error) { return nil, tenants.Delete("acme") }},
		{name: "tenants delete, gone", call: func() (any, error) { return nil, tenants.Delete("acme") }, want: 404},

		// Brokers.
		{name: "brokers list active", call: func() (any, error) { return brokers.GetListActiveBrokers() }, check: equal([]string{s.brokerAddr})},
		{name: "brokers of the cluster", call: func() (any, error) { return brokers.GetActiveBrokers(cluster) }, check: equal([]string{s.brokerAddr})},
		{name: "brokers of another cluster", call: func() (any, error) { return brokers.GetActiveBrokers("elsewhere") }, want: 404},
		{name: "brokers owned namespaces", call: func() (any, error) { return brokers.GetOwnedNamespaces(cluster, s.brokerAddr) }, check: func(v any) string {
			st, ok := v.(map[string]utils.NamespaceOwnershipStatus)["public/default/0x00000000_0xffffffff"]
			if !ok || !st.IsActive || st.BrokerAssignment != "primary" {
				return "want public/default's bundle, active, primary"
			}
			return ""
		}},
		{name: "brokers owned namespaces, unknown broker", call: func() (any, error) { return brokers.GetOwnedNamespaces(cluster, "127.0.0.1:1") }, want: 404},
		{name: "brokers health check", call: func() (any, error) { return nil, brokers.HealthCheck() }},
		{name: "brokers health check, topic version", call: func() (any, error) { return nil, brokers.HealthCheckWithTopicVersion(utils.TopicVersionV2) }},
		{name: "brokers leader", call: func() (any, error) { return brokers.GetLeaderBroker() }, want: 501},
		{name: "brokers dynamic configuration names", call: func() (any, error) { return brokers.GetDynamicConfigurationNames() }, check: equal([]string{})},
		{name: "brokers all dynamic configurations", call: func() (any, error) { return brokers.GetAllDynamicConfigurations() }, check: equal(map[string]string{})},
		{name: "brokers runtime configuration", call: func() (any, error) { return brokers.GetRuntimeConfigurations() }, check: func(v any) string {
			m := v.(map[string]string)
			if m["cluster-name"] != cluster || m["http"] != s.httpAddr {
				return "want cluster-name and http among the settings"
			}
			for k := range m {
				if strings.Contains(k, "secret") || strings.Contains(k, "password") {
					return "a secret setting is listed: " + k
				}
			}
			return ""
		}},
		{name: "brokers update dynamic configuration", call: func() (any, error) {
			return nil, brokers.UpdateDynamicConfiguration("max-message-size", "10")
		}, want: 412},
		{name: "brokers delete dynamic configuration", call: func() (any, error) {
			return nil, brokers.DeleteDynamicConfiguration("max-message-size")
		}, want: 412},
		{name: "brokers internal configuration", call: func() (any, error) { return brokers.GetInternalConfigurationData() }, check: func(v any) string {
			if d := v.(*utils.InternalConfigurationData); !strings.HasPrefix(d.ConfigurationStoreServers, "etcd:") {
				return "want the etcd endpoints"
			}
			return ""
		}},

		// Broker stats.
		{name: "broker-stats metrics", call: func() (any, error) { return stats.GetMetrics() }, check: func(v any) string {
			m := v.([]utils.Metrics)
			if len(m) != 1 || m[0].Dimensions["broker"] != s.brokerAddr || m[0].Dimensions["cluster"] != cluster {
				return "want this broker's metrics"
			}
			if n, ok := m[0].Metrics["brk_no_of_topics"].(float64); !ok || n < 1 {
				return "want brk_no_of_topics, at least the topic written to"
			}
			return ""
		}},
		{name: "broker-stats mbeans", call: func() (any, error) { return stats.GetMBeans() }, check: func(v any) string {
			if len(v.([]utils.Metrics)) != 0 {
				return "want none"
			}
			return ""
		}},
		{name: "broker-stats topics", call: func() (any, error) { return stats.GetTopics() }, check: func(v any) string {
			if !strings.Contains(v.(string), "persistent://public/default/admin-calls") {
				return "want the owned topic"
			}
			return ""
		}},
		{name: "broker-stats load report", call: func() (any, error) { return stats.GetLoadReport() }, check: func(v any) string {
			// pulsaradmin drops this call's errors and returns nil.
			if d, ok := v.(*utils.LocalBrokerData); !ok || d == nil || d.NumTopics < 1 || d.WebServiceURL != "http://"+s.httpAddr {
				return "want this broker's load report"
			}
			return ""
		}},
		{name: "broker-stats allocator", call: func() (any, error) { return stats.GetAllocatorStats("default") }, want: 501},
	})

	// Pulsar's readiness probe, which pulsaradmin does not call: open to
	// anyone, "ok".
	resp, err := http.Get("http://" + s.httpAddr + "/admin/v2/brokers/ready")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Errorf("GET /admin/v2/brokers/ready: %s %q, want 200 ok", resp.Status, body)
	}
}
