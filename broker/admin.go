package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/magnetar-io/magnetar/broker/console"
	"github.com/magnetar-io/magnetar/broker/internal/mledger"
	"github.com/magnetar-io/magnetar/internal/ops"
	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/entry"
	"github.com/magnetar-io/magnetar/proto/metapb"
	"github.com/magnetar-io/magnetar/proto/pulsarpb"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// maxAdminBody caps a request body.
const maxAdminBody = 1 << 20

// route registers an admin handler under its authorization rule.
type route func(pattern string, allow rule, fn func(w http.ResponseWriter, r *http.Request) (any, error))

// adminHandler serves the admin REST API under Pulsar's paths
// (/admin/v2/...). Errors are 4xx/5xx with a JSON body {"reason": ...,
// "errorCode": ...} (restCodeOf), unknown paths and methods included:
// Pulsar's {"reason"} plus a machine-readable code. (Not "code": the
// official Go admin library decodes "code" as a number.)
func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	// Every route names its authorization rule (authz.go), checked
	// before the handler runs.
	var h route = func(pattern string, allow rule, fn func(w http.ResponseWriter, r *http.Request) (any, error)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			r.Body = http.MaxBytesReader(w, r.Body, maxAdminBody)
			ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
			defer cancel()
			r = r.WithContext(ctx)
			if err := allow(r); err != nil {
				writeResult(w, nil, err)
				return
			}
			out, err := fn(w, r)
			writeResult(w, out, err)
		})
	}
	// Tenants and namespaces.
	h("GET /admin/v2/tenants", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) { return nonNil(s.md.tenants(r.Context())) })
	h("PUT /admin/v2/tenants/{tenant}", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		var body struct {
			AdminRoles      []string `json:"adminRoles"`
			AllowedClusters []string `json:"allowedClusters"`
		}
		if err := readJSON(r, &body, true); err != nil {
			return nil, err
		}
		for _, role := range body.AdminRoles {
			if err := checkRole(role); err != nil {
				return nil, err
			}
		}
		return nil, s.md.createTenant(r.Context(), r.PathValue("tenant"), &metapb.TenantInfo{AdminRoles: body.AdminRoles, AllowedClusters: body.AllowedClusters})
	})
	h("DELETE /admin/v2/tenants/{tenant}", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		return nil, s.md.deleteTenant(r.Context(), r.PathValue("tenant"))
	})
	h("GET /admin/v2/namespaces/{tenant}", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		if err := s.md.tenantExists(r.Context(), r.PathValue("tenant")); err != nil {
			return nil, err
		}
		return nonNil(s.md.namespaces(r.Context(), r.PathValue("tenant")))
	})
	h("PUT /admin/v2/namespaces/{tenant}/{ns}", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		return nil, s.md.createNamespace(r.Context(), nsOf(r))
	})
	h("DELETE /admin/v2/namespaces/{tenant}/{ns}", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		return nil, s.md.deleteNamespace(r.Context(), nsOf(r))
	})
	h("GET /admin/v2/namespaces/{tenant}/{ns}/retention", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		p, err := s.md.policies(r.Context(), nsOf(r))
		if err != nil {
			return nil, err
		}
		st := s.md.settings(p)
		return retentionJSON{Minutes: durationMinutes(st.retention.Time), SizeMB: sizeMB(st.retention.Size)}, nil
	})
	h("POST /admin/v2/namespaces/{tenant}/{ns}/retention", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		var body retentionJSON
		if err := readJSON(r, &body, false); err != nil {
			return nil, err
		}
		if body.Minutes < -1 || body.SizeMB < -1 {
			return nil, errorf(ErrInvalidArgument, "retention values must be -1 (no limit) or more")
		}
		return nil, s.setPolicies(r.Context(), nsOf(r), func(p *metapb.NamespacePolicies) error {
			p.HasRetention, p.RetentionMinutes, p.RetentionSizeMb = true, body.Minutes, body.SizeMB
			return nil
		})
	})
	h("GET /admin/v2/namespaces/{tenant}/{ns}/messageTTL", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		p, err := s.md.policies(r.Context(), nsOf(r))
		if err != nil {
			return nil, err
		}
		return int64(s.md.settings(p).messageTTL / time.Second), nil
	})
	h("POST /admin/v2/namespaces/{tenant}/{ns}/messageTTL", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		var ttl int32
		if err := readJSON(r, &ttl, false); err != nil {
			return nil, err
		}
		if ttl < 0 {
			return nil, errorf(ErrInvalidArgument, "message TTL %d must not be negative", ttl)
		}
		return nil, s.setPolicies(r.Context(), nsOf(r), func(p *metapb.NamespacePolicies) error {
			p.HasMessageTtl, p.MessageTtlSeconds = true, ttl
			return nil
		})
	})
	h("GET /admin/v2/namespaces/{tenant}/{ns}/persistence", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		p, err := s.md.policies(r.Context(), nsOf(r))
		if err != nil {
			return nil, err
		}
		st := s.md.settings(p)
		return persistenceJSON{Ensemble: st.ensemble, WriteQuorum: st.writeQuorum, AckQuorum: st.ackQuorum}, nil
	})
	h("POST /admin/v2/namespaces/{tenant}/{ns}/persistence", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		var body persistenceJSON
		if err := readJSON(r, &body, false); err != nil {
			return nil, err
		}
		if !(body.Ensemble >= body.WriteQuorum && body.WriteQuorum >= body.AckQuorum && body.AckQuorum >= 1) || body.Ensemble > 64 {
			return nil, errorf(ErrInvalidArgument, "persistence %d/%d/%d: need 64 >= ensemble >= write quorum >= ack quorum >= 1", body.Ensemble, body.WriteQuorum, body.AckQuorum)
		}
		return nil, s.setPolicies(r.Context(), nsOf(r), func(p *metapb.NamespacePolicies) error {
			p.HasPersistence, p.Ensemble, p.WriteQuorum, p.AckQuorum = true, int32(body.Ensemble), int32(body.WriteQuorum), int32(body.AckQuorum)
			return nil
		})
	})
	h("GET /admin/v2/namespaces/{tenant}/{ns}/deduplication", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		p, err := s.md.policies(r.Context(), nsOf(r))
		if err != nil {
			return nil, err
		}
		return s.md.settings(p).dedup, nil
	})
	h("POST /admin/v2/namespaces/{tenant}/{ns}/deduplication", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		var on bool
		if err := readJSON(r, &on, false); err != nil {
			return nil, err
		}
		return nil, s.setPolicies(r.Context(), nsOf(r), func(p *metapb.NamespacePolicies) error {
			p.HasDeduplication, p.Deduplication = true, on
			return nil
		})
	})
	// Topics.
	h("GET /admin/v2/persistent/{tenant}/{ns}", s.onNamespace(opLookup), func(w http.ResponseWriter, r *http.Request) (any, error) {
		if _, err := s.md.policies(r.Context(), nsOf(r)); err != nil {
			return nil, err
		}
		return nonNil(s.md.topics(r.Context(), nsOf(r)))
	})
	h("PUT /admin/v2/persistent/{tenant}/{ns}/{topic}", s.onTopic(opAdmin), func(w http.ResponseWriter, r *http.Request) (any, error) {
		n, err := topicOf(r)
		if err != nil {
			return nil, err
		}
		if exists, err := s.md.topicExists(r.Context(), n); err != nil {
			return nil, err
		} else if exists {
			return nil, errorf(ErrConflict, "topic %s already exists", n)
		}
		_, err = s.getTopic(r.Context(), n, true)
		return nil, err
	})
	h("PUT /admin/v2/persistent/{tenant}/{ns}/{topic}/partitions", s.onTopic(opAdmin), func(w http.ResponseWriter, r *http.Request) (any, error) {
		n, err := topicOf(r)
		if err != nil {
			return nil, err
		}
		var parts int
		if err := readJSON(r, &parts, false); err != nil {
			return nil, err
		}
		return nil, s.md.createPartitioned(r.Context(), n, parts)
	})
	h("GET /admin/v2/persistent/{tenant}/{ns}/{topic}/partitions", s.onTopic(opLookup), func(w http.ResponseWriter, r *http.Request) (any, error) {
		n, err := topicOf(r)
		if err != nil {
			return nil, err
		}
		parts, err := s.md.partitions(r.Context(), n)
		return map[string]int{"partitions": parts}, err
	})
	h("DELETE /admin/v2/persistent/{tenant}/{ns}/{topic}", s.onTopic(opAdmin), func(w http.ResponseWriter, r *http.Request) (any, error) {
		n, err := topicOf(r)
		if err != nil {
			return nil, err
		}
		return nil, s.deleteTopic(r.Context(), n, r.URL.Query().Get("force") == "true")
	})
	h("DELETE /admin/v2/persistent/{tenant}/{ns}/{topic}/partitions", s.onTopic(opAdmin), func(w http.ResponseWriter, r *http.Request) (any, error) {
		n, err := topicOf(r)
		if err != nil {
			return nil, err
		}
		return nil, s.deleteTopic(r.Context(), n, r.URL.Query().Get("force") == "true")
	})
	h("GET /admin/v2/persistent/{tenant}/{ns}/{topic}/stats", s.onTopic(opLookup), func(w http.ResponseWriter, r *http.Request) (any, error) {
		return s.forPartitions(r, "stats", func(t *topic) (any, error) { return t.stats(), nil })
	})
	h("GET /admin/v2/persistent/{tenant}/{ns}/{topic}/internalStats", s.onTopic(opLookup), func(w http.ResponseWriter, r *http.Request) (any, error) {
		return s.forPartitions(r, "internalStats", func(t *topic) (any, error) { return t.internalStats(), nil })
	})
	// Subscriptions.
	h("GET /admin/v2/persistent/{tenant}/{ns}/{topic}/subscriptions", s.onTopic(opConsume), func(w http.ResponseWriter, r *http.Request) (any, error) {
		t, err := s.adminTopic(r)
		if err != nil {
			return nil, err
		}
		names := []string{}
		for _, sub := range t.subscriptions() {
			if sub.durable {
				names = append(names, sub.name)
			}
		}
		return names, nil
	})
	h("PUT /admin/v2/persistent/{tenant}/{ns}/{topic}/subscription/{sub}", s.onTopic(opConsume), func(w http.ResponseWriter, r *http.Request) (any, error) {
		return nil, s.createSubscriptionREST(r)
	})
	h("DELETE /admin/v2/persistent/{tenant}/{ns}/{topic}/subscription/{sub}", s.onTopic(opConsume), func(w http.ResponseWriter, r *http.Request) (any, error) {
		t, err := s.adminTopic(r)
		if err != nil {
			return nil, err
		}
		return nil, t.removeSubscription(r.Context(), r.PathValue("sub"), r.URL.Query().Get("force") == "true")
	})
	h("POST /admin/v2/persistent/{tenant}/{ns}/{topic}/subscription/{sub}/resetcursor/{timestamp}", s.onTopic(opConsume), func(w http.ResponseWriter, r *http.Request) (any, error) {
		t, sub, err := s.adminSubscription(r)
		if err != nil {
			return nil, err
		}
		ts, err := strconv.ParseInt(r.PathValue("timestamp"), 10, 64)
		if err != nil {
			return nil, errorf(ErrInvalidArgument, "timestamp %q: want milliseconds since the epoch", r.PathValue("timestamp"))
		}
		p, err := t.findByTime(r.Context(), ts)
		if err != nil {
			return nil, err
		}
		sub.seek(p, nil)
		return nil, nil
	})
	h("POST /admin/v2/persistent/{tenant}/{ns}/{topic}/subscription/{sub}/resetcursor", s.onTopic(opConsume), func(w http.ResponseWriter, r *http.Request) (any, error) {
		_, sub, err := s.adminSubscription(r)
		if err != nil {
			return nil, err
		}
		var id struct {
			LedgerID int64 `json:"ledgerId"`
			EntryID  int64 `json:"entryId"`
		}
		if err := readJSON(r, &id, false); err != nil {
			return nil, err
		}
		if id.LedgerID < 0 || id.EntryID < 0 {
			return nil, errorf(ErrInvalidArgument, "message id %d:%d", id.LedgerID, id.EntryID)
		}
		sub.seek(mledger.Position{Ledger: id.LedgerID, Entry: id.EntryID}, nil)
		return nil, nil
	})
	h("POST /admin/v2/persistent/{tenant}/{ns}/{topic}/subscription/{sub}/skip/{n}", s.onTopic(opConsume), func(w http.ResponseWriter, r *http.Request) (any, error) {
		t, sub, err := s.adminSubscription(r)
		if err != nil {
			return nil, err
		}
		n, err := strconv.Atoi(r.PathValue("n"))
		if err != nil || n < 1 {
			return nil, errorf(ErrInvalidArgument, "skip count %q must be a positive integer", r.PathValue("n"))
		}
		return nil, sub.skip(r.Context(), t, n)
	})
	h("GET /admin/v2/persistent/{tenant}/{ns}/{topic}/subscription/{sub}/position/{n}", s.onTopic(opConsume), func(w http.ResponseWriter, r *http.Request) (any, error) {
		t, sub, err := s.adminSubscription(r)
		if err != nil {
			return nil, err
		}
		n, err := strconv.Atoi(r.PathValue("n"))
		if err != nil || n < 1 || n > 10000 {
			return nil, errorf(ErrInvalidArgument, "position %q must be in 1..10000", r.PathValue("n"))
		}
		return sub.peek(r.Context(), t, n)
	})
	// Cluster.
	h("PUT /admin/v2/persistent/{tenant}/{ns}/{topic}/unload", s.onTopic(opAdmin), func(w http.ResponseWriter, r *http.Request) (any, error) {
		n, err := topicOf(r)
		if err != nil {
			return nil, err
		}
		if n.PartitionIndex() < 0 {
			if parts, err := s.md.partitions(r.Context(), n); err != nil {
				return nil, err
			} else if parts > 0 {
				return nil, errorf(ErrNotAllowed, "%s is partitioned: unload its partitions (%s ...)", n, n.Partition(0))
			}
		}
		if err := s.ownedElsewhere(r.Context(), topicPath(n), r); err != nil {
			return nil, err
		}
		return nil, s.unloadTopic(r.Context(), n)
	})
	h("PUT /admin/v2/namespaces/{tenant}/{ns}/unload", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		ns := r.PathValue("tenant") + "/" + r.PathValue("ns")
		if _, err := s.md.policies(r.Context(), ns); err != nil {
			return nil, err
		}
		n, err := s.unloadNamespace(r.Context(), ns)
		return map[string]int{"unloaded": n}, err
	})
	h("GET /admin/v2/owners", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		owners := map[string]string{}
		err := s.store.ListAll(r.Context(), metastore.OwnersPrefix, metastore.ListOptions{}, func(kv metastore.KV) error {
			owner, _, _ := strings.Cut(string(kv.Value), "\n")
			owners["persistent://"+strings.TrimPrefix(kv.Key, metastore.OwnersPrefix)] = owner
			return nil
		})
		return owners, err
	})
	s.clusterRoutes(h)
	s.brokerRoutes(h)
	s.bookieRoutes(h)
	s.permissionRoutes(h)
	mux.Handle("GET "+console.Prefix, console.Handler())
	mux.Handle("GET /console", http.RedirectHandler(console.Prefix, http.StatusMovedPermanently))
	// With authorization on, profiles are for superusers (the command line
	// they show may hold a key), and so is /metrics when it wants
	// credentials at all.
	superuser := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := s.superuserOnly(r); err != nil {
				writeResult(w, nil, err)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	o := ops.Options{Health: s.healthChecks(), Metrics: s.gather, Pprof: s.cfg.Pprof, PprofGuard: superuser}
	if s.cfg.AuthenticateMetricsEndpoint {
		o.MetricsGuard = superuser
	}
	ops.Register(mux, o)
	// With authentication on, every path needs credentials but the
	// probes' (and /metrics unless --authenticate-metrics-endpoint).
	open := func(r *http.Request) bool {
		switch r.URL.Path {
		case "/healthz", "/readyz", "/admin/v2/brokers/ready":
			return true
		case "/metrics":
			return !s.cfg.AuthenticateMetricsEndpoint
		}
		// The console's files hold no data; it calls the API with the
		// user's token.
		return r.URL.Path == "/console" || strings.HasPrefix(r.URL.Path, console.Prefix)
	}
	return s.auth.HTTP(jsonRoutingErrors(mux), open, func(w http.ResponseWriter, _ *http.Request, err error) {
		writeResult(w, nil, err)
	})
}

// jsonRoutingErrors serves requests with mux, answering those it has no
// handler for in the API's JSON shape: 404 UNKNOWN_PATH for a path no
// pattern matches, 405 METHOD_NOT_ALLOWED (with mux's Allow header) for a
// path some pattern matches with another method. ServeMux decides which
// (a path matched with another method is its 405); it is asked, and its
// own plain-text answer is replaced.
func jsonRoutingErrors(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" { // a handler, or mux's redirect to a clean path
			mux.ServeHTTP(w, r)
			return
		}
		rec := &headerRecorder{header: http.Header{}}
		h.ServeHTTP(rec, r)
		if rec.status == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", rec.header.Get("Allow"))
			writeResult(w, nil, fmt.Errorf("%w: %s %s (allowed: %s)", ErrMethodNotAllowed, r.Method, r.URL.Path, rec.header.Get("Allow")))
			return
		}
		writeResult(w, nil, fmt.Errorf("%w: %s %s", ErrUnknownPath, r.Method, r.URL.Path))
	})
}

// headerRecorder keeps the status and headers a handler writes and drops
// its body.
type headerRecorder struct {
	header http.Header
	status int
}

func (h *headerRecorder) Header() http.Header { return h.header }

func (h *headerRecorder) WriteHeader(status int) {
	if h.status == 0 {
		h.status = status
	}
}

func (h *headerRecorder) Write(b []byte) (int, error) {
	h.WriteHeader(http.StatusOK)
	return len(b), nil
}

type retentionJSON struct {
	Minutes int64 `json:"retentionTimeInMinutes"`
	SizeMB  int64 `json:"retentionSizeInMB"`
}

type persistenceJSON struct {
	Ensemble    int `json:"bookkeeperEnsemble"`
	WriteQuorum int `json:"bookkeeperWriteQuorum"`
	AckQuorum   int `json:"bookkeeperAckQuorum"`
}

func durationMinutes(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return int64(d / time.Minute)
}

func sizeMB(b int64) int64 {
	if b < 0 {
		return -1
	}
	return b >> 20
}

func nsOf(r *http.Request) string { return r.PathValue("tenant") + "/" + r.PathValue("ns") }

func topicOf(r *http.Request) (topicname.Name, error) {
	return topicname.Parse("persistent://" + nsOf(r) + "/" + r.PathValue("topic"))
}

func nonNil(v []string, err error) (any, error) {
	if v == nil {
		v = []string{}
	}
	return v, err
}

// readJSON decodes the request body; an empty body is an error unless
// optional.
func readJSON(r *http.Request, v any, optional bool) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return errorf(ErrInvalidArgument, "request body: %v", err)
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		if optional {
			return nil
		}
		return errorf(ErrInvalidArgument, "request body is empty")
	}
	if err := json.Unmarshal(body, v); err != nil {
		return errorf(ErrInvalidArgument, "request body: %v", err)
	}
	return nil
}

// writeResult writes a JSON result, 204 for none, or the error.
func writeResult(w http.ResponseWriter, out any, err error) {
	w.Header().Set("Content-Type", "application/json")
	var redirect *redirectError
	if errors.As(err, &redirect) {
		// 307 keeps the method and body: the owner answers.
		w.Header().Set("Location", redirect.url)
		w.WriteHeader(http.StatusTemporaryRedirect)
		json.NewEncoder(w).Encode(map[string]string{"reason": redirect.Error(), "errorCode": "REDIRECT"})
		return
	}
	if err != nil {
		code, status := restCodeOf(err)
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]string{"reason": err.Error(), "errorCode": code})
		return
	}
	if out == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if text, ok := out.(plainText); ok {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, string(text))
		return
	}
	json.NewEncoder(w).Encode(out)
}

func (s *Server) setPolicies(ctx context.Context, ns string, fn func(*metapb.NamespacePolicies) error) error {
	if err := s.md.updatePolicies(ctx, ns, fn); err != nil {
		return err
	}
	p, err := s.md.policies(ctx, ns)
	if err != nil {
		return err
	}
	set := s.md.settings(p)
	for _, t := range s.loadedTopics() {
		if t.name.NamespaceName() == ns {
			t.setSettings(set)
		}
	}
	return nil
}

// adminTopic loads the topic of an admin request (it must exist); a
// topic another broker owns is answered by a redirect to it.
func (s *Server) adminTopic(r *http.Request) (*topic, error) {
	n, err := topicOf(r)
	if err != nil {
		return nil, err
	}
	if err := s.ownedElsewhere(r.Context(), topicPath(n), r); err != nil {
		return nil, err
	}
	return s.getTopic(r.Context(), n, false)
}

func (s *Server) adminSubscription(r *http.Request) (*topic, *subscription, error) {
	t, err := s.adminTopic(r)
	if err != nil {
		return nil, nil, err
	}
	sub, err := t.subscription(r.PathValue("sub"))
	return t, sub, err
}

// forPartitions runs fn on a topic, or on each partition of a partitioned
// topic (the result then maps partition names to results).
func (s *Server) forPartitions(r *http.Request, what string, fn func(*topic) (any, error)) (any, error) {
	n, err := topicOf(r)
	if err != nil {
		return nil, err
	}
	parts, err := s.md.partitions(r.Context(), n)
	if err != nil {
		return nil, err
	}
	if parts == 0 {
		t, err := s.adminTopic(r)
		if err != nil {
			return nil, err
		}
		return fn(t)
	}
	// Each partition is answered by its owner: this broker (which loads
	// the partitions nobody owns), or the one another broker asks.
	out := map[string]any{}
	for i := 0; i < parts; i++ {
		pn := n.Partition(i)
		err := s.ownedElsewhere(r.Context(), topicPath(pn), r)
		var redirect *redirectError
		if errors.As(err, &redirect) {
			u, _ := url.Parse(redirect.url)
			// Path is unescaped; String escapes it.
			u.Path = "/admin/v2/persistent/" + pn.NamespaceName() + "/" + pn.Local + "/" + what
			u.RawPath, u.RawQuery = "", ""
			if out[pn.String()], err = s.fetchJSON(r.Context(), u.String()); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		t, err := s.getTopic(r.Context(), pn, true)
		if err != nil {
			return nil, err
		}
		if out[t.name.String()], err = fn(t); err != nil {
			return nil, err
		}
	}
	return map[string]any{"partitions": out}, nil
}

// fetchJSON gets a JSON document from another broker's admin API.
func (s *Server) fetchJSON(ctx context.Context, u string) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.peerDo(req)
	if err != nil {
		return nil, errorf(ErrServiceNotReady, "ask the owner: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, errorf(ErrServiceNotReady, "ask the owner: %v", err)
	}
	if resp.StatusCode != http.StatusOK || !json.Valid(body) {
		return nil, errorf(ErrServiceNotReady, "the owner answered %s: %s", resp.Status, bytes.TrimSpace(body))
	}
	return body, nil
}

// deleteTopic deletes a topic (every partition of a partitioned one): its
// subscriptions, ledgers and metadata.
func (s *Server) deleteTopic(ctx context.Context, n topicname.Name, force bool) error {
	parts, err := s.md.partitions(ctx, n)
	if err != nil {
		return err
	}
	names := []topicname.Name{n}
	if parts > 0 {
		names = names[:0]
		for i := 0; i < parts; i++ {
			names = append(names, n.Partition(i))
		}
	}
	for _, pn := range names {
		if exists, err := s.md.topicExists(ctx, pn); err != nil {
			return err
		} else if !exists {
			if parts > 0 {
				continue // a partition never used
			}
			return errorf(ErrTopicNotFound, "%s", pn)
		}
		t, err := s.getTopic(ctx, pn, false)
		if err != nil {
			return err
		}
		if err := t.delete(ctx, force); err != nil {
			return err
		}
		s.mu.Lock()
		_, loaded := s.mu.topics[topicPath(pn)]
		delete(s.mu.topics, topicPath(pn))
		s.mu.Unlock()
		if loaded {
			s.metrics.ownership.WithLabelValues("released").Inc()
		}
	}
	if parts > 0 {
		if err := s.store.Delete(ctx, metastore.PartitionedKey(topicPath(n))); err != nil {
			return err
		}
	}
	if n.PartitionIndex() < 0 {
		if err := s.dropTopicGrants(ctx, n); err != nil {
			return fmt.Errorf("%s is deleted, but its grants are not (delete them with DELETE .../permissions/{role}): %w", n, err)
		}
	}
	return nil
}

// ---- topic admin operations ----

func (t *topic) setSettings(set settings) {
	t.mu.Lock()
	t.mu.set = set
	t.mu.Unlock()
	t.ml.SetConfig(t.mlConfig())
}

// delete removes the topic's subscriptions, ledgers and metadata, then
// unloads it.
func (t *topic) delete(ctx context.Context, force bool) error {
	t.mu.Lock()
	busy := len(t.mu.producers)
	for _, s := range t.mu.subs {
		busy += s.consumerCount()
	}
	t.mu.Unlock()
	if busy > 0 && !force {
		return errorf(ErrNotAllowed, "%s has %d connected producers and consumers (use force)", t.name, busy)
	}
	for _, s := range t.subscriptions() {
		if err := t.removeSubscription(ctx, s.name, true); err != nil {
			return err
		}
	}
	refs := t.ml.Ledgers()
	if err := t.close(ctx); err != nil {
		return err
	}
	for _, ref := range refs {
		t.s.ledgers.Delete(ctx, ref.LedgerId)
	}
	// Ownership was released by close: the keys go unguarded, but nobody
	// else may load the topic meanwhile either way: it is being deleted.
	for _, key := range []string{metastore.ManagedLedgerKey(t.path), metastore.DedupKey(t.path)} {
		if err := t.s.store.Delete(ctx, key); err != nil {
			return err
		}
	}
	return nil
}

type topicStats struct {
	StorageSize int64 `json:"storageSize"`
	Entries     int64 `json:"entries"`
	// Counters since the partition was loaded here, and Pulsar's rates
	// over the last stats window (--stats-interval).
	MsgInCounter     int64                        `json:"msgInCounter"`
	BytesInCounter   int64                        `json:"bytesInCounter"`
	MsgOutCounter    int64                        `json:"msgOutCounter"`
	BytesOutCounter  int64                        `json:"bytesOutCounter"`
	MsgRateIn        float64                      `json:"msgRateIn"`
	MsgRateOut       float64                      `json:"msgRateOut"`
	MsgThroughputIn  float64                      `json:"msgThroughputIn"`
	MsgThroughputOut float64                      `json:"msgThroughputOut"`
	Publishers       []map[string]any             `json:"publishers"`
	Subscriptions    map[string]subscriptionStats `json:"subscriptions"`
}

func (t *topic) stats() topicStats {
	st := topicStats{Subscriptions: map[string]subscriptionStats{}, Publishers: []map[string]any{}}
	c := t.traffic.read(time.Now())
	st.MsgInCounter, st.BytesInCounter, st.MsgOutCounter, st.BytesOutCounter = c.msgIn, c.bytesIn, c.msgOut, c.bytesOut
	r, _, _ := t.win.get()
	st.MsgRateIn, st.MsgRateOut, st.MsgThroughputIn, st.MsgThroughputOut = r.MsgIn, r.MsgOut, r.BytesIn, r.BytesOut
	for _, ref := range t.ml.Ledgers() {
		st.StorageSize += ref.Size
		st.Entries += ref.Entries
	}
	t.mu.Lock()
	for name := range t.mu.producers {
		st.Publishers = append(st.Publishers, map[string]any{"producerName": name})
	}
	t.mu.Unlock()
	for _, s := range t.subscriptions() {
		st.Subscriptions[s.name] = s.stats()
	}
	return st
}

func (t *topic) internalStats() map[string]any {
	ledgers := []map[string]any{}
	for _, ref := range t.ml.Ledgers() {
		ledgers = append(ledgers, map[string]any{"ledgerId": ref.LedgerId, "entries": ref.Entries, "size": ref.Size, "closed": ref.Closed,
			"createdAt": time.UnixMilli(ref.CreatedAtUnixMs).UTC().Format(time.RFC3339Nano)})
	}
	cursors := map[string]any{}
	for _, s := range t.subscriptions() {
		cs := s.cur.Stats()
		cursors[s.name] = map[string]any{"markDeletePosition": cs.MarkDelete.String(), "readPosition": cs.ReadPos.String(),
			"cursorLedger": cs.CursorLedger, "individuallyDeletedMessages": cs.AckedAfterMarkDelete, "ackHoles": cs.Holes, "durable": s.durable}
	}
	return map[string]any{"lastConfirmedEntry": t.ml.LastConfirmed().String(), "ledgers": ledgers, "cursors": cursors}
}

// skip acknowledges the next n unacknowledged entries.
func (s *subscription) skip(ctx context.Context, t *topic, n int) error {
	p := t.ml.Next(s.cur.MarkDelete())
	last := t.ml.LastConfirmed()
	for n > 0 && !last.Before(p) {
		if !s.cur.IsAcked(p) {
			s.cur.Ack(p)
			n--
		}
		p = t.ml.Next(p)
	}
	s.mu.Lock()
	s.refreshPendingLocked()
	s.rewindLocked()
	s.mu.Unlock()
	return nil
}

type peekedMessage struct {
	MessageID    string            `json:"messageId"`
	PublishTime  int64             `json:"publishTime"`
	ProducerName string            `json:"producerName"`
	Key          string            `json:"key,omitempty"`
	Properties   map[string]string `json:"properties,omitempty"`
	Payload      []byte            `json:"payload"`
}

// peek returns the messages of the n-th unacknowledged entry.
func (s *subscription) peek(ctx context.Context, t *topic, n int) ([]peekedMessage, error) {
	p := t.ml.Next(s.cur.MarkDelete())
	last := t.ml.LastConfirmed()
	for ; !last.Before(p); p = t.ml.Next(p) {
		if s.cur.IsAcked(p) {
			continue
		}
		if n--; n == 0 {
			break
		}
	}
	if last.Before(p) || n > 0 {
		return nil, errorf(ErrNotFound, "the subscription has fewer unacknowledged messages")
	}
	es, err := t.ml.Read(ctx, p, 1)
	if err != nil {
		return nil, err
	}
	if len(es) == 0 {
		return nil, errorf(ErrNotFound, "no entry at %v", p)
	}
	return decodeMessages(es[0].Data, p)
}

// decodeMessages expands a stored entry into its messages.
func decodeMessages(data []byte, p mledger.Position) ([]peekedMessage, error) {
	md, payload, err := entry.Decode(data)
	if err != nil {
		return nil, errorf(ErrInvalidMessage, "entry %v: %v", p, err)
	}
	raw, err := entry.Decompress(md.GetCompression(), payload, int(md.GetUncompressedSize()))
	if md.GetCompression() == pulsarpb.CompressionType_NONE {
		raw, err = payload, nil
	}
	if err != nil {
		return nil, errorf(ErrInvalidMessage, "entry %v: %v", p, err)
	}
	props := func(kvs []*pulsarpb.KeyValue) map[string]string {
		if len(kvs) == 0 {
			return nil
		}
		m := map[string]string{}
		for _, kv := range kvs {
			m[kv.GetKey()] = kv.GetValue()
		}
		return m
	}
	if md.NumMessagesInBatch == nil {
		return []peekedMessage{{MessageID: p.String(), PublishTime: int64(md.GetPublishTime()), ProducerName: md.GetProducerName(),
			Key: md.GetPartitionKey(), Properties: props(md.Properties), Payload: raw}}, nil
	}
	singles, err := entry.SplitBatch(raw, int(md.GetNumMessagesInBatch()))
	if err != nil {
		return nil, errorf(ErrInvalidMessage, "entry %v: %v", p, err)
	}
	out := make([]peekedMessage, 0, len(singles))
	for i, sm := range singles {
		out = append(out, peekedMessage{MessageID: fmt.Sprintf("%s:%d", p, i), PublishTime: int64(md.GetPublishTime()), ProducerName: md.GetProducerName(),
			Key: sm.Meta.GetPartitionKey(), Properties: props(sm.Meta.Properties), Payload: sm.Payload})
	}
	return out, nil
}
