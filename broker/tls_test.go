package broker_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/internal/testutil"
)

// tlsEnv is a broker serving TLS with a certificate of ca.
func tlsEnv(t *testing.T, ca *testutil.CA, configure func(*broker.Config)) *env {
	cert, key := ca.Issue(t, "broker")
	return newEnv(t, func(c *broker.Config) {
		c.TLSCertFile, c.TLSKeyFile, c.TLSTrustCertsFile = cert, key, ca.CertFile
		if configure != nil {
			configure(c)
		}
	})
}

func tlsClient(t *testing.T, e *env, o client.ClientOptions) (client.Client, error) {
	if o.URL == "" {
		o.URL = "magnetar+ssl://" + e.b.Addr()
	}
	if o.OperationTimeout == 0 {
		o.OperationTimeout = 5 * time.Second
	}
	c, err := client.NewClient(o)
	if err == nil {
		t.Cleanup(c.Close)
	}
	return c, err
}

// Clients reach a TLS broker with magnetar+ssl:// and the authority's
// certificate; plaintext, or a client that does not trust the broker's
// authority, gets a clear error and nothing through.
func TestTLS(t *testing.T) {
	ca := testutil.NewCA(t, "cluster")
	e := tlsEnv(t, ca, nil)
	c, err := tlsClient(t, e, client.ClientOptions{TLSTrustCertsFilePath: ca.CertFile})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.CreateProducer(client.ProducerOptions{Topic: "secure", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, p, 0, 3)
	p.Close()
	cons, err := c.Subscribe(client.ConsumerOptions{Topic: "secure", SubscriptionName: "s", SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	receiveN(t, cons, 3)
	cons.Close()

	plain, _ := tlsClient(t, e, client.ClientOptions{URL: "magnetar://" + e.b.Addr()})
	if _, err := plain.CreateProducer(client.ProducerOptions{Topic: "secure"}); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("plaintext to the TLS port: %v", err)
	}
	other := testutil.NewCA(t, "other")
	untrusting, _ := tlsClient(t, e, client.ClientOptions{TLSTrustCertsFilePath: other.CertFile})
	if _, err := untrusting.CreateProducer(client.ProducerOptions{Topic: "secure"}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a client that does not trust the broker's authority: %v", err)
	}

	// The admin API is HTTPS; plaintext is told so.
	pool := x509.NewCertPool()
	b, _ := os.ReadFile(ca.CertFile)
	pool.AppendCertsFromPEM(b)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := hc.Get("https://" + e.b.HTTPAddr() + "/admin/v2/tenants")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("https admin: %v %v", resp, err)
	}
	resp.Body.Close()
	resp, err = http.Get("http://" + e.b.HTTPAddr() + "/admin/v2/tenants")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "HTTPS") {
		t.Fatalf("plain http to the HTTPS admin port: %d %q", resp.StatusCode, body)
	}
}

// Mutual TLS as authentication: a client certificate from the trusted
// authority authenticates as its common name; one from another authority,
// or none, is refused.
func TestClientCertificateAuthentication(t *testing.T) {
	ca := testutil.NewCA(t, "cluster")
	e := tlsEnv(t, ca, func(c *broker.Config) { c.AuthenticationEnabled = true })
	cert, key := ca.Issue(t, "alice")
	c, err := tlsClient(t, e, client.ClientOptions{TLSTrustCertsFilePath: ca.CertFile, Authentication: client.NewAuthenticationTLS(cert, key)})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.CreateProducer(client.ProducerOptions{Topic: "mtls", DisableBatching: true})
	if err != nil {
		t.Fatalf("with a trusted client certificate: %v", err)
	}
	produce(t, p, 0, 1)
	p.Close()

	other := testutil.NewCA(t, "other")
	ocert, okey := other.Issue(t, "mallory")
	forged, _ := tlsClient(t, e, client.ClientOptions{TLSTrustCertsFilePath: ca.CertFile, Authentication: client.NewAuthenticationTLS(ocert, okey)})
	if _, err := forged.CreateProducer(client.ProducerOptions{Topic: "mtls"}); err == nil {
		t.Fatal("a client certificate from another authority was accepted")
	}
	none, _ := tlsClient(t, e, client.ClientOptions{TLSTrustCertsFilePath: ca.CertFile})
	if _, err := none.CreateProducer(client.ProducerOptions{Topic: "mtls"}); !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("no client certificate and no token: %v, want ErrUnauthenticated", err)
	}
	if _, err := client.NewClient(client.ClientOptions{URL: "magnetar://" + e.b.Addr(), Authentication: client.NewAuthenticationTLS(cert, key)}); !errors.Is(err, client.ErrInvalidOptions) {
		t.Fatalf("a client certificate with a plaintext URL: %v", err)
	}
}

// A renewed certificate is served without a restart.
func TestCertificateReload(t *testing.T) {
	ca := testutil.NewCA(t, "cluster")
	e := tlsEnv(t, ca, nil)
	pool := x509.NewCertPool()
	b, _ := os.ReadFile(ca.CertFile)
	pool.AppendCertsFromPEM(b)
	served := func() string {
		conn, err := tls.Dial("tcp", e.b.Addr(), &tls.Config{RootCAs: pool, NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	before := served()
	ca.Issue(t, "broker") // renewed in place
	testutil.Eventually(t, 10*time.Second, "the renewed certificate served", func() bool { return served() != before })
}

// A client certificate's common name is the role authorization decides
// on: "alice" (a superuser here) may produce, "bob" from the same
// authority may not.
func TestClientCertificateCommonNameIsTheRole(t *testing.T) {
	ca := testutil.NewCA(t, "cluster")
	e := tlsEnv(t, ca, func(c *broker.Config) {
		c.AuthenticationEnabled, c.AuthorizationEnabled, c.SuperuserRoles = true, true, []string{"alice"}
	})
	for _, c := range []struct {
		cn   string
		want error
	}{{"alice", nil}, {"bob", client.ErrUnauthorized}} {
		cert, key := ca.Issue(t, c.cn)
		cl, err := tlsClient(t, e, client.ClientOptions{TLSTrustCertsFilePath: ca.CertFile, Authentication: client.NewAuthenticationTLS(cert, key)})
		if err != nil {
			t.Fatal(err)
		}
		p, err := cl.CreateProducer(client.ProducerOptions{Topic: "roles"})
		if !errors.Is(err, c.want) {
			t.Fatalf("%s: %v, want %v", c.cn, err, c.want)
		}
		if err == nil {
			p.Close()
		} else if !strings.Contains(err.Error(), `role "`+c.cn+`"`) {
			t.Fatalf("%s: the refusal does not name the role: %v", c.cn, err)
		}
	}
}
