package broker

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/magnetar-io/magnetar/broker/admin"
	"github.com/magnetar-io/magnetar/internal/health"
	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// The clusters, brokers and broker-stats resources of the admin API
// (broker/admin/clusters.go, brokers.go).

func (b adminBackend) ClusterName() string { return b.s.cfg.ClusterName }

// ServiceURLs are this broker's advertised addresses. The broker URL is
// where Pulsar's clients connect: the client port (pulsar://, without
// TLS) or the port of its own for Pulsar's protocol (--pulsar-listen;
// pulsar+ssl:// with TLS). With TLS on, only the TLS URLs are given.
func (b adminBackend) ServiceURLs() admin.ServiceURLs {
	s := b.s
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
	return admin.ServiceURLs{Web: web, WebTLS: webTLS, Broker: broker, BrokerTLS: brokerTLS}
}

func (b adminBackend) LiveBrokers(ctx context.Context) ([]string, error) {
	return b.s.md.listChildren(ctx, metastore.BrokersAvailablePrefix)
}

func (b adminBackend) Registrations(ctx context.Context) (any, error) {
	return b.s.liveBrokers(ctx)
}

func (b adminBackend) OwnedNamespaces(ctx context.Context, broker string) ([]string, error) {
	live, err := b.s.liveBrokers(ctx)
	if err != nil {
		return nil, err
	}
	if _, ok := live[broker]; !ok {
		return nil, fmt.Errorf("%w: %q is not a live broker", ErrBrokerNotFound, broker)
	}
	var out []string
	err = b.s.store.ListAll(ctx, metastore.OwnersPrefix, metastore.ListOptions{}, func(kv metastore.KV) error {
		owner, _, _ := strings.Cut(string(kv.Value), "\n")
		if owner != broker {
			return nil
		}
		if n, err := topicname.ParsePath(strings.TrimPrefix(kv.Key, metastore.OwnersPrefix)); err == nil {
			out = append(out, n.NamespaceName())
		}
		return nil
	})
	return out, err
}

// Ready runs the readiness checks, each bounded as /readyz bounds it.
func (b adminBackend) Ready(ctx context.Context) error {
	if _, failed := health.Run(ctx, b.s.healthChecks().Ready); failed != "" {
		return fmt.Errorf("%w: %s", ErrServiceNotReady, failed)
	}
	return nil
}

func (b adminBackend) RuntimeConfiguration() map[string]string { return runtimeConfiguration(b.s.cfg) }

func (b adminBackend) Metastore() ([]string, string) { return b.s.cfg.Metastore, b.s.cfg.MetastoreRoot }

func (b adminBackend) CacheStats() admin.CacheStats {
	size, hits, misses := b.s.cache.Stats()
	return admin.CacheStats{SizeBytes: size, Hits: hits, Misses: misses, ReadFromBookies: b.s.storageReads.Load()}
}

// Load is this broker's registration's load.
func (b adminBackend) Load(ctx context.Context) (admin.Load, error) {
	live, err := b.s.liveBrokers(ctx)
	if err != nil {
		return admin.Load{}, err
	}
	me := live[b.s.id]
	return admin.Load{Broker: b.s.id, MsgRateIn: me.MsgRateIn, MsgRateOut: me.MsgRateOut, BytesRateIn: me.BytesRateIn,
		CPU: me.CPU, Topics: len(b.s.loadedTopics())}, nil
}

func (b adminBackend) OwnedTopicStats() map[string]map[string]map[string]any {
	out := map[string]map[string]map[string]any{}
	for _, t := range b.s.loadedTopics() {
		ns, d := t.name.NamespaceName(), t.name.Domain.String()
		if out[ns] == nil {
			out[ns] = map[string]map[string]any{}
		}
		if out[ns][d] == nil {
			out[ns][d] = map[string]any{}
		}
		out[ns][d][t.name.String()] = t.stats()
	}
	return out
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
