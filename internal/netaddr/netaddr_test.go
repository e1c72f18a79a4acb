package netaddr

import (
	"strings"
	"testing"
)

func TestChecks(t *testing.T) {
	for _, tc := range []struct {
		check func(string) error
		name  string
		in    string
		want  string // "" when accepted, else a part of the error
	}{
		{Listen, "Listen", "127.0.0.1:6650", ""},
		{Listen, "Listen", "127.0.0.1:0", ""},
		{Listen, "Listen", ":6650", ""},
		{Listen, "Listen", "[::1]:0", ""},
		{Listen, "Listen", "localhost:65535", ""},
		{Listen, "Listen", "127.0.0.1", "missing port"},
		{Listen, "Listen", "127.0.0.1:", "missing port"},
		{Listen, "Listen", "", "empty address"},
		{Listen, "Listen", "127.0.0.1:65536", "out of range 0..65535"},
		{Listen, "Listen", "127.0.0.1:-1", "out of range"},
		{Listen, "Listen", "127.0.0.1:http", "not a number"},
		{Listen, "Listen", "::1:80", "too many colons"},

		{Dial, "Dial", "127.0.0.1:6650", ""},
		{Dial, "Dial", "bookie-1.example:3181", ""},
		{Dial, "Dial", "[::1]:1", ""},
		{Dial, "Dial", "127.0.0.1", "missing port"},
		{Dial, "Dial", "127.0.0.1:0", "out of range 1..65535"},
		{Dial, "Dial", ":6650", "missing host"},
		{Dial, "Dial", "127.0.0.1:99999", "out of range"},

		{Endpoint, "Endpoint", "127.0.0.1:2379", ""},
		{Endpoint, "Endpoint", "http://127.0.0.1:2379", ""},
		{Endpoint, "Endpoint", "https://etcd-0.example:2379/", ""},
		{Endpoint, "Endpoint", "unix://etcd.sock", ""},
		{Endpoint, "Endpoint", "127.0.0.1", "missing port"},
		{Endpoint, "Endpoint", "http://127.0.0.1", "missing port"},
		{Endpoint, "Endpoint", "http://127.0.0.1:2379/v3", "want http://HOST:PORT"},
		{Endpoint, "Endpoint", "ftp://127.0.0.1:2379", "scheme"},
		{Endpoint, "Endpoint", "unix://", "want unix://PATH"},

		{HTTPURL, "HTTPURL", "http://127.0.0.1:8080", ""},
		{HTTPURL, "HTTPURL", "https://admin.example:443/prefix/", ""},
		{HTTPURL, "HTTPURL", "http://127.0.0.1", "missing port"},
		{HTTPURL, "HTTPURL", "127.0.0.1:8080", "want http://"},
		{HTTPURL, "HTTPURL", "localhost:8080", "want http://"},
		{HTTPURL, "HTTPURL", "ftp://127.0.0.1:8080", "scheme"},
		{HTTPURL, "HTTPURL", "http://127.0.0.1:0", "out of range"},
		{HTTPURL, "HTTPURL", "http://127.0.0.1:8080?x=1", "no query"},
	} {
		err := tc.check(tc.in)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s(%q): %v", tc.name, tc.in, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s(%q) = %v, want an error about %q", tc.name, tc.in, err, tc.want)
		}
	}
}

func TestPort(t *testing.T) {
	if p, err := Port("127.0.0.1:3181"); err != nil || p != 3181 {
		t.Fatalf("Port = %d, %v", p, err)
	}
	if _, err := Port("127.0.0.1"); err == nil {
		t.Fatal("Port of an address without one")
	}
}
