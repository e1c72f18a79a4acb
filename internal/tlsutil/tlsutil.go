// Package tlsutil builds the TLS configurations of Magnetar's listeners
// and clients from PEM files (--tls-cert-file, --tls-key-file,
// --tls-trust-certs-file), and reloads the files when they change, so that
// a renewed certificate is served without a restart.
//
// A server's certificate and key, and the authorities it trusts for client
// certificates, are read again when a file's modification time or size
// changed, checked at most once per reloadCheck on handshakes; a file that
// fails to load keeps the previous one in service (and the error is
// reported by Err).
package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// reloadCheck is how often, at most, files are looked at again.
const reloadCheck = time.Second

// maxPEM caps a certificate or key file.
const maxPEM = 1 << 20

// Files are the PEM files of one side of a connection.
type Files struct {
	// Cert and Key: this side's certificate chain and private key.
	Cert, Key string
	// Trust: the authorities whose certificates this side accepts from
	// the other (for a server: client certificates; for a client: the
	// server's; empty: the system's, for a client).
	Trust string
}

// reloader holds the current certificate and trust pool, read from files.
type reloader struct {
	f Files

	mu      sync.Mutex
	checked time.Time
	stamp   string // modification times and sizes of the files loaded
	cert    *tls.Certificate
	pool    *x509.CertPool
	err     error // the last reload's failure, if any
}

func readPEM(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Size() > maxPEM {
		return nil, fmt.Errorf("%s: %d bytes (at most %d)", path, st.Size(), maxPEM)
	}
	return os.ReadFile(path)
}

func stampOf(paths ...string) string {
	s := ""
	for _, p := range paths {
		if p == "" {
			continue
		}
		if st, err := os.Stat(p); err == nil {
			s += fmt.Sprintf("%s:%d:%d;", p, st.ModTime().UnixNano(), st.Size())
		} else {
			s += p + ":missing;"
		}
	}
	return s
}

// load reads the files.
func (r *reloader) load() (*tls.Certificate, *x509.CertPool, error) {
	var cert *tls.Certificate
	if r.f.Cert != "" || r.f.Key != "" {
		if r.f.Cert == "" || r.f.Key == "" {
			return nil, nil, errors.New("TLS: give both the certificate and the key file")
		}
		certPEM, err := readPEM(r.f.Cert)
		if err != nil {
			return nil, nil, fmt.Errorf("TLS certificate: %w", err)
		}
		keyPEM, err := readPEM(r.f.Key)
		if err != nil {
			return nil, nil, fmt.Errorf("TLS key: %w", err)
		}
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, nil, fmt.Errorf("TLS certificate %s and key %s: %w", r.f.Cert, r.f.Key, err)
		}
		cert = &c
	}
	var pool *x509.CertPool
	if r.f.Trust != "" {
		b, err := readPEM(r.f.Trust)
		if err != nil {
			return nil, nil, fmt.Errorf("TLS trusted certificates: %w", err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, nil, fmt.Errorf("TLS trusted certificates %s: no PEM certificate in it", r.f.Trust)
		}
	}
	return cert, pool, nil
}

func newReloader(f Files) (*reloader, error) {
	r := &reloader{f: f}
	cert, pool, err := r.load()
	if err != nil {
		return nil, err
	}
	r.cert, r.pool, r.stamp, r.checked = cert, pool, stampOf(f.Cert, f.Key, f.Trust), time.Now()
	return r, nil
}

// current returns the certificate and pool, reloading changed files.
func (r *reloader) current() (*tls.Certificate, *x509.CertPool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.checked) < reloadCheck {
		return r.cert, r.pool
	}
	r.checked = time.Now()
	stamp := stampOf(r.f.Cert, r.f.Key, r.f.Trust)
	if stamp == r.stamp {
		return r.cert, r.pool
	}
	cert, pool, err := r.load()
	if err != nil {
		r.err = err // keep serving the previous ones
		return r.cert, r.pool
	}
	r.cert, r.pool, r.stamp, r.err = cert, pool, stamp, nil
	return r.cert, r.pool
}

// Server is a listener's TLS configuration.
type Server struct {
	r *reloader
	// Config is what the listener serves with.
	Config *tls.Config
}

// NewServer serves f's certificate; with f.Trust, clients presenting a
// certificate must present one signed by those authorities, and with
// requireClientCert every client must present one.
func NewServer(f Files, requireClientCert bool) (*Server, error) {
	if f.Cert == "" || f.Key == "" {
		return nil, errors.New("TLS needs --tls-cert-file and --tls-key-file")
	}
	if requireClientCert && f.Trust == "" {
		return nil, errors.New("requiring client certificates needs --tls-trust-certs-file (the authorities they must come from)")
	}
	r, err := newReloader(f)
	if err != nil {
		return nil, err
	}
	s := &Server{r: r}
	auth := tls.NoClientCert
	if f.Trust != "" {
		auth = tls.VerifyClientCertIfGiven
		if requireClientCert {
			auth = tls.RequireAndVerifyClientCert
		}
	}
	s.Config = &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, pool := r.current()
			return &tls.Config{
				MinVersion:   tls.VersionTLS12,
				Certificates: []tls.Certificate{*cert},
				ClientAuth:   auth,
				ClientCAs:    pool,
				NextProtos:   []string{"h2", "http/1.1"},
			}, nil
		},
	}
	return s, nil
}

// Err is the last reload's failure (nil when the files in service are
// the current ones).
func (s *Server) Err() error {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	return s.r.err
}

// NewClient is a client's configuration: it trusts f.Trust's authorities
// (the system's if empty) and presents f's certificate if given (mutual
// TLS). insecure skips the server's verification (tests, never in
// production).
func NewClient(f Files, insecure bool) (*tls.Config, error) {
	r, err := newReloader(f)
	if err != nil {
		return nil, err
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: r.pool, InsecureSkipVerify: insecure}
	if f.Cert != "" {
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, _ := r.current()
			if !forClients(cert) {
				// A server certificate (serverAuth only) would fail the
				// handshake: present none, and let the caller's token
				// authenticate.
				return &tls.Certificate{}, nil
			}
			return cert, nil
		}
	}
	return c, nil
}

// forClients reports whether cert may authenticate a client: it names no
// extended key usage, or clientAuth (or any).
func forClients(cert *tls.Certificate) bool {
	leaf := cert.Leaf
	if leaf == nil && len(cert.Certificate) > 0 {
		leaf, _ = x509.ParseCertificate(cert.Certificate[0])
	}
	if leaf == nil || len(leaf.ExtKeyUsage) == 0 {
		return true
	}
	for _, u := range leaf.ExtKeyUsage {
		if u == x509.ExtKeyUsageClientAuth || u == x509.ExtKeyUsageAny {
			return true
		}
	}
	return false
}
