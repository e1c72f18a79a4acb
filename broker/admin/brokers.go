package admin

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"time"

	"github.com/magnetar-io/magnetar/broker/internal/errs"
)

// Brokers is what the brokers and broker-stats resources ask of the
// broker.
type Brokers interface {
	Clusters
	// LiveBrokers lists the live brokers' addresses.
	LiveBrokers(ctx context.Context) ([]string, error)
	// Registrations are the live brokers' registrations (addresses and
	// load), by address, in the broker's JSON.
	Registrations(ctx context.Context) (any, error)
	// OwnedNamespaces lists the namespaces live broker owns topics of
	// (a namespace once per topic); errs.ErrBrokerNotFound if it is not
	// live.
	OwnedNamespaces(ctx context.Context, broker string) ([]string, error)
	// Ready is nil when this broker is ready (serving, registered under
	// its live session), else errs.ErrServiceNotReady saying which check
	// failed.
	Ready(ctx context.Context) error
	// RuntimeConfiguration lists the broker's settings by their flag
	// names, secrets left out.
	RuntimeConfiguration() map[string]string
	// Metastore is where the metadata is: the etcd endpoints and the
	// root of the keys.
	Metastore() (endpoints []string, root string)
	// CacheStats are the entry cache's.
	CacheStats() CacheStats
	// Load is this broker's traffic over its last registration interval.
	Load(ctx context.Context) (Load, error)
	// OwnedTopicStats are the stats of the topic partitions this broker owns,
	// by namespace, domain ("persistent", "non-persistent") and full topic
	// name, in the broker's JSON.
	OwnedTopicStats() map[string]map[string]map[string]any
}

// CacheStats are the entry cache's size and counters.
type CacheStats struct {
	SizeBytes, Hits, Misses int64
	// ReadFromBookies counts entries read from the bookies (cache misses).
	ReadFromBookies int64
}

// Load is a broker's traffic, per second, over its last registration
// interval.
type Load struct {
	// Broker is the broker's address.
	Broker                             string
	MsgRateIn, MsgRateOut, BytesRateIn float64
	// CPU is the cores the process used.
	CPU float64
	// Topics is how many topic partitions the broker has loaded.
	Topics int
}

// brokerRoutes serves Pulsar's /admin/v2/brokers and
// /admin/v2/broker-stats calls for what Magnetar has.
func brokerRoutes(h route, z Rules, b Brokers) {
	h("GET /admin/v2/brokers", z.Superuser, func(r *http.Request) (any, error) {
		return nonNil(b.LiveBrokers(r.Context()))
	})
	h("GET /admin/v2/brokers/{cluster}", z.Superuser, func(r *http.Request) (any, error) {
		if err := ownCluster(b, r); err != nil {
			return nil, err
		}
		return nonNil(b.LiveBrokers(r.Context()))
	})
	// Every live broker's registration: addresses and load.
	h("GET /admin/v2/brokers/load", z.Superuser, func(r *http.Request) (any, error) {
		return b.Registrations(r.Context())
	})
	// The namespaces a broker owns topics of; Magnetar assigns partitions,
	// not bundles, so each namespace is one whole bundle.
	h("GET /admin/v2/brokers/{cluster}/{broker}/ownedNamespaces", z.Superuser, func(r *http.Request) (any, error) {
		if err := ownCluster(b, r); err != nil {
			return nil, err
		}
		nss, err := b.OwnedNamespaces(r.Context(), r.PathValue("broker"))
		if err != nil {
			return nil, err
		}
		owned := map[string]any{}
		for _, ns := range nss {
			owned[ns+"/"+bundleRange] = map[string]any{"broker_assignment": "primary", "is_controlled": false, "is_active": true}
		}
		return owned, nil
	})
	// Pulsar's health check writes and reads a message; Magnetar's is the
	// broker's readiness (serving, registered under its live session),
	// each check bounded as /readyz bounds it. Pulsar's readiness probe
	// answers the same, open to anyone as there.
	ready := func(r *http.Request) (any, error) {
		if err := b.Ready(r.Context()); err != nil {
			return nil, err
		}
		return plainText("ok"), nil
	}
	h("GET /admin/v2/brokers/health", z.Superuser, ready)
	h("GET /admin/v2/brokers/ready", anyone, ready)
	for _, p := range []string{"GET /admin/v2/brokers/version", "GET /admin/v2/brokers/backlog-quota-check", "POST /admin/v2/brokers/shutdown"} {
		h(p, z.Superuser, func(r *http.Request) (any, error) {
			return nil, fmt.Errorf("%w: %s (stop a broker by its process: SIGTERM drains it)", errs.ErrNotImplemented, r.URL.Path)
		})
	}
	h("GET /admin/v2/brokers/leaderBroker", z.Superuser, func(r *http.Request) (any, error) {
		return nil, fmt.Errorf("%w: Magnetar has no leader broker: each broker sheds its own load", errs.ErrNotImplemented)
	})
	// Settings: none is dynamic (they are flags, environment variables
	// and a file, read at start).
	h("GET /admin/v2/brokers/configuration", z.Superuser, func(r *http.Request) (any, error) {
		return []string{}, nil
	})
	h("GET /admin/v2/brokers/configuration/values", z.Superuser, func(r *http.Request) (any, error) {
		return map[string]string{}, nil
	})
	h("GET /admin/v2/brokers/configuration/runtime", z.Superuser, func(r *http.Request) (any, error) {
		return b.RuntimeConfiguration(), nil
	})
	notDynamic := func(r *http.Request) (any, error) {
		return nil, fmt.Errorf("%w: %q is not a dynamic setting: Magnetar has none (set it with its flag, environment variable or config file, and restart)",
			errs.ErrNotAllowed, r.PathValue("name"))
	}
	h("POST /admin/v2/brokers/configuration/{name}/{value}", z.Superuser, notDynamic)
	h("DELETE /admin/v2/brokers/configuration/{name}", z.Superuser, notDynamic)
	h("GET /admin/v2/brokers/internal-configuration", z.Superuser, func(r *http.Request) (any, error) {
		endpoints, root := b.Metastore()
		// Pulsar 3 fills its older names with the metadata store's too.
		etcd := "etcd:" + strings.Join(endpoints, ",")
		return map[string]string{
			"metadataStoreUrl": etcd, "configurationMetadataStoreUrl": etcd,
			"zookeeperServers": etcd, "configurationStoreServers": etcd,
			"bookkeeperMetadataServiceUri": etcd, "ledgersRootPath": root,
			"stateStorageServiceUrl": "",
		}, nil
	})
	h("GET /admin/v2/broker-stats/cache", z.Superuser, func(r *http.Request) (any, error) {
		st := b.CacheStats()
		return map[string]any{"sizeBytes": st.SizeBytes, "hits": st.Hits, "misses": st.Misses,
			"entriesReadFromBookies": st.ReadFromBookies}, nil
	})
	// This broker's traffic over its last registration interval, in
	// Pulsar's metric names.
	h("GET /admin/v2/broker-stats/metrics", z.Superuser, func(r *http.Request) (any, error) {
		me, err := b.Load(r.Context())
		if err != nil {
			return nil, err
		}
		return []map[string]any{{
			"dimensions": map[string]string{"broker": me.Broker, "cluster": b.ClusterName(), "metric": "broker"},
			"metrics": map[string]any{
				"brk_in_rate": me.MsgRateIn, "brk_out_rate": me.MsgRateOut, "brk_in_tp_rate": me.BytesRateIn,
				"brk_no_of_topics": me.Topics, "brk_cpu_cores": me.CPU,
			},
		}}, nil
	})
	// Pulsar's LocalBrokerData, from the same registration.
	h("GET /admin/v2/broker-stats/load-report", z.Superuser, func(r *http.Request) (any, error) {
		me, err := b.Load(r.Context())
		if err != nil {
			return nil, err
		}
		u := b.ServiceURLs()
		return map[string]any{
			"webServiceUrl": u.Web, "webServiceUrlTls": u.WebTLS,
			"pulsarServiceUrl": u.Broker, "pulsarServiceUrlTls": u.BrokerTLS,
			"persistentTopicsEnabled": true, "nonPersistentTopicsEnabled": true,
			"cpu":       map[string]float64{"usage": me.CPU * 100, "limit": float64(runtime.NumCPU()) * 100},
			"msgRateIn": me.MsgRateIn, "msgRateOut": me.MsgRateOut, "msgThroughputIn": me.BytesRateIn,
			"numTopics": me.Topics, "lastUpdate": time.Now().UnixMilli(),
		}, nil
	})
	h("GET /admin/v2/broker-stats/mbeans", z.Superuser, func(r *http.Request) (any, error) {
		return []map[string]any{}, nil
	})
	// The stats of the topic partitions this broker owns, by namespace and
	// bundle (one per namespace), as Pulsar lays them out.
	h("GET /admin/v2/broker-stats/topics", z.Superuser, func(r *http.Request) (any, error) {
		out := map[string]map[string]map[string]map[string]any{}
		for ns, byDomain := range b.OwnedTopicStats() {
			out[ns] = map[string]map[string]map[string]any{bundleRange: byDomain}
		}
		return out, nil
	})
	h("GET /admin/v2/broker-stats/allocator-stats/{allocator}", z.Superuser, func(r *http.Request) (any, error) {
		return nil, fmt.Errorf("%w: Magnetar has no Netty allocators", errs.ErrNotImplemented)
	})
}
