package client

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// maxPEMFile caps a certificate or key file.
const maxPEMFile = 1 << 20

func readPEMFile(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Size() > maxPEMFile {
		return nil, fmt.Errorf("%s: %d bytes (at most %d)", path, st.Size(), maxPEMFile)
	}
	return os.ReadFile(path)
}

// tlsAuth authenticates with a client certificate (mutual TLS): the
// broker takes its common name as the role.
type tlsAuth struct{ cert, key string }

// NewAuthenticationTLS presents the client certificate in certFile (PEM)
// with its key in keyFile, read again for every new connection, so that
// a renewed certificate is used without a restart. It needs a
// magnetar+ssl:// URL.
func NewAuthenticationTLS(certFile, keyFile string) Authentication {
	return tlsAuth{cert: certFile, key: keyFile}
}

// Token is empty: the certificate authenticates.
func (tlsAuth) Token() (string, error) { return "", nil }

func (a tlsAuth) certificate() (*tls.Certificate, error) {
	c, err := readPEMFile(a.cert)
	if err != nil {
		return nil, fmt.Errorf("client certificate: %w", err)
	}
	k, err := readPEMFile(a.key)
	if err != nil {
		return nil, fmt.Errorf("client key: %w", err)
	}
	pair, err := tls.X509KeyPair(c, k)
	if err != nil {
		return nil, fmt.Errorf("client certificate %s and key %s: %w", a.cert, a.key, err)
	}
	return &pair, nil
}

// tlsConfig is the client's TLS configuration (magnetar+ssl:// URLs).
func (o *ClientOptions) tlsConfig() (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: o.TLSAllowInsecureConnection}
	if o.TLSTrustCertsFilePath != "" {
		b, err := readPEMFile(o.TLSTrustCertsFilePath)
		if err != nil {
			return nil, fmt.Errorf("%w: trusted certificates: %v", ErrInvalidOptions, err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("%w: trusted certificates %s: no PEM certificate in it", ErrInvalidOptions, o.TLSTrustCertsFilePath)
		}
	}
	if a, ok := o.Authentication.(tlsAuth); ok {
		if _, err := a.certificate(); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidOptions, err)
		}
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return a.certificate() }
	}
	return c, nil
}
