package broker

import "testing"

// The admin address a broker registers: the one configured; else the
// bound one; with the advertised host in place of a wildcard host (another
// broker dialing 0.0.0.0 would reach itself).
func TestAdvertisedHTTP(t *testing.T) {
	for _, c := range []struct {
		configured, bound, advertised, want string
	}{
		{"admin.example:80", "0.0.0.0:8080", "b1:6650", "admin.example:80"},
		{"", "", "b1:6650", ""}, // no admin API
		{"", "127.0.0.1:8080", "b1:6650", "127.0.0.1:8080"},
		{"", "0.0.0.0:8080", "broker-1:6650", "broker-1:8080"},
		{"", "[::]:8080", "10.0.0.7:6650", "10.0.0.7:8080"},
		{"", ":8080", "[fd00::7]:6650", "[fd00::7]:8080"},
		{"", "0.0.0.0:8080", "0.0.0.0:6650", "0.0.0.0:8080"}, // nothing better known
	} {
		if got := advertisedHTTP(c.configured, c.bound, c.advertised); got != c.want {
			t.Errorf("advertisedHTTP(%q, %q, %q) = %q, want %q", c.configured, c.bound, c.advertised, got, c.want)
		}
	}
}
