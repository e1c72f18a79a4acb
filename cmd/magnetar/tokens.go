package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/internal/auth"
)

// newTokensCmd is Pulsar's `pulsar tokens`: keys and JWT tokens for
// authentication (internal/auth).
func newTokensCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "tokens", Short: "Create keys and authentication tokens (JWT), as pulsar tokens does"}

	var output string
	var b64 bool
	secret := &cobra.Command{
		Use:   "create-secret-key",
		Short: "Create a secret key (256 bits) to sign and check tokens with (HS256)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key := make([]byte, 32)
			if _, err := rand.Read(key); err != nil {
				return err
			}
			if b64 || output == "" {
				key = []byte(base64.StdEncoding.EncodeToString(key))
			}
			if output == "" {
				fmt.Fprintln(cmd.OutOrStdout(), string(key))
				return nil
			}
			return writeKey(output, key)
		},
	}
	secret.Flags().StringVarP(&output, "output", "o", "", "file to write the key to (default: print it in base64)")
	secret.Flags().BoolVarP(&b64, "base64", "e", false, "write the key in base64 (use it as data:;base64,KEY)")

	var privOut, pubOut, alg string
	pair := &cobra.Command{
		Use:   "create-key-pair",
		Short: "Create a private key to sign tokens with and its public key to check them (DER, as Pulsar writes them)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if privOut == "" || pubOut == "" {
				return errors.New("give --output-private-key FILE and --output-public-key FILE")
			}
			var priv any
			var pub any
			switch strings.ToUpper(alg) {
			case "RS256":
				k, err := rsa.GenerateKey(rand.Reader, 2048)
				if err != nil {
					return err
				}
				priv, pub = k, &k.PublicKey
			case "ES256":
				k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
				if err != nil {
					return err
				}
				priv, pub = k, &k.PublicKey
			default:
				return fmt.Errorf("--signature-algorithm %q: RS256 or ES256", alg)
			}
			privDER, err := x509.MarshalPKCS8PrivateKey(priv)
			if err != nil {
				return err
			}
			pubDER, err := x509.MarshalPKIXPublicKey(pub)
			if err != nil {
				return err
			}
			if err := writeKey(privOut, privDER); err != nil {
				return err
			}
			return os.WriteFile(pubOut, pubDER, 0o644)
		},
	}
	pair.Flags().StringVar(&privOut, "output-private-key", "", "file for the private key (PKCS#8 DER)")
	pair.Flags().StringVar(&pubOut, "output-public-key", "", "file for the public key (X.509 DER)")
	pair.Flags().StringVarP(&alg, "signature-algorithm", "a", "RS256", "RS256 or ES256")

	var secretKey, privateKey, subject, expiry string
	create := &cobra.Command{
		Use:   "create",
		Short: "Create a token for a role; prints it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			exp, err := parseExpiry(expiry)
			if err != nil {
				return err
			}
			s, err := auth.NewSigner(secretKey, privateKey)
			if err != nil {
				return err
			}
			tok, err := s.Sign(subject, exp)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok)
			return nil
		},
	}
	create.Flags().StringVar(&secretKey, "secret-key", "", "sign with this secret key: a path, file://PATH or data:;base64,KEY")
	create.Flags().StringVar(&privateKey, "private-key", "", "sign with this private key: a path, file://PATH or data:;base64,KEY")
	create.Flags().StringVarP(&subject, "subject", "s", "", "the role the token is for (required)")
	create.Flags().StringVarP(&expiry, "expiry-time", "e", "", "the token expires after this long: 30m, 12h, 7d, 1y (default: never)")

	var vSecret, vPublic, tokenFile string
	validate := &cobra.Command{
		Use:   "validate [TOKEN]",
		Short: "Check a token with the secret or public key; prints its role and expiry",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var tok string
			switch {
			case len(args) == 1 && tokenFile == "":
				tok = args[0]
			case len(args) == 0 && tokenFile != "":
				b, err := auth.ReadKey(tokenFile)
				if err != nil {
					return err
				}
				tok = strings.TrimSpace(string(b))
			default:
				return errors.New("give the token as the argument or with --token-file, not both")
			}
			v, err := auth.NewVerifier(vSecret, vPublic)
			if err != nil {
				return err
			}
			c, err := v.Verify(tok)
			if err != nil {
				return err
			}
			exp := "never"
			if !c.Expires.IsZero() {
				exp = c.Expires.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "subject: %s\nexpires: %s\n", c.Role, exp)
			return nil
		},
	}
	validate.Flags().StringVar(&vSecret, "secret-key", "", "check with this secret key")
	validate.Flags().StringVar(&vPublic, "public-key", "", "check with this public key")
	validate.Flags().StringVar(&tokenFile, "token-file", "", "read the token from this file")

	cmd.AddCommand(secret, pair, create, validate)
	return cmd
}

// writeKey writes a secret to a new file only its owner reads.
func writeKey(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("key file: %w (it is never overwritten)", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// parseExpiry reads a duration, with d (days), w (weeks) and y (365 days)
// besides Go's units; "" is never.
func parseExpiry(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	for suffix, unit := range map[string]time.Duration{"d": 24 * time.Hour, "w": 7 * 24 * time.Hour, "y": 365 * 24 * time.Hour} {
		if n, ok := strings.CutSuffix(s, suffix); ok {
			v, err := strconv.Atoi(n)
			if err != nil || v <= 0 {
				return 0, fmt.Errorf("--expiry-time %q: a positive number of %s", s, suffix)
			}
			return time.Duration(v) * unit, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("--expiry-time %q: a positive duration (30m, 12h, 7d, 1y)", s)
	}
	return d, nil
}

// authFlags are the client-side commands' credentials and TLS settings:
// --auth-token or --auth-token-file, or a client certificate; the
// authorities the brokers' certificates come from (also MAGNETAR_* and
// --config).
type authFlags struct {
	token, tokenFile string
	tlsTrust         string
	tlsCert, tlsKey  string
	tlsAllowInsecure bool
}

func (f *authFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.token, "auth-token", "", "token (JWT) to present to the brokers")
	fs.StringVar(&f.tokenFile, "auth-token-file", "", "file holding the token to present, read at each call (it may be rotated)")
	fs.StringVar(&f.tlsTrust, "tls-trust-certs-file", "", "authorities (PEM) the brokers' certificates must come from (magnetar+ssl://, https://; default: the system's)")
	// Not --tls-cert-file: a server's MAGNETAR_TLS_CERT_FILE must not
	// become the certificate of a command run beside it.
	fs.StringVar(&f.tlsCert, "auth-tls-cert-file", "", "client certificate (PEM) to authenticate with (mutual TLS)")
	fs.StringVar(&f.tlsKey, "auth-tls-key-file", "", "the client certificate's key (PEM)")
	fs.BoolVar(&f.tlsAllowInsecure, "tls-allow-insecure-connection", false, "do not check the brokers' certificates (tests only)")
}

// authentication is the SDK's Authentication for the flags, nil for none.
func (f *authFlags) authentication() (client.Authentication, error) {
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return nil, errors.New("give both --auth-tls-cert-file and --auth-tls-key-file")
	}
	switch {
	case f.token != "" && f.tokenFile != "":
		return nil, errors.New("give --auth-token or --auth-token-file, not both")
	case f.tlsCert != "" && (f.token != "" || f.tokenFile != ""):
		return nil, errors.New("give a token or a client certificate, not both")
	case f.tlsCert != "":
		return client.NewAuthenticationTLS(f.tlsCert, f.tlsKey), nil
	case f.token != "":
		return client.NewAuthenticationToken(f.token), nil
	case f.tokenFile != "":
		return client.NewAuthenticationTokenFromFile(f.tokenFile), nil
	}
	return nil, nil
}

// newCLIClient connects a client-side command to the cluster at url.
func newCLIClient(url string, af *authFlags) (client.Client, error) {
	a, err := af.authentication()
	if err != nil {
		return nil, err
	}
	return client.NewClient(client.ClientOptions{URL: url, Authentication: a,
		TLSTrustCertsFilePath: af.tlsTrust, TLSAllowInsecureConnection: af.tlsAllowInsecure})
}

// addTLSServerFlags adds the servers' TLS flags.
func addTLSServerFlags(f *pflag.FlagSet) {
	f.String("tls-cert-file", "", "serve TLS with this certificate (PEM; reloaded when it changes)")
	f.String("tls-key-file", "", "the certificate's private key (PEM)")
	f.String("tls-trust-certs-file", "", "authorities (PEM) of the client certificates accepted (with authentication: the role is the common name) and of the servers this one calls")
	f.Bool("tls-require-trusted-client-cert", false, "refuse TLS clients without a certificate from those authorities")
}

// addAuthServerFlags adds the servers' authentication flags.
func addAuthServerFlags(f *pflag.FlagSet) {
	f.Bool("authentication-enabled", false, "authenticate clients with tokens (JWT) or client certificates; needs --token-secret-key, --token-public-key or --tls-trust-certs-file")
	f.String("token-secret-key", "", "secret key tokens are checked with (HS256): a path, file://PATH or data:;base64,KEY")
	f.String("token-public-key", "", "public key tokens are checked with (RS256 or ES256, by the key): a path, file://PATH or data:;base64,KEY")
}

// addAuthorizationFlags adds the brokers' authorization flags.
func addAuthorizationFlags(f *pflag.FlagSet) {
	f.Bool("authenticate-metrics-endpoint", false, "with authentication: /metrics needs a token too")
	f.Bool("authorization-enabled", false, "authorize every request by its role: superusers, tenant admins, and the grants of namespaces and topics (needs --authentication-enabled)")
	f.StringSlice("superuser-roles", nil, "roles that may do anything (comma-separated); the brokers' own role (--client-auth-token-file) must be one")
}

// addMetastoreFlags adds the flags of etcd's TLS and authentication
// (metastore.Credentials).
func addMetastoreFlags(f *pflag.FlagSet) {
	f.String("metastore-tls-trust-certs-file", "", "authorities (PEM) of etcd's certificates; TLS is on with this, a client certificate or https:// endpoints")
	f.String("metastore-tls-cert-file", "", "client certificate (PEM) presented to etcd (its --client-cert-auth)")
	f.String("metastore-tls-key-file", "", "its private key (PEM)")
	f.String("metastore-username", "", "etcd user (etcd's authentication); needs --metastore-password-file")
	f.String("metastore-password-file", "", "file holding the etcd user's password")
}
