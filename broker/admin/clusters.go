package admin

import (
	"fmt"
	"net/http"

	"github.com/magnetar-io/magnetar/broker/internal/errs"
)

// Clusters is what the clusters resource asks of the broker: the one
// cluster a Magnetar deployment is.
type Clusters interface {
	// ClusterName is the deployment's cluster (--cluster-name).
	ClusterName() string
	// ServiceURLs are this broker's advertised addresses.
	ServiceURLs() ServiceURLs
}

// ServiceURLs are where a broker is reached, as Pulsar's ClusterData
// names them; "" for what it does not serve.
type ServiceURLs struct {
	// Web and WebTLS are the admin API's (http://, https://).
	Web, WebTLS string
	// Broker and BrokerTLS are where Pulsar's clients connect (pulsar://,
	// pulsar+ssl://).
	Broker, BrokerTLS string
}

// clusterRoutes serves Pulsar's /admin/v2/clusters for the one cluster a
// Magnetar deployment is: its data, no peers, no failure domains.
// Clusters are not created, changed or deleted through the API.
func clusterRoutes(h route, z Rules, b Clusters) {
	h("GET /admin/v2/clusters", z.Superuser, func(r *http.Request) (any, error) {
		return []string{b.ClusterName()}, nil
	})
	h("GET /admin/v2/clusters/{cluster}", z.Superuser, func(r *http.Request) (any, error) {
		if err := ownCluster(b, r); err != nil {
			return nil, err
		}
		return clusterData(b.ServiceURLs()), nil
	})
	h("GET /admin/v2/clusters/{cluster}/peers", z.Superuser, func(r *http.Request) (any, error) {
		return []string{}, ownCluster(b, r)
	})
	// Pulsar lists failure domains without checking the cluster, and
	// answers 412 for a domain of a cluster it does not know.
	h("GET /admin/v2/clusters/{cluster}/failureDomains", z.Superuser, func(r *http.Request) (any, error) {
		return map[string]any{}, nil
	})
	h("GET /admin/v2/clusters/{cluster}/failureDomains/{domain}", z.Superuser, func(r *http.Request) (any, error) {
		if err := ownCluster(b, r); err != nil {
			return nil, fmt.Errorf("%w: %v", errs.ErrNotAllowed, err)
		}
		return nil, fmt.Errorf("%w: %q: Magnetar has none", errs.ErrFailureDomainNotFound, r.PathValue("domain"))
	})
	// Pulsar's answer to creating a cluster that exists is 409, to
	// changing one it does not know 404; any other change is one Magnetar
	// does not make.
	h("PUT /admin/v2/clusters/{cluster}", z.Superuser, func(r *http.Request) (any, error) {
		if r.PathValue("cluster") == b.ClusterName() {
			return nil, fmt.Errorf("%w: cluster %q", errs.ErrConflict, b.ClusterName())
		}
		return nil, oneCluster(b)
	})
	for _, p := range []string{
		"POST /admin/v2/clusters/{cluster}", "DELETE /admin/v2/clusters/{cluster}",
		"POST /admin/v2/clusters/{cluster}/peers",
		"POST /admin/v2/clusters/{cluster}/failureDomains/{domain}",
		"DELETE /admin/v2/clusters/{cluster}/failureDomains/{domain}",
	} {
		h(p, z.Superuser, func(r *http.Request) (any, error) {
			if err := ownCluster(b, r); err != nil {
				return nil, err
			}
			return nil, oneCluster(b)
		})
	}
}

func oneCluster(b Clusters) error {
	return fmt.Errorf("%w: a Magnetar deployment is one cluster, %q, set by --cluster-name; clusters, peers and failure domains are not changed through the API",
		errs.ErrNotImplemented, b.ClusterName())
}

// ownCluster checks the {cluster} of a path: Pulsar answers 404 for a
// cluster it does not know.
func ownCluster(b Clusters, r *http.Request) error {
	if c := r.PathValue("cluster"); c != b.ClusterName() {
		return fmt.Errorf("%w: %q (this one is %q)", errs.ErrClusterNotFound, c, b.ClusterName())
	}
	return nil
}

// clusterData is Pulsar's ClusterData for this cluster, as seen from this
// broker: its advertised addresses.
func clusterData(u ServiceURLs) map[string]any {
	return map[string]any{
		"serviceUrl": u.Web, "serviceUrlTls": u.WebTLS,
		"brokerServiceUrl": u.Broker, "brokerServiceUrlTls": u.BrokerTLS,
		"peerClusterNames": []string{},
	}
}
