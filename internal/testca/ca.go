// Package testca makes certificate authorities and certificates in tests,
// as PEM files under the test's temporary directory. It imports nothing of
// Magnetar, so that any package's tests can use it.
package testca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority made in a test, writing PEM files under
// the test's temporary directory.
type CA struct {
	// CertFile is the authority's certificate (what clients and servers
	// trust).
	CertFile string
	cert     *x509.Certificate
	key      *ecdsa.PrivateKey
	dir      string
}

var serial = big.NewInt(time.Now().UnixNano())

func nextSerial() *big.Int {
	serial = new(big.Int).Add(serial, big.NewInt(1))
	return serial
}

// NewCA makes an authority named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &CA{cert: cert, key: key, dir: t.TempDir()}
	ca.CertFile = filepath.Join(ca.dir, name+"-ca.pem")
	writePEM(t, ca.CertFile, "CERTIFICATE", der)
	return ca
}

// Issue makes a certificate for cn, valid for 127.0.0.1 and localhost (as
// a server) and as a client, and writes it and its key; a second Issue
// with the same cn overwrites them (a renewal).
func (ca *CA) Issue(t testing.TB, cn string) (certFile, keyFile string) {
	t.Helper()
	return ca.IssueFor(t, cn, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
}

// IssueForIPs is Issue valid for these IP addresses too.
func (ca *CA) IssueForIPs(t testing.TB, cn string, ips ...string) (certFile, keyFile string) {
	t.Helper()
	return ca.issue(t, cn, ips, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
}

// IssueFor is Issue with these extended key usages only.
func (ca *CA) IssueFor(t testing.TB, cn string, usage ...x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	return ca.issue(t, cn, nil, usage...)
}

func (ca *CA) issue(t testing.TB, cn string, ips []string, usage ...x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	addrs := []net.IP{net.ParseIP("127.0.0.1")}
	for _, ip := range ips {
		addrs = append(addrs, net.ParseIP(ip))
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: usage,
		IPAddresses: addrs, DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(ca.dir, cn+".pem"), filepath.Join(ca.dir, cn+"-key.pem")
	// Key first, then the certificate, each replaced at once (rename):
	// a reader never sees half a file.
	writePEM(t, keyFile, "PRIVATE KEY", kder)
	writePEM(t, certFile, "CERTIFICATE", der)
	return certFile, keyFile
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
