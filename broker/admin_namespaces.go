package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/magnetar-io/magnetar/broker/admin"
	"github.com/magnetar-io/magnetar/proto/metapb"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// The namespaces resource of the admin API (broker/admin/namespaces.go).

func (b adminBackend) Namespaces(ctx context.Context, tenant string) ([]string, error) {
	if err := b.s.md.tenantExists(ctx, tenant); err != nil {
		return nil, err
	}
	return b.s.md.namespaces(ctx, tenant)
}

func (b adminBackend) CreateNamespace(ctx context.Context, ns string, p *metapb.NamespacePolicies) error {
	return b.s.md.createNamespace(ctx, ns, p)
}

func (b adminBackend) DeleteNamespace(ctx context.Context, ns string) error {
	return b.s.md.deleteNamespace(ctx, ns)
}

func (b adminBackend) Settings(p *metapb.NamespacePolicies) admin.Settings {
	st := b.s.md.settings(p)
	return admin.Settings{Ensemble: st.ensemble, WriteQuorum: st.writeQuorum, AckQuorum: st.ackQuorum,
		RetentionTime: st.retention.Time, RetentionSize: st.retention.Size, MessageTTL: st.messageTTL, Deduplication: st.dedup}
}

func (b adminBackend) SetPolicies(ctx context.Context, ns string, fn func(*metapb.NamespacePolicies) error) error {
	return b.s.setPolicies(ctx, ns, fn)
}

func (b adminBackend) TopicList(ctx context.Context, ns string, d topicname.Domain) ([]string, error) {
	return b.s.md.topicList(ctx, ns, d)
}

func (b adminBackend) UnloadNamespace(ctx context.Context, ns string) (int, error) {
	return b.s.unloadNamespace(ctx, ns)
}

func (b adminBackend) ClearNamespaceBacklog(r *http.Request, ns, sub string) error {
	return b.s.forNamespaceSubscriptions(r, ns, sub, "/skip_all", http.MethodPost, func(t *topic, sub *subscription) error {
		sub.skipAll(t)
		return nil
	})
}

func (b adminBackend) UnsubscribeNamespace(r *http.Request, ns, sub string) error {
	return b.s.forNamespaceSubscriptions(r, ns, sub, "", http.MethodDelete, func(t *topic, sub *subscription) error {
		return t.removeSubscription(r.Context(), sub.name, false)
	})
}

// adminPath is the path of topic n in the admin API (unescaped):
// /admin/v2/persistent/tenant/namespace/topic, or non-persistent.
func adminPath(n topicname.Name) string {
	return "/admin/v2/" + n.Domain.String() + "/" + n.NamespaceName() + "/" + n.Local
}

// withPath is the redirect's URL with another path (and no query).
func (e *redirectError) withPath(path string) string {
	u, err := url.Parse(e.url)
	if err != nil {
		return e.url
	}
	// Path is unescaped; String escapes it.
	u.Path, u.RawPath, u.RawQuery = path, "", ""
	return u.String()
}

// forNamespaceSubscriptions runs fn on a subscription (or, with sub "",
// every durable subscription) of every topic of a namespace: here for the
// partitions this broker owns or nobody owns, by sending the same call
// (method, .../subscription/{sub}+suffix) to the owner of the others.
func (s *Server) forNamespaceSubscriptions(r *http.Request, ns, sub, suffix, method string, fn func(*topic, *subscription) error) error {
	ctx := r.Context()
	if _, err := s.md.policies(ctx, ns); err != nil {
		return err
	}
	names, err := s.md.topicList(ctx, ns, topicname.Persistent) // non-persistent ones keep no backlog
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range names {
		n, err := topicname.Parse(name)
		if err != nil {
			continue
		}
		if exists, err := s.md.topicExists(ctx, n); err != nil {
			return err
		} else if !exists {
			continue // a partition never used
		}
		if err := s.onSubscriptionsOf(ctx, r, n, sub, suffix, method, fn); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%d topics failed: %w", len(errs), errors.Join(errs...))
	}
	return nil
}

// onSubscriptionsOf is forNamespaceSubscriptions for one topic.
func (s *Server) onSubscriptionsOf(ctx context.Context, r *http.Request, n topicname.Name, sub, suffix, method string, fn func(*topic, *subscription) error) error {
	base := adminPath(n)
	err := s.ownedElsewhere(ctx, topicPath(n), r)
	var redirect *redirectError
	if errors.As(err, &redirect) {
		subs := []string{sub}
		if sub == "" {
			raw, err := s.fetchJSON(ctx, redirect.withPath(base+"/subscriptions"))
			if err != nil {
				return err
			}
			if err := json.Unmarshal(raw, &subs); err != nil {
				return errorf(ErrServiceNotReady, "subscriptions from the owner: %v", err)
			}
		}
		for _, name := range subs {
			err := s.peerSend(ctx, method, redirect.withPath(base+"/subscription/"+name+suffix), nil)
			if err != nil && !errors.Is(err, ErrSubscriptionNotFound) { // a topic without it
				return err
			}
		}
		return nil
	}
	if err != nil {
		return err
	}
	t, err := s.getTopic(ctx, n, false)
	if err != nil {
		return err
	}
	for _, one := range t.subscriptions() {
		if !one.durable || (sub != "" && one.name != sub) {
			continue
		}
		if err := fn(t, one); err != nil {
			return err
		}
	}
	return nil
}
