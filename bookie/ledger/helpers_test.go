package ledger_test

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/magnetar-io/magnetar/proto/bookiepb"
)

// readLACDirect asks one bookie over a fresh connection.
func readLACDirect(addr string, ledgerID int64) (*bookiepb.ReadLACResponse, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return bookiepb.NewBookieClient(conn).ReadLAC(ctx, &bookiepb.ReadLACRequest{LedgerId: ledgerID})
}
