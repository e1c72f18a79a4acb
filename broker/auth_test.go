package broker_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/internal/auth"
	"github.com/magnetar-io/magnetar/internal/testcluster"
	"github.com/magnetar-io/magnetar/internal/testutil"
)

// authEnv is a broker that authenticates with a secret key, and tokens.
type authEnv struct {
	*env
	secret []byte
	signer *auth.Signer
}

func newAuthEnv(t *testing.T, configure func(*broker.Config)) *authEnv {
	secret := make([]byte, 32)
	rand.Read(secret)
	file := filepath.Join(t.TempDir(), "secret.key")
	if err := os.WriteFile(file, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	signer, err := auth.NewSigner(file, "")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *broker.Config) {
		c.AuthenticationEnabled, c.TokenSecretKey = true, file
		if configure != nil {
			configure(c)
		}
	})
	return &authEnv{env: e, secret: secret, signer: signer}
}

func (e *authEnv) token(t *testing.T, role string, expiry time.Duration) string {
	tok, err := e.signer.Sign(role, expiry)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (e *authEnv) clientWith(t *testing.T, a client.Authentication) client.Client {
	c, err := client.NewClient(client.ClientOptions{URL: "magnetar://" + e.b.Addr(), OperationTimeout: 20 * time.Second, Authentication: a})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func (e *authEnv) admin(t *testing.T, method, path, token string) (int, map[string]any) {
	req, _ := http.NewRequest(method, "http://"+e.b.HTTPAddr()+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body
}

// Clients without valid credentials are refused at once with a clear
// error, and nothing is written: no credentials, a forged signature, the
// "none" algorithm, an expired token.
func TestAuthenticationRefusesBadCredentials(t *testing.T) {
	e := newAuthEnv(t, nil)
	forgedKey := make([]byte, 32)
	rand.Read(forgedKey)
	forged, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "alice"}).SignedString(forgedKey)
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"sub": "alice"}).SignedString(jwt.UnsafeAllowNoneSignatureType)
	expired, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(-time.Hour).Unix()}).SignedString(e.secret)
	for _, tc := range []struct {
		name string
		a    client.Authentication
	}{
		{"no credentials", nil},
		{"forged signature", client.NewAuthenticationToken(forged)},
		{"alg none", client.NewAuthenticationToken(none)},
		{"expired", client.NewAuthenticationToken(expired)},
		{"unreadable token file", client.NewAuthenticationTokenFromFile(filepath.Join(t.TempDir(), "missing"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := e.clientWith(t, tc.a)
			start := time.Now()
			_, err := c.CreateProducer(client.ProducerOptions{Topic: "guarded"})
			if !errors.Is(err, client.ErrUnauthenticated) {
				t.Fatalf("producer: %v, want ErrUnauthenticated", err)
			}
			if time.Since(start) > 10*time.Second {
				t.Errorf("refused after %v: an authentication failure is not retried", time.Since(start))
			}
			if _, err := c.Subscribe(client.ConsumerOptions{Topic: "guarded", SubscriptionName: "s"}); !errors.Is(err, client.ErrUnauthenticated) {
				t.Fatalf("consumer: %v, want ErrUnauthenticated", err)
			}
			if _, err := c.TopicPartitions("guarded"); !errors.Is(err, client.ErrUnauthenticated) {
				t.Fatalf("partitioned metadata: %v, want ErrUnauthenticated", err)
			}
		})
	}
	// Nothing was created or written.
	if code, body := e.admin(t, "GET", "/admin/v2/persistent/public/default/guarded/stats", e.token(t, "admin", time.Hour)); code != http.StatusNotFound {
		t.Fatalf("the topic after refused clients: %d %v, want 404", code, body)
	}
	// A valid token works.
	c := e.clientWith(t, client.NewAuthenticationToken(e.token(t, "alice", time.Hour)))
	p, err := c.CreateProducer(client.ProducerOptions{Topic: "guarded", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, p, 0, 3)
	p.Close()
	cons, err := c.Subscribe(client.ConsumerOptions{Topic: "guarded", SubscriptionName: "s", SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	receiveN(t, cons, 3)
	cons.Close()
}

// The admin API wants a token on every path but the probes' (and
// /metrics, unless --authenticate-metrics-endpoint); a refusal is 401 with
// the API's JSON error.
func TestAuthenticationOfTheAdminAPI(t *testing.T) {
	e := newAuthEnv(t, nil)
	good := e.token(t, "admin", time.Hour)
	if code, body := e.admin(t, "GET", "/admin/v2/tenants", ""); code != http.StatusUnauthorized || body["errorCode"] != "AUTHENTICATION_ERROR" {
		t.Fatalf("no token: %d %v", code, body)
	}
	if code, body := e.admin(t, "PUT", "/admin/v2/tenants/t1", "not-a-token"); code != http.StatusUnauthorized || body["errorCode"] != "AUTHENTICATION_ERROR" {
		t.Fatalf("bad token: %d %v", code, body)
	}
	req, _ := http.NewRequest("GET", "http://"+e.b.HTTPAddr()+"/admin/v2/tenants", nil)
	req.Header.Set("Authorization", "Bearer "+good)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var tenants []string
	json.NewDecoder(resp.Body).Decode(&tenants)
	resp.Body.Close()
	if slices.Contains(tenants, "t1") || len(tenants) == 0 {
		t.Fatalf("tenants after a refused PUT of t1: %v", tenants)
	}
	if code, body := e.admin(t, "GET", "/admin/v2/tenants", good); code != http.StatusOK {
		t.Fatalf("good token: %d %v", code, body)
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		if code, _ := e.admin(t, "GET", p, ""); code != http.StatusOK {
			t.Errorf("GET %s without a token: %d, want 200", p, code)
		}
	}
	e2 := newAuthEnv(t, func(c *broker.Config) { c.AuthenticateMetricsEndpoint = true })
	if code, _ := e2.admin(t, "GET", "/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("/metrics with --authenticate-metrics-endpoint, no token: %d, want 401", code)
	}
	if code, _ := e2.admin(t, "GET", "/metrics", e2.token(t, "prometheus", time.Hour)); code != http.StatusOK {
		t.Errorf("/metrics with a token: %d, want 200", code)
	}
}

// A stream outliving its token is ended by the broker; the client
// reconnects with the fresh token its supplier hands out, and goes on.
func TestStreamEndsWhenItsTokenExpires(t *testing.T) {
	e := newAuthEnv(t, nil)
	var asked atomic.Int32
	var short atomic.Bool
	short.Store(true)
	supplier := func() (string, error) {
		asked.Add(1)
		if short.Load() {
			return e.signer.Sign("alice", 2*time.Second)
		}
		return e.signer.Sign("alice", time.Hour)
	}
	c := e.clientWith(t, client.NewAuthenticationTokenFromSupplier(supplier))
	p, err := c.CreateProducer(client.ProducerOptions{Topic: "expiring", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cons, err := c.Subscribe(client.ConsumerOptions{Topic: "expiring", SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	produce(t, p, 0, 1)
	receiveN(t, cons, 1)
	short.Store(false)
	before := asked.Load()
	// The broker ends both streams at the expiry (2 s, to the second,
	// plus the leeway); the producer and the consumer open new ones,
	// asking the supplier again. Sends go on across it: none may be
	// stored twice (a send stored but not answered before the stream
	// ended would be resent).
	deadline := time.Now().Add(30 * time.Second)
	var sent []string
	errs := make(chan error, 20000)
	for asked.Load() < before+2 {
		if time.Now().After(deadline) || len(sent) == cap(errs) {
			t.Fatalf("the streams were not ended at their token's expiry (supplier asked %d times more)", asked.Load()-before)
		}
		payload := fmt.Sprint("across-", len(sent))
		sent = append(sent, payload)
		p.SendAsync(ctxT(t), &client.ProducerMessage{Payload: []byte(payload)}, func(_ client.MessageID, _ *client.ProducerMessage, err error) { errs <- err })
		time.Sleep(2 * time.Millisecond)
	}
	for range sent {
		if err := <-errs; err != nil {
			t.Fatalf("a send across the expiry: %v", err)
		}
	}
	ids := map[string]string{} // payload: the id it was stored at
	for len(ids) < len(sent) {
		m, err := cons.Receive(ctxT(t))
		if err != nil {
			t.Fatalf("received %d of %d sent across the expiry: %v", len(ids), len(sent), err)
		}
		pl := string(m.Payload())
		if !strings.HasPrefix(pl, "across-") {
			continue
		}
		if id, seen := ids[pl]; seen && id != m.ID().String() {
			t.Fatalf("%s stored twice, at %s and %s", pl, id, m.ID())
		}
		ids[pl] = m.ID().String()
		cons.Ack(m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte("after")}); err != nil {
		t.Fatalf("send after the token was renewed: %v", err)
	}
	for { // m-00000 may come again (not acknowledged before the stream ended)
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("receive after the token was renewed: %v", err)
		}
		if string(m.Payload()) == "after" {
			break
		}
	}
}

func TestAuthenticationSettingsAreChecked(t *testing.T) {
	for _, tc := range []struct {
		configure func(*broker.Config)
		want      string
	}{
		{func(c *broker.Config) { c.AuthenticationEnabled = true }, "needs a token key"},
		{func(c *broker.Config) { c.AuthenticationEnabled, c.TokenSecretKey, c.TokenPublicKey = true, "a", "b" }, "not both"},
		{func(c *broker.Config) { c.TLSCertFile = "c.pem" }, "both --tls-cert-file and --tls-key-file"},
		{func(c *broker.Config) { c.TLSRequireTrustedClientCert = true }, "--tls-require-trusted-client-cert needs TLS"},
		{func(c *broker.Config) { c.TLSRequireTrustedClientCert, c.TLSTrustCertsFile = true, "ca.pem" }, "--tls-require-trusted-client-cert needs TLS"},
		{func(c *broker.Config) { c.AuthenticationEnabled, c.TLSTrustCertsFile = true, "ca.pem" }, "only over TLS"},
		{func(c *broker.Config) { c.AuthenticateMetricsEndpoint = true }, "without --authentication-enabled"},
		{func(c *broker.Config) { c.TokenSecretKey = "k" }, "without --authentication-enabled"},
	} {
		c := broker.DefaultConfig()
		c.Metastore = []string{"127.0.0.1:2379"}
		tc.configure(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v, want %q", err, tc.want)
		}
	}
}

// A broker reaches bookies that serve TLS and want credentials with its
// own token (--client-auth-token-file) over TLS (--bookie-tls-enabled):
// messages go through and come back.
func TestBrokerOverSecureBookies(t *testing.T) {
	key := testutil.NewTokenKey(t)
	secret, tokenFile := key.File, key.TokenFile("broker", 0)
	ca := testutil.NewCA(t, "cluster")
	secure := testcluster.Options{Configure: func(c *bookie.Config) {
		cert, key := ca.Issue(t, "bookie")
		c.AuthenticationEnabled, c.TokenSecretKey = true, secret
		c.TLSCertFile, c.TLSKeyFile, c.TLSTrustCertsFile = cert, key, ca.CertFile
		c.ClientAuthTokenFile = tokenFile
		c.AllowedRoles = []string{"broker"}
	}}
	e := newEnvWith(t, secure, func(c *broker.Config) {
		c.BookieTLSEnabled, c.TLSTrustCertsFile, c.ClientAuthTokenFile = true, ca.CertFile, tokenFile
	})
	cl := e.client()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "secure", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, p, 0, 10)
	p.Close()
	cons, err := cl.Subscribe(client.ConsumerOptions{Topic: "secure", SubscriptionName: "s", SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	for i, m := range receiveN(t, cons, 10) {
		if want := fmt.Sprintf("m-%05d", i); string(m.Payload()) != want {
			t.Fatalf("message %d: %q", i, m.Payload())
		}
	}
}
