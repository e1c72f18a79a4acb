// Package netaddr checks the network addresses of a configuration at
// start-up, so that a missing or bad port is a clear error rather than a
// default someone dials later (gRPC dials "host" as host:443).
//
// It only checks the syntax: names are not resolved and nothing is dialed.
// The errors name neither the flag nor the address; callers add both:
//
//	--advertised-address "127.0.0.1": missing port
package netaddr

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// Listen checks an address to listen on: HOST:PORT with PORT in 0..65535
// (0: any free port). HOST may be empty (every interface).
func Listen(addr string) error {
	_, port, err := split(addr)
	if err != nil {
		return err
	}
	_, err = parsePort(port, 0)
	return err
}

// Dial checks an address others dial: HOST:PORT with a host and PORT in
// 1..65535.
func Dial(addr string) error {
	host, port, err := split(addr)
	if err != nil {
		return err
	}
	if host == "" {
		return errors.New("missing host")
	}
	_, err = parsePort(port, 1)
	return err
}

// Port returns the port of an address that Listen accepted.
func Port(addr string) (int, error) {
	_, port, err := split(addr)
	if err != nil {
		return 0, err
	}
	return parsePort(port, 0)
}

// Endpoint checks an etcd endpoint: HOST:PORT as Dial wants it, or
// http://HOST:PORT or https://HOST:PORT, or unix://PATH (unixs://PATH).
func Endpoint(e string) error {
	scheme, rest, ok := strings.Cut(e, "://")
	if !ok {
		return Dial(e)
	}
	switch scheme {
	case "http", "https":
		u, err := url.Parse(e)
		if err != nil {
			return errors.New("not a URL")
		}
		if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.User != nil {
			return fmt.Errorf("want %s://HOST:PORT", scheme)
		}
		return Dial(u.Host)
	case "unix", "unixs":
		if rest == "" {
			return fmt.Errorf("want %s://PATH", scheme)
		}
		return nil
	}
	return fmt.Errorf("scheme %q: want HOST:PORT, http://HOST:PORT, https://HOST:PORT or unix://PATH", scheme)
}

// HTTPURL checks the base URL of an HTTP API: http://HOST:PORT or
// https://HOST:PORT, optionally followed by a path.
func HTTPURL(s string) error {
	const want = "want http://HOST:PORT or https://HOST:PORT"
	if !strings.Contains(s, "://") {
		return errors.New(want)
	}
	u, err := url.Parse(s)
	if err != nil {
		return errors.New(want)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("scheme %q: %s", u.Scheme, want)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return fmt.Errorf("%s (a path may follow; no query, fragment or user)", want)
	}
	return Dial(u.Host)
}

// split is net.SplitHostPort with errors fit to follow the address.
func split(addr string) (host, port string, err error) {
	if addr == "" {
		return "", "", errors.New("empty address")
	}
	host, port, err = net.SplitHostPort(addr)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			msg := strings.TrimSuffix(ae.Err, " in address")
			if msg == "too many colons" {
				msg += " (an IPv6 address goes in brackets: [::1]:PORT)"
			}
			return "", "", errors.New(msg)
		}
		return "", "", err
	}
	return host, port, nil
}

func parsePort(s string, lowest int) (int, error) {
	if s == "" {
		return 0, errors.New("missing port")
	}
	p, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("port %q is not a number", s)
	}
	if p < lowest || p > 65535 {
		return 0, fmt.Errorf("port %d is out of range %d..65535", p, lowest)
	}
	return p, nil
}

// Wildcard says whether a listen address binds every interface (empty
// host, 0.0.0.0 or [::]): others cannot dial it as it is.
func Wildcard(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host == "" || ip != nil && ip.IsUnspecified()
}
