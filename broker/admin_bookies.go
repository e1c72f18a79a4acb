package broker

import (
	"net/http"

	"github.com/magnetar-io/magnetar/bookie/autorecovery"
)

// bookieRoutes serves the bookies resource: their states, the
// under-replicated ledgers, decommission and recommission.
func (s *Server) bookieRoutes(h route) {
	h("GET /admin/v2/bookies/all", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		return autorecovery.Bookies(r.Context(), s.store)
	})
	h("GET /admin/v2/bookies/under-replicated", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		marks, count, err := autorecovery.UnderReplicated(r.Context(), s.store)
		if err != nil {
			return nil, err
		}
		return map[string]any{"count": count, "marks": marks}, nil
	})
	h("GET /admin/v2/bookies/rebalance", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		return autorecovery.GetRebalance(r.Context(), s.store)
	})
	h("POST /admin/v2/bookies/rebalance", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		var body struct {
			TargetSpread float64 `json:"targetSpread"`
		}
		if err := readJSON(r, &body, true); err != nil {
			return nil, err
		}
		return nil, autorecovery.RequestRebalance(r.Context(), s.store, body.TargetSpread)
	})
	h("GET /admin/v2/bookies/{id}", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		all, err := autorecovery.Bookies(r.Context(), s.store)
		if err != nil {
			return nil, err
		}
		for _, b := range all {
			if b.ID == r.PathValue("id") {
				return b, nil
			}
		}
		return nil, errorf(autorecovery.ErrUnknownBookie, "no bookie %q", r.PathValue("id"))
	})
	h("POST /admin/v2/bookies/{id}/decommission", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		return nil, autorecovery.Decommission(r.Context(), s.store, r.PathValue("id"))
	})
	h("POST /admin/v2/bookies/{id}/recommission", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		return nil, autorecovery.Recommission(r.Context(), s.store, r.PathValue("id"))
	})
}
