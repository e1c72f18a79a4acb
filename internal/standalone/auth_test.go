package standalone

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/internal/auth"
	"github.com/magnetar-io/magnetar/internal/testutil"
	"github.com/magnetar-io/magnetar/proto/bookiepb"
)

// With authentication by a secret key, standalone's bookies want
// credentials too: a raw call without them, or with a client's token, is
// refused; the broker reaches them with its internal token, so clients'
// messages go through.
func TestStandaloneBookiesWantCredentials(t *testing.T) {
	cfg := testConfig(t, 2)
	key := testutil.NewTokenKey(t)
	cfg.AuthenticationEnabled, cfg.TokenSecretKey = true, key.File
	cfg.LocalBookies = false // the broker's adds over gRPC too, with its token
	ctx, s := start(t, cfg)
	alice := key.Token("alice", time.Hour)

	for _, b := range s.Bookies {
		conn, err := grpc.NewClient(b.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		bc := bookiepb.NewBookieClient(conn)
		_, err = bc.ReadEntry(ctx, &bookiepb.ReadEntryRequest{LedgerId: 1, EntryId: 0})
		if st, _ := status.FromError(err); !strings.Contains(st.Message(), "no credentials") {
			t.Fatalf("bookie %s without credentials: %v", b.ID(), err)
		}
		actx := metadataCtx(ctx, alice)
		_, err = bc.ReadEntry(actx, &bookiepb.ReadEntryRequest{LedgerId: 1, EntryId: 0})
		if st, _ := status.FromError(err); !strings.Contains(st.Message(), `role "alice"`) {
			t.Fatalf("bookie %s with a client's token: %v", b.ID(), err)
		}
	}

	cl := sdkClient(t, s, client.ClientOptions{Authentication: client.NewAuthenticationToken(alice)})
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte("through authenticated bookies")}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(cfg.DataDir, "auth", "internal.token")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the internal token file: %v %v", fi, err)
	}
}

func metadataCtx(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, auth.MetadataKey, "Bearer "+token)
}
