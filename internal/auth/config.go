package auth

import (
	"errors"
)

// ServerConfig is the authentication and TLS of a server's ports: brokers
// and bookies take it (flags of the same names).
type ServerConfig struct {
	// Authentication of callers with JWT tokens, checked with the secret
	// key (HS256) or the public key (RS256, ES256) given: a path, file://
	// or data:;base64, URL (ReadKey); or with client certificates from
	// TLSTrustCertsFile's authorities, whose common name is the role.
	AuthenticationEnabled bool   `mapstructure:"authentication-enabled" yaml:"authentication-enabled"`
	TokenSecretKey        string `mapstructure:"token-secret-key" yaml:"token-secret-key"`
	TokenPublicKey        string `mapstructure:"token-public-key" yaml:"token-public-key"`

	// TLS (PEM files, reloaded when they change): TLSCertFile and
	// TLSKeyFile are served; TLSTrustCertsFile holds the authorities of
	// client certificates and of the servers this process calls.
	// TLSRequireTrustedClientCert refuses clients without a certificate
	// from them.
	TLSCertFile                 string `mapstructure:"tls-cert-file" yaml:"tls-cert-file"`
	TLSKeyFile                  string `mapstructure:"tls-key-file" yaml:"tls-key-file"`
	TLSTrustCertsFile           string `mapstructure:"tls-trust-certs-file" yaml:"tls-trust-certs-file"`
	TLSRequireTrustedClientCert bool   `mapstructure:"tls-require-trusted-client-cert" yaml:"tls-require-trusted-client-cert"`
}

// Validate checks the settings against each other.
func (c ServerConfig) Validate() error {
	var errs []error
	switch {
	case c.AuthenticationEnabled && c.TokenSecretKey != "" && c.TokenPublicKey != "":
		errs = append(errs, errors.New("--authentication-enabled takes one of --token-secret-key and --token-public-key, not both"))
	case c.AuthenticationEnabled && c.TokenSecretKey == "" && c.TokenPublicKey == "" && c.TLSTrustCertsFile == "":
		errs = append(errs, errors.New("--authentication-enabled needs a token key (--token-secret-key or --token-public-key) or client certificates (--tls-trust-certs-file)"))
	case !c.AuthenticationEnabled && (c.TokenSecretKey != "" || c.TokenPublicKey != ""):
		errs = append(errs, errors.New("a token key without --authentication-enabled: set it, or drop the key"))
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		errs = append(errs, errors.New("TLS needs both --tls-cert-file and --tls-key-file"))
	}
	if c.TLSRequireTrustedClientCert && (c.TLSTrustCertsFile == "" || c.TLSCertFile == "") {
		errs = append(errs, errors.New("--tls-require-trusted-client-cert needs TLS (--tls-cert-file, --tls-key-file) and --tls-trust-certs-file"))
	}
	if c.TLSTrustCertsFile != "" && c.TLSCertFile == "" && c.AuthenticationEnabled && c.TokenSecretKey == "" && c.TokenPublicKey == "" {
		errs = append(errs, errors.New("client certificates (--tls-trust-certs-file) authenticate only over TLS (--tls-cert-file, --tls-key-file)"))
	}
	return errors.Join(errs...)
}

// NewVerifier returns the verifier of c (nil with authentication off).
func (c ServerConfig) NewVerifier() (*Verifier, error) {
	if !c.AuthenticationEnabled {
		return nil, nil
	}
	return NewServerVerifier(c.TokenSecretKey, c.TokenPublicKey, c.TLSTrustCertsFile != "")
}
