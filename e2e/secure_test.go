package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/internal/testutil"
)

// security is what the processes and clients of a secure cluster get: an
// authority whose certificates every process serves (TLS on every
// broker and bookie port), a secret token key, and a token per role:
// "admin" (superuser, the harness's admin calls), "broker" (superuser, its
// calls to other brokers and to bookies), "autorecovery" (the bookies'
// calls to bookies) and "app" (the workload: produce and consume on
// public/default only).
type security struct {
	t      *testing.T
	ca     *testutil.CA
	key    *testutil.TokenKey
	secret string
	tokens map[string]string // role: token file
	http   *http.Client
}

func newSecurity(t *testing.T) *security {
	key := testutil.NewTokenKey(t)
	s := &security{t: t, ca: testutil.NewCA(t, "e2e"), key: key, secret: key.File, tokens: map[string]string{}}
	pem, err := os.ReadFile(s.ca.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	s.http = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	return s
}

// tokenFile is the file of role's token (made on first use).
func (s *security) tokenFile(role string) string {
	if f, ok := s.tokens[role]; ok {
		return f
	}
	s.tokens[role] = s.key.TokenFile(role, 0)
	return s.tokens[role]
}

// cert issues the certificate of a process listening at addr.
func (s *security) cert(name, addr string) (cert, key string) {
	host, _, _ := net.SplitHostPort(addr)
	return s.ca.IssueForIPs(s.t, name, host)
}

func (s *security) bookieArgs(id, addr string) []string {
	cert, key := s.cert(id, addr)
	return []string{"--authentication-enabled", "--token-secret-key", s.secret,
		"--tls-cert-file", cert, "--tls-key-file", key, "--tls-trust-certs-file", s.ca.CertFile,
		"--client-auth-token-file", s.tokenFile("autorecovery")}
}

func (s *security) brokerArgs(name, addr string) []string {
	cert, key := s.cert(name, addr)
	return []string{"--authentication-enabled", "--token-secret-key", s.secret,
		"--authorization-enabled", "--superuser-roles", "admin,broker",
		"--tls-cert-file", cert, "--tls-key-file", key, "--tls-trust-certs-file", s.ca.CertFile,
		"--client-auth-token-file", s.tokenFile("broker"), "--bookie-tls-enabled"}
}

// adminDo calls a broker's admin API at addr: over https with the admin
// token on a secure cluster.
func (c *realCluster) adminDo(method, addr, path string, body io.Reader) (*http.Response, error) {
	scheme, hc := "http://", http.DefaultClient
	if c.sec != nil {
		scheme, hc = "https://", c.sec.http
	}
	req, err := http.NewRequest(method, scheme+addr+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.sec != nil {
		tok, err := os.ReadFile(c.sec.tokenFile("admin"))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+string(tok))
	}
	return hc.Do(req)
}

// clientOptions are the workload's: the "app" role's token and the
// authority on a secure cluster.
func (c *realCluster) clientOptions() client.ClientOptions {
	o := client.ClientOptions{URL: c.brokerURL(), OperationTimeout: 30 * time.Second}
	if c.sec != nil {
		o.Authentication = client.NewAuthenticationTokenFromFile(c.sec.tokenFile("app"))
		o.TLSTrustCertsFilePath = c.sec.ca.CertFile
	}
	return o
}

// grantApp lets the "app" role produce and consume on public/default.
func (c *realCluster) grantApp() {
	c.t.Helper()
	resp, err := c.adminDo("POST", c.brokers[0].http, "/admin/v2/namespaces/public/default/permissions/app", strings.NewReader(`["produce","consume"]`))
	if err != nil {
		c.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		c.t.Fatalf("grant app: %s", resp.Status)
	}
}

// The fault suite with authentication, authorization and TLS on every
// broker and bookie port: the workload as a role with grants, brokers and
// bookies with their own tokens over TLS. In CI it runs three fault types
// (a broker killed, a bookie's power lost, a broker cut off from the
// bookies); MAGNETAR_E2E_SECURE=all runs every one.
func TestFaultsSecure(t *testing.T) {
	want := map[string]bool{"kill-broker": true, "power-loss-bookie": true, "partition-broker-bookies": true}
	all := os.Getenv("MAGNETAR_E2E_SECURE") == "all"
	prof := currentProfile()
	ran := 0
	for _, f := range faults {
		if !all && !want[f.name] {
			continue
		}
		ran++
		t.Run(f.name, func(t *testing.T) { runFaultWith(t, f, prof, clusterOptions{secure: true}) })
	}
	if ran != len(want) && !all {
		t.Fatalf("ran %d fault types, want %d: a fault was renamed", ran, len(want))
	}
}

// A secure cluster refuses what it should at its edges, as the fault
// suite's processes run it: a client without a token, a client that does
// not trust the authority, and plaintext to the TLS ports.
func TestSecureClusterRefusesStrangers(t *testing.T) {
	c := newRealCluster(t, clusterOptions{secure: true, bookies: 3, brokers: 1, etcdMembers: 1, direct: true})
	url := strings.Replace(c.brokerURL(), "magnetar+ssl://", "magnetar://", 1)
	for _, tc := range []struct {
		name string
		o    client.ClientOptions
		want error
	}{
		{"no token", client.ClientOptions{URL: c.brokerURL(), TLSTrustCertsFilePath: c.sec.ca.CertFile}, client.ErrUnauthenticated},
		{"a role without grants", client.ClientOptions{URL: c.brokerURL(), TLSTrustCertsFilePath: c.sec.ca.CertFile,
			Authentication: client.NewAuthenticationTokenFromFile(c.sec.tokenFile("stranger"))}, client.ErrUnauthorized},
		{"an authority not trusted", client.ClientOptions{URL: c.brokerURL(), Authentication: client.NewAuthenticationTokenFromFile(c.sec.tokenFile("app"))}, nil},
		{"plaintext", client.ClientOptions{URL: url, Authentication: client.NewAuthenticationTokenFromFile(c.sec.tokenFile("app"))}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.OperationTimeout = 5 * time.Second
			cl, err := client.NewClient(tc.o)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			_, err = cl.CreateProducer(client.ProducerOptions{Topic: "strangers"})
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("%v, want %v", err, tc.want)
			}
		})
	}
	// The admin port: plaintext is refused, https without a token too.
	if resp, err := http.Get("http://" + c.brokers[0].http + "/admin/v2/tenants"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("plaintext to the admin port: %s", resp.Status)
		}
	}
	resp, err := c.sec.http.Get("https://" + c.brokers[0].http + "/admin/v2/tenants")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("https without a token: %s", resp.Status)
	}
}
