package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/magnetar-io/magnetar/internal/testca"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestBadFiles(t *testing.T) {
	ca := testca.NewCA(t, "ca")
	cert, key := ca.Issue(t, "s")
	for _, tc := range []struct {
		f       Files
		require bool
		want    string
	}{
		{Files{}, false, "needs --tls-cert-file and --tls-key-file"},
		{Files{Cert: cert, Key: key}, true, "needs --tls-trust-certs-file"},
		{Files{Cert: cert, Key: "/nonexistent"}, false, "no such file"},
		{Files{Cert: key, Key: key}, false, "TLS certificate"},
		{Files{Cert: cert, Key: key, Trust: key}, false, "no PEM certificate"},
	} {
		if _, err := NewServer(tc.f, tc.require); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.f, err, tc.want)
		}
	}
}

// A broken renewal keeps the certificate in service and says why; a good
// one replaces it.
func TestReload(t *testing.T) {
	ca := testca.NewCA(t, "ca")
	cert, key := ca.Issue(t, "s")
	s, err := NewServer(Files{Cert: cert, Key: key}, false)
	if err != nil {
		t.Fatal(err)
	}
	serving := func() string {
		c, err := s.Config.GetConfigForClient(&tls.ClientHelloInfo{})
		if err != nil {
			t.Fatal(err)
		}
		return string(c.Certificates[0].Certificate[0])
	}
	first := serving()
	s.r.mu.Lock()
	s.r.checked = time.Time{} // look at the files at the next handshake
	s.r.mu.Unlock()
	os.WriteFile(cert, []byte("not a certificate"), 0o600)
	if serving() != first || s.Err() == nil {
		t.Fatalf("a broken certificate file: serving changed or no error (%v)", s.Err())
	}
	ca.Issue(t, "s")
	s.r.mu.Lock()
	s.r.checked = time.Time{}
	s.r.mu.Unlock()
	if serving() == first || s.Err() != nil {
		t.Fatalf("a renewed certificate is not served (%v)", s.Err())
	}
}

// A server-only certificate is not presented as a client certificate.
func TestClientPresentsOnlyClientCertificates(t *testing.T) {
	ca := testca.NewCA(t, "ca")
	for _, tc := range []struct {
		usage []x509.ExtKeyUsage
		want  bool
	}{
		{[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, false},
		{[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, true},
		{nil, true},
	} {
		cert, key := ca.IssueFor(t, "peer", tc.usage...)
		c, err := NewClient(Files{Cert: cert, Key: key, Trust: ca.CertFile}, false)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := c.GetClientCertificate(&tls.CertificateRequestInfo{})
		if presented := len(got.Certificate) > 0; presented != tc.want {
			t.Errorf("usage %v: presented %v, want %v", tc.usage, presented, tc.want)
		}
	}
}
