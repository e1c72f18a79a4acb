package metastore

import (
	"errors"
	"fmt"
	"os"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/magnetar-io/magnetar/internal/tlsutil"
)

// Credentials are how a process proves itself to etcd and checks etcd:
// etcd's own TLS (its --client-cert-auth and --trusted-ca-file) and its
// authentication (users and passwords). Every process that opens the
// metastore takes them, as flags of the same names.
type Credentials struct {
	// MetastoreTLSTrustCertsFile holds the authorities of etcd's
	// certificates; MetastoreTLSCertFile and MetastoreTLSKeyFile are the
	// client certificate presented (PEM files, reloaded when they
	// change). Any of them, or an https:// endpoint, turns TLS on.
	MetastoreTLSCertFile       string `mapstructure:"metastore-tls-cert-file" yaml:"metastore-tls-cert-file"`
	MetastoreTLSKeyFile        string `mapstructure:"metastore-tls-key-file" yaml:"metastore-tls-key-file"`
	MetastoreTLSTrustCertsFile string `mapstructure:"metastore-tls-trust-certs-file" yaml:"metastore-tls-trust-certs-file"`
	// MetastoreUsername is the etcd user; its password is the content of
	// MetastorePasswordFile (never a flag: flags are seen by ps).
	MetastoreUsername     string `mapstructure:"metastore-username" yaml:"metastore-username"`
	MetastorePasswordFile string `mapstructure:"metastore-password-file" yaml:"metastore-password-file"`
}

// validate checks the credentials against each other.
func (c Credentials) validate() error {
	var errs []error
	if (c.MetastoreTLSCertFile == "") != (c.MetastoreTLSKeyFile == "") {
		errs = append(errs, errors.New("metastore: a client certificate needs both --metastore-tls-cert-file and --metastore-tls-key-file"))
	}
	if (c.MetastoreUsername == "") != (c.MetastorePasswordFile == "") {
		errs = append(errs, errors.New("metastore: etcd authentication needs both --metastore-username and --metastore-password-file"))
	}
	return errors.Join(errs...)
}

// apply sets cfg's TLS and authentication. The etcd client takes an
// endpoint's scheme over the TLS configuration (an http:// endpoint is
// dialed in plaintext), so TLS options with an http:// endpoint are
// refused; a password sent in plaintext is warned about.
func (c Credentials) apply(cfg *clientv3.Config, log *zap.Logger) error {
	files := c.MetastoreTLSCertFile != "" || c.MetastoreTLSTrustCertsFile != ""
	on := files
	for _, e := range cfg.Endpoints {
		on = on || strings.HasPrefix(e, "https://")
		if files && strings.HasPrefix(e, "http://") {
			return fmt.Errorf("metastore: endpoint %s is plaintext (http://) but TLS is set (--metastore-tls-*): use https:// or host:port", e)
		}
	}
	if c.MetastoreUsername != "" && !on {
		log.Warn("the etcd password is sent in plaintext: set --metastore-tls-trust-certs-file (or https:// endpoints) too")
	}
	if on {
		tc, err := tlsutil.NewClient(tlsutil.Files{Cert: c.MetastoreTLSCertFile, Key: c.MetastoreTLSKeyFile, Trust: c.MetastoreTLSTrustCertsFile}, false)
		if err != nil {
			return fmt.Errorf("metastore: %w", err)
		}
		cfg.TLS = tc
	}
	if c.MetastoreUsername != "" {
		b, err := os.ReadFile(c.MetastorePasswordFile)
		if err != nil {
			return fmt.Errorf("metastore: password file: %w", err)
		}
		cfg.Username, cfg.Password = c.MetastoreUsername, strings.TrimRight(string(b), "\r\n")
	}
	return nil
}
