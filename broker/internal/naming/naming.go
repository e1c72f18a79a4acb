// Package naming holds the rules for the names clients choose
// (subscriptions, producers, roles), shared by the client protocol's
// handlers in package broker and the admin API in broker/admin.
package naming

import (
	"strings"
	"unicode/utf8"

	"github.com/magnetar-io/magnetar/broker/internal/errs"
)

// MaxLength bounds a name, in bytes.
const MaxLength = 256

// Check checks a subscription's or producer's name. A producer's may
// hold '/' (Pulsar's clients name their dead-letter producers after
// topics); a subscription's may not (it is a segment of admin paths).
func Check(what, s string) error {
	bad := "/\x00\n"
	if what == "producer" {
		bad = "\x00\n"
	}
	switch {
	case s == "":
		return errs.Errorf(errs.ErrInvalidArgument, "empty %s name", what)
	case len(s) > MaxLength:
		return errs.Errorf(errs.ErrInvalidArgument, "%s name of %d bytes (at most %d)", what, len(s), MaxLength)
	case strings.ContainsAny(s, bad):
		return errs.Errorf(errs.ErrInvalidArgument, "%s name %q contains one of %q", what, s, bad)
	case !utf8.ValidString(s):
		// Names are metric label values too, which must be UTF-8.
		return errs.Errorf(errs.ErrInvalidArgument, "%s name %q is not valid UTF-8", what, s)
	}
	return nil
}

// CheckRole checks a role named in a grant or a tenant's admins.
func CheckRole(role string) error {
	if role == "" || len(role) > MaxLength || !utf8.ValidString(role) {
		return errs.Errorf(errs.ErrInvalidArgument, "role %q: 1 to %d bytes of UTF-8", role, MaxLength)
	}
	return nil
}
