package broker

import (
	"strings"
	"testing"
)

// The runtime configuration (GET /admin/v2/brokers/configuration/runtime)
// lists the settings by flag name and leaves out every one that may hold
// or point to a secret: a token key may be given inline.
func TestRuntimeConfigurationLeavesSecretsOut(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ClusterName = "c1"
	cfg.Metastore = []string{"127.0.0.1:2379", "127.0.0.2:2379"}
	cfg.TokenSecretKey = "data:;base64,SECRET"
	cfg.TokenPublicKey = "data:;base64,SECRET"
	cfg.MetastoreUsername = "SECRET"
	cfg.MetastorePasswordFile = "/SECRET"
	cfg.ClientAuthTokenFile = "data:;base64,SECRET"
	cfg.TLSKeyFile = "/SECRET"
	cfg.MetastoreTLSKeyFile = "/SECRET"
	got := runtimeConfiguration(cfg)
	for k, v := range got {
		if strings.Contains(v, "SECRET") {
			t.Errorf("%s=%s: a secret is listed", k, v)
		}
	}
	// Plain settings, the squashed ones included, are there.
	for k, want := range map[string]string{
		"cluster-name":           "c1",
		"metastore":              "127.0.0.1:2379,127.0.0.2:2379",
		"authentication-enabled": "false",
		"authorization-enabled":  "false",
		"tls-cert-file":          "",
		"max-message-size":       "5242880",
	} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("%s: %q (listed: %v), want %q", k, v, ok, want)
		}
	}
}
