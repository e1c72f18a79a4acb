package broker

import (
	"context"

	"github.com/magnetar-io/magnetar/bookie/autorecovery"
)

// The bookies resource of the admin API (broker/admin/bookies.go):
// autorecovery's records in the broker's store.

func (b adminBackend) Bookies(ctx context.Context) ([]autorecovery.BookieStatus, error) {
	return autorecovery.Bookies(ctx, b.s.store)
}

func (b adminBackend) UnderReplicated(ctx context.Context) ([]autorecovery.Mark, int, error) {
	return autorecovery.UnderReplicated(ctx, b.s.store)
}

func (b adminBackend) Rebalance(ctx context.Context) (autorecovery.RebalanceStatus, error) {
	return autorecovery.GetRebalance(ctx, b.s.store)
}

func (b adminBackend) RequestRebalance(ctx context.Context, targetSpread float64) error {
	return autorecovery.RequestRebalance(ctx, b.s.store, targetSpread)
}

func (b adminBackend) Decommission(ctx context.Context, bookie string) error {
	return autorecovery.Decommission(ctx, b.s.store, bookie)
}

func (b adminBackend) Recommission(ctx context.Context, bookie string) error {
	return autorecovery.Recommission(ctx, b.s.store, bookie)
}
