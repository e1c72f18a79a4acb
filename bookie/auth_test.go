package bookie_test

import (
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/bookie/wire"
	"github.com/magnetar-io/magnetar/internal/auth"
	"github.com/magnetar-io/magnetar/internal/testutil"
	"github.com/magnetar-io/magnetar/internal/tlsutil"
	"github.com/magnetar-io/magnetar/proto/bookiepb"
)

// secureBookie is a bookie serving TLS and wanting tokens or client
// certificates, with the files to call it.
type secureBookie struct {
	s   *bookie.Server
	ca  *testutil.CA
	key *testutil.TokenKey
	dir string
}

func startSecureBookie(t *testing.T, e *env) *secureBookie {
	return startSecureBookieOf(t, e, testutil.NewCA(t, "cluster"), testutil.NewTokenKey(t), "bookie-1")
}

// startSecureBookieOf starts a bookie with ca's certificate of name and
// key's tokens.
func startSecureBookieOf(t *testing.T, e *env, ca *testutil.CA, key *testutil.TokenKey, name string) *secureBookie {
	cert, certKey := ca.Issue(t, name)
	cfg := e.config(t.TempDir())
	cfg.AuthenticationEnabled, cfg.TokenSecretKey = true, key.File
	cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSTrustCertsFile = cert, certKey, ca.CertFile
	return &secureBookie{s: e.start(t, cfg), ca: ca, key: key, dir: t.TempDir()}
}

// tokenFile writes a token of role.
func (b *secureBookie) tokenFile(t *testing.T, role string) string {
	return b.key.TokenFile(role, time.Hour)
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
				// A stream the bookie refused takes a Send (or answers it
				// io.EOF); its status comes with Recv.
				if serr = stream.Send(&bookiepb.AddEntriesRequest{Entries: []*bookiepb.AddEntryRequest{addReq(ledgerID, 1, []byte("y"))}}); serr == nil || serr == io.EOF {
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

// writer is a ledger client presenting the token of tokenFile over TLS
// (closed when the test ends), and a new one-copy ledger's writer.
func (b *secureBookie) writer(t *testing.T, e *env, tokenFile string) (*ledger.Client, *ledger.Writer) {
	t.Helper()
	dial, err := auth.Peer{TLS: true, Files: tlsutil.Files{Trust: b.ca.CertFile}, TokenFile: tokenFile}.DialOptions()
	if err != nil {
		t.Fatal(err)
	}
	lc, err := ledger.New(e.store, ledger.Config{DialOptions: dial})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	w, err := lc.Create(ctxT(t), ledger.CreateOptions{Ensemble: 1, WriteQuorum: 1, AckQuorum: 1})
	if err != nil {
		t.Fatal(err)
	}
	return lc, w
}

// A ledger client with the broker's credentials writes and reads ledgers
// on such bookies.
func TestLedgerClientWithCredentials(t *testing.T) {
	e := newEnv(t)
	b := startSecureBookie(t, e)
	lc, w := b.writer(t, e, b.tokenFile(t, "broker"))
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

// An add stream outliving its token is retired at the expiry (with the
// leeway tokens are accepted with): the bookie tells the client to send
// its next adds on a new stream; the old one still answers what is sent
// on it and ends cleanly when the client closes it, or is cut after the
// grace period.
func TestAddStreamIsRetiredWhenItsTokenExpires(t *testing.T) {
	e := newEnv(t)
	b := startSecureBookie(t, e)
	defer bookie.SetRetireGrace(2 * time.Second)()
	ctx := ctxT(t)
	// open opens a stream with a token of a second.
	open := func() bookiepb.Bookie_AddEntriesClient {
		cl := b.dial(t, auth.Peer{TLS: true, Files: tlsutil.Files{Trust: b.ca.CertFile}, TokenFile: b.key.TokenFile("broker", time.Second)})
		stream, err := cl.AddEntries(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return stream
	}
	add := func(stream bookiepb.Bookie_AddEntriesClient, entry int64) {
		t.Helper()
		req := addReq(7, entry, []byte("x"))
		req.RequestId = uint64(entry + 1)
		if err := stream.Send(&bookiepb.AddEntriesRequest{Entries: []*bookiepb.AddEntryRequest{req}}); err != nil {
			t.Fatal(err)
		}
	}
	// recv returns the next results, failing on a stream error.
	recv := func(stream bookiepb.Bookie_AddEntriesClient) []*bookiepb.AddResult {
		t.Helper()
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return r.Results
	}
	for _, closeIt := range []bool{true, false} {
		stream := open()
		add(stream, 0)
		if r := recv(stream); len(r) != 1 || r[0].Code != 0 {
			t.Fatalf("the add before the expiry: %+v", r)
		}
		r := recv(stream) // at the expiry
		if len(r) != 1 || r[0].RequestId != 0 || r[0].Reason != wire.StreamExpired || codes.Code(r[0].Code) != codes.Unavailable {
			t.Fatalf("at the expiry: %+v, want the stream's retirement", r)
		}
		// Still answered after the retirement.
		add(stream, 1)
		if r := recv(stream); len(r) != 1 || r[0].RequestId != 2 || r[0].Code != 0 {
			t.Fatalf("an add after the retirement: %+v", r)
		}
		if closeIt {
			stream.CloseSend()
			if _, err := stream.Recv(); err != io.EOF {
				t.Fatalf("after the client closed the retired stream: %v, want a clean end", err)
			}
			continue
		}
		// Not closed: cut after the grace period.
		_, err := stream.Recv()
		wantStatus(t, err, codes.Unavailable, "BOOKIE_UNAVAILABLE")
	}
}

// A writer whose token is rotated (its file rewritten) goes on through
// the old token's expiry: the bookie retires the stream, the client moves
// to a new one with the new token, and no add fails, so the ledger keeps
// its ensemble.
func TestWriterCarriesOnThroughTokenExpiry(t *testing.T) {
	e := newEnv(t)
	b := startSecureBookie(t, e)
	// A second bookie: a failed add would move the ledger to it.
	startSecureBookieOf(t, e, b.ca, b.key, "bookie-2")
	// A stream kept past its retirement is cut after a second: the client
	// must move on at once.
	defer bookie.SetRetireGrace(time.Second)()
	_, w := b.writer(t, e, b.key.TokenFile("broker", time.Second))
	if _, err := w.Append(ctxT(t), []byte("first")); err != nil {
		t.Fatal(err)
	}
	// Rotated: the file now holds a token of an hour (same path).
	b.key.TokenFile("broker", time.Hour)
	// The old stream's token expires 1s + the 5s leeway after it was made.
	// Adds are kept in flight all along (up to 32), so that some are on the
	// stream whenever it would be cut.
	deadline := time.Now().Add(9 * time.Second)
	slots := make(chan struct{}, 32)
	errs := make(chan error, 1)
	n := 1
	for ; time.Now().Before(deadline); n++ {
		slots <- struct{}{}
		if err := w.AppendAsync(ctxT(t), []byte(fmt.Sprint("entry-", n)), func(_ int64, err error) {
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
			<-slots
		}); err != nil {
			t.Fatalf("append %d: %v", n, err)
		}
		select {
		case err := <-errs:
			t.Fatalf("an append failed across the expiry: %v", err)
		default:
		}
	}
	for i := 0; i < cap(slots); i++ {
		slots <- struct{}{}
	}
	select {
	case err := <-errs:
		t.Fatalf("an append failed across the expiry: %v", err)
	default:
	}
	if segs := len(w.Metadata().Segments); segs != 1 {
		t.Fatalf("the ledger changed its ensemble %d times across the expiry", segs-1)
	}
	if err := w.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}
