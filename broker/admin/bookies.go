package admin

import (
	"context"
	"net/http"

	"github.com/magnetar-io/magnetar/bookie/autorecovery"
)

// Bookies is what the bookies resource asks of the broker: the bookies'
// states and the autorecovery requests kept in etcd (bookie/autorecovery
// on the broker's store).
type Bookies interface {
	// Bookies lists every bookie that ever registered or is registered,
	// with its state.
	Bookies(ctx context.Context) ([]autorecovery.BookieStatus, error)
	// UnderReplicated lists the under-replicated ledgers' marks (a
	// bounded number of them) and counts them all.
	UnderReplicated(ctx context.Context) (marks []autorecovery.Mark, count int, err error)
	// Rebalance is the current rebalance request (Active false once
	// done).
	Rebalance(ctx context.Context) (autorecovery.RebalanceStatus, error)
	// RequestRebalance asks the auditor to rebalance until the spread
	// is within targetSpread (<= 0: the default).
	RequestRebalance(ctx context.Context, targetSpread float64) error
	// Decommission starts draining a bookie: its ledgers' copies move
	// elsewhere.
	Decommission(ctx context.Context, bookie string) error
	// Recommission stops a drain: the bookie turns writable again.
	Recommission(ctx context.Context, bookie string) error
}

// bookieRoutes serves the bookies resource: their states, the
// under-replicated ledgers, decommission and recommission.
func bookieRoutes(h route, z Rules, b Bookies) {
	h("GET /admin/v2/bookies/all", z.Superuser, func(r *http.Request) (any, error) {
		return b.Bookies(r.Context())
	})
	h("GET /admin/v2/bookies/under-replicated", z.Superuser, func(r *http.Request) (any, error) {
		marks, count, err := b.UnderReplicated(r.Context())
		if err != nil {
			return nil, err
		}
		return map[string]any{"count": count, "marks": marks}, nil
	})
	h("GET /admin/v2/bookies/rebalance", z.Superuser, func(r *http.Request) (any, error) {
		return b.Rebalance(r.Context())
	})
	h("POST /admin/v2/bookies/rebalance", z.Superuser, func(r *http.Request) (any, error) {
		var body struct {
			TargetSpread float64 `json:"targetSpread"`
		}
		if err := readJSON(r, &body, true); err != nil {
			return nil, err
		}
		return nil, b.RequestRebalance(r.Context(), body.TargetSpread)
	})
	h("GET /admin/v2/bookies/{id}", z.Superuser, func(r *http.Request) (any, error) {
		all, err := b.Bookies(r.Context())
		if err != nil {
			return nil, err
		}
		for _, one := range all {
			if one.ID == r.PathValue("id") {
				return one, nil
			}
		}
		return nil, errorf(autorecovery.ErrUnknownBookie, "no bookie %q", r.PathValue("id"))
	})
	h("POST /admin/v2/bookies/{id}/decommission", z.Superuser, func(r *http.Request) (any, error) {
		return nil, b.Decommission(r.Context(), r.PathValue("id"))
	})
	h("POST /admin/v2/bookies/{id}/recommission", z.Superuser, func(r *http.Request) (any, error) {
		return nil, b.Recommission(r.Context(), r.PathValue("id"))
	})
}
