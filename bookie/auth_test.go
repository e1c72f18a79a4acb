package bookie_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/internal/auth"
	"github.com/magnetar-io/magnetar/internal/testutil"
	"github.com/magnetar-io/magnetar/internal/tlsutil"
	"github.com/magnetar-io/magnetar/proto/bookiepb"
)

// secureBookie is a bookie serving TLS and wanting tokens or client
// certificates, with the files to call it.
type secureBookie struct {
	s      *bookie.Server
	ca     *testutil.CA
	signer *auth.Signer
	dir    string
}

func startSecureBookie(t *testing.T, e *env) *secureBookie {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret.key")
	os.WriteFile(secret, []byte("0123456789abcdef0123456789abcdef"), 0o600)
	signer, err := auth.NewSigner(secret, "")
	if err != nil {
		t.Fatal(err)
	}
	ca := testutil.NewCA(t, "cluster")
	cert, key := ca.Issue(t, "bookie-1")
	cfg := e.config(t.TempDir())
	cfg.AuthenticationEnabled, cfg.TokenSecretKey = true, secret
	cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSTrustCertsFile = cert, key, ca.CertFile
	return &secureBookie{s: e.start(t, cfg), ca: ca, signer: signer, dir: dir}
}

// tokenFile writes a token of role.
func (b *secureBookie) tokenFile(t *testing.T, role string) string {
	tok, err := b.signer.Sign(role, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(b.dir, role+".token")
	os.WriteFile(f, []byte(tok+"\n"), 0o600)
	return f
}

func (b *secureBookie) dial(t *testing.T, p auth.Peer) bookiepb.BookieClient {
	opts, err := p.DialOptions()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(b.s.Addr(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return bookiepb.NewBookieClient(conn)
}

// Only the brokers' and autorecovery's roles may use a bookie, with a
// token or a client certificate; anyone else gets a clear refusal on
// every call (unary and stream), and nothing is written.
func TestBookieAcceptsOnlyItsRoles(t *testing.T) {
	e := newEnv(t)
	b := startSecureBookie(t, e)
	trust := tlsutil.Files{Trust: b.ca.CertFile}
	autoCert, autoKey := b.ca.Issue(t, "autorecovery")
	aliceCert, aliceKey := b.ca.Issue(t, "alice")
	strangers := testutil.NewCA(t, "strangers")
	foreignCert, foreignKey := strangers.Issue(t, "broker")
	ctx := ctxT(t)

	for _, c := range []struct {
		name   string
		peer   auth.Peer
		code   codes.Code
		reason string
	}{
		{"broker token", auth.Peer{TLS: true, Files: trust, TokenFile: b.tokenFile(t, "broker")}, codes.OK, ""},
		{"autorecovery certificate", auth.Peer{TLS: true, Files: tlsutil.Files{Trust: b.ca.CertFile, Cert: autoCert, Key: autoKey}}, codes.OK, ""},
		{"no credentials", auth.Peer{TLS: true, Files: trust}, codes.Unauthenticated, "UNAUTHENTICATED"},
		{"a client's token", auth.Peer{TLS: true, Files: trust, TokenFile: b.tokenFile(t, "alice")}, codes.PermissionDenied, "UNAUTHORIZED"},
		{"a client's certificate", auth.Peer{TLS: true, Files: tlsutil.Files{Trust: b.ca.CertFile, Cert: aliceCert, Key: aliceKey}}, codes.PermissionDenied, "UNAUTHORIZED"},
		{"a certificate from another authority", auth.Peer{TLS: true, Files: tlsutil.Files{Trust: b.ca.CertFile, Cert: foreignCert, Key: foreignKey}}, codes.Unavailable, ""},
		{"plaintext to the TLS port", auth.Peer{TokenFile: b.tokenFile(t, "broker")}, codes.Unavailable, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := b.dial(t, c.peer)
			ledgerID := int64(100 + len(c.name))
			_, err := cl.AddEntry(ctx, addReq(ledgerID, 0, []byte("x")))
			_, rerr := cl.ReadEntry(ctx, &bookiepb.ReadEntryRequest{LedgerId: ledgerID, EntryId: 0})
			var serr error
			stream, err2 := cl.AddEntries(ctx)
			if err2 == nil {
				if serr = stream.Send(&bookiepb.AddEntriesRequest{Entries: []*bookiepb.AddEntryRequest{addReq(ledgerID, 1, []byte("y"))}}); serr == nil {
					_, serr = stream.Recv()
				}
			} else {
				serr = err2
			}
			if c.code == codes.OK {
				for what, err := range map[string]error{"add": err, "read": rerr, "stream add": serr} {
					if err != nil {
						t.Fatalf("%s: %v", what, err)
					}
				}
				return
			}
			wantStatus(t, err, c.code, c.reason)
			wantStatus(t, rerr, c.code, c.reason)
			wantStatus(t, serr, c.code, c.reason)
			// Nothing was written.
			admin := b.dial(t, auth.Peer{TLS: true, Files: trust, TokenFile: b.tokenFile(t, "broker")})
			_, err = admin.ReadEntry(ctx, &bookiepb.ReadEntryRequest{LedgerId: ledgerID, EntryId: 0})
			wantStatus(t, err, codes.NotFound, "")
		})
	}
}

// A ledger client with the broker's credentials writes and reads ledgers
// on such bookies.
func TestLedgerClientWithCredentials(t *testing.T) {
	e := newEnv(t)
	b := startSecureBookie(t, e)
	dial, err := auth.Peer{TLS: true, Files: tlsutil.Files{Trust: b.ca.CertFile}, TokenFile: b.tokenFile(t, "broker")}.DialOptions()
	if err != nil {
		t.Fatal(err)
	}
	lc, err := ledger.New(e.store, ledger.Config{DialOptions: dial})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	w, err := lc.Create(ctxT(t), ledger.CreateOptions{Ensemble: 1, WriteQuorum: 1, AckQuorum: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := w.Append(ctxT(t), []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	r, err := lc.Open(ctxT(t), w.ID())
	if err != nil {
		t.Fatal(err)
	}
	entries, err := r.Read(ctxT(t), 0, 2)
	if err != nil || len(entries) != 3 {
		t.Fatalf("read %d entries: %v", len(entries), err)
	}
	// A token file that cannot be read is refused when dialing is set up.
	if _, err := (auth.Peer{TokenFile: filepath.Join(b.dir, "missing")}).DialOptions(); err == nil {
		t.Fatal("a missing token file was accepted")
	}
}

// An add stream outliving its token is ended at the expiry (with the
// leeway tokens are accepted with), after the adds it took are answered,
// with a retriable error: the writer reconnects with a fresh token.
func TestAddStreamEndsWhenItsTokenExpires(t *testing.T) {
	e := newEnv(t)
	b := startSecureBookie(t, e)
	tok, err := b.signer.Sign("broker", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(b.dir, "short.token")
	os.WriteFile(f, []byte(tok), 0o600)
	cl := b.dial(t, auth.Peer{TLS: true, Files: tlsutil.Files{Trust: b.ca.CertFile}, TokenFile: f})
	ctx := ctxT(t)
	stream, err := cl.AddEntries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&bookiepb.AddEntriesRequest{Entries: []*bookiepb.AddEntryRequest{addReq(7, 0, []byte("before"))}}); err != nil {
		t.Fatal(err)
	}
	r, err := stream.Recv()
	if err != nil || len(r.Results) != 1 || r.Results[0].Code != 0 {
		t.Fatalf("the add before the expiry: %+v %v", r, err)
	}
	start := time.Now()
	_, err = stream.Recv()
	wantStatus(t, err, codes.Unavailable, "BOOKIE_UNAVAILABLE")
	if waited := time.Since(start); waited > 30*time.Second {
		t.Fatalf("the stream ended %v after the add", waited)
	}
}
