package broker

import (
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/magnetar-io/magnetar/internal/health"
	"github.com/magnetar-io/magnetar/metastore"
)

// ErrNotImplemented answers an admin call Pulsar has and Magnetar does not
// (docs/pulsar-compatibility.md lists them): HTTP 501, as Pulsar answers
// the calls it does not implement.
var ErrNotImplemented = errors.New("not implemented by Magnetar")

// plainText is a handler's answer sent as text/plain, not JSON (Pulsar's
// health check answers "ok").
type plainText string

// clusterRoutes serves Pulsar's /admin/v2/clusters for the one cluster a
// Magnetar deployment is: its data, no peers, no failure domains.
// Clusters are not created, changed or deleted through the API.
func (s *Server) clusterRoutes(h route) {
	h("GET /admin/v2/clusters", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		return []string{s.cfg.ClusterName}, nil
	})
	h("GET /admin/v2/clusters/{cluster}", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		if err := s.ownCluster(r); err != nil {
			return nil, err
		}
		return s.clusterData(), nil
	})
	h("GET /admin/v2/clusters/{cluster}/peers", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		return []string{}, s.ownCluster(r)
	})
	// Pulsar lists failure domains without checking the cluster, and
	// answers 412 for a domain of a cluster it does not know.
	h("GET /admin/v2/clusters/{cluster}/failureDomains", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		return map[string]any{}, nil
	})
	h("GET /admin/v2/clusters/{cluster}/failureDomains/{domain}", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		if err := s.ownCluster(r); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrNotAllowed, err)
		}
		return nil, fmt.Errorf("%w: %q: Magnetar has none", ErrFailureDomainNotFound, r.PathValue("domain"))
	})
	// Pulsar's answer to creating a cluster that exists is 409, to
	// changing one it does not know 404; any other change is one Magnetar
	// does not make.
	h("PUT /admin/v2/clusters/{cluster}", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		if r.PathValue("cluster") == s.cfg.ClusterName {
			return nil, fmt.Errorf("%w: cluster %q", ErrConflict, s.cfg.ClusterName)
		}
		return nil, s.oneCluster()
	})
	for _, p := range []string{
		"POST /admin/v2/clusters/{cluster}", "DELETE /admin/v2/clusters/{cluster}",
		"POST /admin/v2/clusters/{cluster}/peers",
		"POST /admin/v2/clusters/{cluster}/failureDomains/{domain}",
		"DELETE /admin/v2/clusters/{cluster}/failureDomains/{domain}",
	} {
		h(p, s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
			if err := s.ownCluster(r); err != nil {
				return nil, err
			}
			return nil, s.oneCluster()
		})
	}
}

func (s *Server) oneCluster() error {
	return fmt.Errorf("%w: a Magnetar deployment is one cluster, %q, set by --cluster-name; clusters, peers and failure domains are not changed through the API",
		ErrNotImplemented, s.cfg.ClusterName)
}

// ownCluster checks the {cluster} of a path: Pulsar answers 404 for a
// cluster it does not know.
func (s *Server) ownCluster(r *http.Request) error {
	if c := r.PathValue("cluster"); c != s.cfg.ClusterName {
		return fmt.Errorf("%w: %q (this one is %q)", ErrClusterNotFound, c, s.cfg.ClusterName)
	}
	return nil
}

// clusterData is Pulsar's ClusterData for this cluster, as seen from this
// broker: its advertised addresses. The broker URL is where Pulsar's
// clients connect: the client port (pulsar://, without TLS) or the port of
// its own for Pulsar's protocol (--pulsar-listen; pulsar+ssl:// with TLS).
// With TLS on, only the TLS URLs are given.
func (s *Server) clusterData() map[string]any {
	web, webTLS := "http://"+s.AdvertisedHTTPAddr(), ""
	if s.tls != nil {
		web, webTLS = "", "https://"+s.AdvertisedHTTPAddr()
	}
	broker, brokerTLS := "pulsar://"+s.id, ""
	switch {
	case s.pulsarLn != nil && s.tls != nil:
		broker, brokerTLS = "", "pulsar+ssl://"+s.AdvertisedPulsarAddr()
	case s.pulsarLn != nil:
		broker = "pulsar://" + s.AdvertisedPulsarAddr()
	case s.tls != nil:
		broker = "" // the client port speaks only gRPC over TLS
	}
	return map[string]any{
		"serviceUrl": web, "serviceUrlTls": webTLS,
		"brokerServiceUrl": broker, "brokerServiceUrlTls": brokerTLS,
		"peerClusterNames": []string{},
	}
}

// brokerRoutes serves Pulsar's /admin/v2/brokers and
// /admin/v2/broker-stats calls for what Magnetar has.
func (s *Server) brokerRoutes(h route) {
	h("GET /admin/v2/brokers", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		return nonNil(s.md.listChildren(r.Context(), metastore.BrokersAvailablePrefix))
	})
	h("GET /admin/v2/brokers/{cluster}", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		if err := s.ownCluster(r); err != nil {
			return nil, err
		}
		return nonNil(s.md.listChildren(r.Context(), metastore.BrokersAvailablePrefix))
	})
	// Every live broker's registration: addresses and load.
	h("GET /admin/v2/brokers/load", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		return s.liveBrokers(r.Context())
	})
	// The namespaces a broker owns topics of; Magnetar assigns partitions,
	// not bundles, so each namespace is one whole bundle.
	h("GET /admin/v2/brokers/{cluster}/{broker}/ownedNamespaces", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		if err := s.ownCluster(r); err != nil {
			return nil, err
		}
		broker := r.PathValue("broker")
		live, err := s.liveBrokers(r.Context())
		if err != nil {
			return nil, err
		}
		if _, ok := live[broker]; !ok {
			return nil, fmt.Errorf("%w: %q is not a live broker", ErrBrokerNotFound, broker)
		}
		owned := map[string]any{}
		err = s.store.ListAll(r.Context(), metastore.OwnersPrefix, metastore.ListOptions{}, func(kv metastore.KV) error {
			owner, _, _ := strings.Cut(string(kv.Value), "\n")
			if owner != broker {
				return nil
			}
			parts := strings.SplitN(strings.TrimPrefix(kv.Key, metastore.OwnersPrefix), "/", 3)
			if len(parts) == 3 {
				owned[parts[0]+"/"+parts[1]+"/0x00000000_0xffffffff"] = map[string]any{
					"broker_assignment": "primary", "is_controlled": false, "is_active": true}
			}
			return nil
		})
		return owned, err
	})
	// Pulsar's health check writes and reads a message; Magnetar's is the
	// broker's readiness (serving, registered under its live session),
	// each check bounded as /readyz bounds it. Pulsar's readiness probe
	// answers the same, open to anyone as there.
	ready := func(w http.ResponseWriter, r *http.Request) (any, error) {
		if _, failed := health.Run(r.Context(), s.healthChecks().Ready); failed != "" {
			return nil, fmt.Errorf("%w: %s", ErrServiceNotReady, failed)
		}
		return plainText("ok"), nil
	}
	h("GET /admin/v2/brokers/health", s.superuserOnly, ready)
	h("GET /admin/v2/brokers/ready", anyone, ready)
	for _, p := range []string{"GET /admin/v2/brokers/version", "GET /admin/v2/brokers/backlog-quota-check", "POST /admin/v2/brokers/shutdown"} {
		h(p, s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
			return nil, fmt.Errorf("%w: %s (stop a broker by its process: SIGTERM drains it)", ErrNotImplemented, r.URL.Path)
		})
	}
	h("GET /admin/v2/brokers/leaderBroker", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		return nil, fmt.Errorf("%w: Magnetar has no leader broker: each broker sheds its own load", ErrNotImplemented)
	})
	// Settings: none is dynamic (they are flags, environment variables
	// and a file, read at start).
	h("GET /admin/v2/brokers/configuration", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		return []string{}, nil
	})
	h("GET /admin/v2/brokers/configuration/values", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		return map[string]string{}, nil
	})
	h("GET /admin/v2/brokers/configuration/runtime", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		return runtimeConfiguration(s.cfg), nil
	})
	notDynamic := func(w http.ResponseWriter, r *http.Request) (any, error) {
		return nil, fmt.Errorf("%w: %q is not a dynamic setting: Magnetar has none (set it with its flag, environment variable or config file, and restart)",
			ErrNotAllowed, r.PathValue("name"))
	}
	h("POST /admin/v2/brokers/configuration/{name}/{value}", s.superuserOnly, notDynamic)
	h("DELETE /admin/v2/brokers/configuration/{name}", s.superuserOnly, notDynamic)
	h("GET /admin/v2/brokers/internal-configuration", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		// Pulsar 3 fills its older names with the metadata store's too.
		etcd := "etcd:" + strings.Join(s.cfg.Metastore, ",")
		return map[string]string{
			"metadataStoreUrl": etcd, "configurationMetadataStoreUrl": etcd,
			"zookeeperServers": etcd, "configurationStoreServers": etcd,
			"bookkeeperMetadataServiceUri": etcd, "ledgersRootPath": s.cfg.MetastoreRoot,
			"stateStorageServiceUrl": "",
		}, nil
	})
	h("GET /admin/v2/broker-stats/cache", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		size, hits, misses := s.cache.Stats()
		return map[string]any{"sizeBytes": size, "hits": hits, "misses": misses,
			"entriesReadFromBookies": s.storageReads.Load()}, nil
	})
	// This broker's traffic over its last registration interval, in
	// Pulsar's metric names.
	h("GET /admin/v2/broker-stats/metrics", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		live, err := s.liveBrokers(r.Context())
		if err != nil {
			return nil, err
		}
		me := live[s.id]
		return []map[string]any{{
			"dimensions": map[string]string{"broker": s.id, "cluster": s.cfg.ClusterName, "metric": "broker"},
			"metrics": map[string]any{
				"brk_in_rate": me.MsgRateIn, "brk_out_rate": me.MsgRateOut, "brk_in_tp_rate": me.BytesRateIn,
				"brk_no_of_topics": len(s.loadedTopics()), "brk_cpu_cores": me.CPU,
			},
		}}, nil
	})
	// Pulsar's LocalBrokerData, from the same registration.
	h("GET /admin/v2/broker-stats/load-report", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		live, err := s.liveBrokers(r.Context())
		if err != nil {
			return nil, err
		}
		me := live[s.id]
		cd := s.clusterData()
		return map[string]any{
			"webServiceUrl": cd["serviceUrl"], "webServiceUrlTls": cd["serviceUrlTls"],
			"pulsarServiceUrl": cd["brokerServiceUrl"], "pulsarServiceUrlTls": cd["brokerServiceUrlTls"],
			"persistentTopicsEnabled": true, "nonPersistentTopicsEnabled": false,
			"cpu":       map[string]float64{"usage": me.CPU * 100, "limit": float64(runtime.NumCPU()) * 100},
			"msgRateIn": me.MsgRateIn, "msgRateOut": me.MsgRateOut, "msgThroughputIn": me.BytesRateIn,
			"numTopics": len(s.loadedTopics()), "lastUpdate": time.Now().UnixMilli(),
		}, nil
	})
	h("GET /admin/v2/broker-stats/mbeans", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		return []map[string]any{}, nil
	})
	// The stats of the topic partitions this broker owns, by namespace and
	// bundle (one per namespace), as Pulsar lays them out.
	h("GET /admin/v2/broker-stats/topics", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		out := map[string]map[string]map[string]map[string]topicStats{}
		for _, t := range s.loadedTopics() {
			ns := t.name.NamespaceName()
			if out[ns] == nil {
				out[ns] = map[string]map[string]map[string]topicStats{"0x00000000_0xffffffff": {"persistent": {}}}
			}
			out[ns]["0x00000000_0xffffffff"]["persistent"][t.name.String()] = t.stats()
		}
		return out, nil
	})
	h("GET /admin/v2/broker-stats/allocator-stats/{allocator}", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		return nil, fmt.Errorf("%w: Magnetar has no Netty allocators", ErrNotImplemented)
	})
}

// runtimeConfiguration lists a broker's settings by their flag names,
// secrets left out.
func runtimeConfiguration(cfg Config) map[string]string {
	out := map[string]string{}
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
			if opts == "squash" && f.Type.Kind() == reflect.Struct {
				walk(v.Field(i))
				continue
			}
			if name == "" || secretSetting(name) {
				continue
			}
			fv := v.Field(i)
			switch fv.Kind() {
			case reflect.Slice:
				parts := make([]string, fv.Len())
				for j := range parts {
					parts[j] = fmt.Sprint(fv.Index(j).Interface())
				}
				out[name] = strings.Join(parts, ",")
			case reflect.Map:
				var parts []string
				for _, k := range fv.MapKeys() {
					parts = append(parts, fmt.Sprintf("%v=%v", k.Interface(), fv.MapIndex(k).Interface()))
				}
				slices.Sort(parts)
				out[name] = strings.Join(parts, ",")
			default:
				out[name] = fmt.Sprint(fv.Interface())
			}
		}
	}
	walk(reflect.ValueOf(cfg))
	return out
}

// secretSetting reports settings that may hold a secret inline (a token
// or key can be given as data:;base64,...) or name where one is. Matched
// by name, broadly, so that a setting added later is left out too.
func secretSetting(name string) bool {
	for _, w := range []string{"secret", "password", "token", "key", "credential", "username"} {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}

// anyone lets every caller through (with authentication on, the path must
// also be in adminHandler's open list).
func anyone(*http.Request) error { return nil }
