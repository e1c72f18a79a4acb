package metastore_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/internal/testutil"
	"github.com/magnetar-io/magnetar/metastore"
)

// Against an etcd that wants TLS with client certificates and etcd users,
// the store connects with the right credentials only; every other try
// fails at Open with an error that says why.
func TestCredentials(t *testing.T) {
	ca := testutil.NewCA(t, "etcd")
	serverCert, serverKey := ca.Issue(t, "etcd-server")
	clientCert, clientKey := ca.Issue(t, "magnetar")
	other := testutil.NewCA(t, "other")
	strangerCert, strangerKey := other.Issue(t, "stranger")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := metastore.StartEmbedded(ctx, metastore.EmbeddedConfig{Dir: t.TempDir(), ClientAddr: "127.0.0.1:0",
		TLS: &metastore.EmbeddedTLS{CertFile: serverCert, KeyFile: serverKey, TrustFile: ca.CertFile, ClientCertAuth: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	// Connections that fail their TLS handshake wait out a short dial
	// timeout; the others get a long one: etcd checks a password with
	// bcrypt, which takes seconds under the race detector on a loaded
	// machine.
	dial := func(c metastore.Credentials, timeout time.Duration) (*metastore.Store, error) {
		return metastore.Open(ctx, metastore.Config{Endpoints: e.Endpoints(), DialTimeout: timeout, Credentials: c}, nil)
	}
	open := func(c metastore.Credentials) (*metastore.Store, error) { return dial(c, 30*time.Second) }
	refused := func(c metastore.Credentials) (*metastore.Store, error) { return dial(c, 3*time.Second) }
	good := metastore.Credentials{MetastoreTLSCertFile: clientCert, MetastoreTLSKeyFile: clientKey, MetastoreTLSTrustCertsFile: ca.CertFile}
	st, err := open(good)
	if err != nil {
		t.Fatalf("with a client certificate: %v", err)
	}
	// etcd's users: root with a password, then authentication on.
	cli := st.Client()
	if _, err := cli.RoleAdd(ctx, "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.UserAdd(ctx, "root", "s3cret"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
	st.Close()
	dir := t.TempDir()
	pw, wrong := filepath.Join(dir, "pw"), filepath.Join(dir, "wrong")
	os.WriteFile(pw, []byte("s3cret\n"), 0o600)
	os.WriteFile(wrong, []byte("guess"), 0o600)
	withUser := good
	withUser.MetastoreUsername, withUser.MetastorePasswordFile = "root", pw
	st, err = open(withUser)
	if err != nil {
		t.Fatalf("with a client certificate and the password: %v", err)
	}
	if _, err := st.Client().Put(ctx, "/k", "v"); err != nil {
		t.Fatalf("a write as root: %v", err)
	}
	st.Close()

	wrongPW := withUser
	wrongPW.MetastorePasswordFile = wrong
	noCert := withUser
	noCert.MetastoreTLSCertFile, noCert.MetastoreTLSKeyFile = "", ""
	stranger := withUser
	stranger.MetastoreTLSCertFile, stranger.MetastoreTLSKeyFile = strangerCert, strangerKey
	untrusting := withUser
	untrusting.MetastoreTLSTrustCertsFile = other.CertFile
	// The etcd client dials an http:// endpoint in plaintext whatever its
	// TLS settings: refused.
	_, err = metastore.Open(ctx, metastore.Config{Endpoints: []string{"http://" + e.Endpoints()[0]}, Credentials: withUser}, nil)
	if err == nil || !strings.Contains(err.Error(), "is plaintext (http://)") {
		t.Fatalf("TLS settings with an http:// endpoint: %v", err)
	}
	for _, c := range []struct {
		name string
		cred metastore.Credentials
		want string
	}{
		{"wrong password", wrongPW, "authentication failed"},
		{"no user: the certificate's name is not an etcd user", good, "permission denied"},
		{"no client certificate", noCert, "over TLS"},
		{"a certificate from another authority", stranger, "over TLS"},
		{"etcd's certificate not trusted", untrusting, "over TLS"},
		{"half a client certificate", metastore.Credentials{MetastoreTLSCertFile: clientCert}, "both --metastore-tls-cert-file and --metastore-tls-key-file"},
		{"a user without a password", metastore.Credentials{MetastoreUsername: "root"}, "--metastore-password-file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			connect := open // answered with an error: no need to wait
			if c.want == "over TLS" {
				connect = refused // the TLS handshake fails: it retries until the timeout
			}
			st, err := connect(c.cred)
			if err == nil {
				st.Close()
				t.Fatal("connected")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v, want it to say %q", err, c.want)
			}
		})
	}
}
