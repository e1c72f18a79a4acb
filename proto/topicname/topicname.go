// Package topicname parses and formats topic names as Pulsar writes them:
// persistent://tenant/namespace/topic or non-persistent://tenant/namespace/topic,
// with the short forms "topic" (tenant "public", namespace "default") and
// "tenant/namespace/topic", both persistent. Partition i of a partitioned
// topic T is the topic "T-partition-i".
package topicname

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Defaults of the short form.
const (
	DefaultTenant       = "public"
	DefaultNamespace    = "default"
	persistentScheme    = "persistent://"
	nonPersistentScheme = "non-persistent://"
	partitionSuffix     = "-partition-"
	// MaxLength caps a full topic name.
	MaxLength = 512
)

// ErrInvalid is wrapped by every parse error.
var ErrInvalid = errors.New("invalid topic name")

// Domain is a topic's kind, the scheme of its full name.
type Domain uint8

const (
	// Persistent topics store every message until it is consumed (or
	// retention deletes it). The zero Domain.
	Persistent Domain = iota
	// NonPersistent topics store nothing: a message goes to the consumers
	// connected when it is published, or is dropped.
	NonPersistent
)

// String is the domain as Pulsar spells it ("persistent",
// "non-persistent"), as in admin paths.
func (d Domain) String() string {
	if d == NonPersistent {
		return "non-persistent"
	}
	return "persistent"
}

// Domains are the domains, persistent first.
var Domains = []Domain{Persistent, NonPersistent}

// DomainsOfMode are the domains a topic list's mode names, as Pulsar
// spells the mode (the admin API's `mode`, GET_TOPICS_OF_NAMESPACE's):
// "PERSISTENT" (or "", the default), "NON_PERSISTENT" or "ALL". ok is
// false for any other. The result has no room to grow: appending to it
// copies, and never changes Domains.
func DomainsOfMode(mode string) (ds []Domain, ok bool) {
	switch mode {
	case "", "PERSISTENT":
		return Domains[:1:1], true
	case "NON_PERSISTENT":
		return Domains[1:2:2], true
	case "ALL":
		return Domains[:2:2], true
	}
	return nil, false
}

// Name is a parsed topic name.
type Name struct {
	Domain    Domain
	Tenant    string
	Namespace string
	// Local is the topic's name in its namespace, with the partition
	// suffix when it is a partition.
	Local string
}

// Parse accepts the full and the short forms.
func Parse(s string) (Name, error) {
	if len(s) > MaxLength {
		return Name{}, fmt.Errorf("%w: %d bytes, at most %d", ErrInvalid, len(s), MaxLength)
	}
	rest, domain := s, Persistent
	if i := strings.Index(s, "://"); i >= 0 {
		switch s[:i+3] {
		case persistentScheme:
		case nonPersistentScheme:
			domain = NonPersistent
		default:
			return Name{}, fmt.Errorf("%w: %q: the scheme must be persistent:// or non-persistent://", ErrInvalid, s)
		}
		rest = s[i+3:]
		if strings.Count(rest, "/") != 2 {
			return Name{}, fmt.Errorf("%w: %q: want %stenant/namespace/topic", ErrInvalid, s, s[:i+3])
		}
	}
	var n Name
	switch parts := strings.Split(rest, "/"); len(parts) {
	case 1:
		n = Name{Domain: domain, Tenant: DefaultTenant, Namespace: DefaultNamespace, Local: parts[0]}
	case 3:
		n = Name{Domain: domain, Tenant: parts[0], Namespace: parts[1], Local: parts[2]}
	default:
		return Name{}, fmt.Errorf("%w: %q: want topic, tenant/namespace/topic or persistent://tenant/namespace/topic", ErrInvalid, s)
	}
	if err := CheckSegment("tenant", n.Tenant); err != nil {
		return Name{}, fmt.Errorf("%w: %q: %v", ErrInvalid, s, err)
	}
	if err := CheckSegment("namespace", n.Namespace); err != nil {
		return Name{}, fmt.Errorf("%w: %q: %v", ErrInvalid, s, err)
	}
	if err := checkLocal(n.Local); err != nil {
		return Name{}, fmt.Errorf("%w: %q: %v", ErrInvalid, s, err)
	}
	if l := len(n.String()); l > MaxLength {
		return Name{}, fmt.Errorf("%w: %d bytes in full form, at most %d", ErrInvalid, l, MaxLength)
	}
	return n, nil
}

// CheckSegment checks a tenant or namespace name: letters, digits and
// - _ . = : only, as Pulsar's NamedEntity.checkName (^[-=:.\w]*$, where
// Java's \w is [a-zA-Z_0-9]) and NamespaceName.validateNamespaceName
// (non-empty) in pulsar-common/.../common/naming.
func CheckSegment(what, s string) error {
	if s == "" {
		return fmt.Errorf("empty %s", what)
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.=:", r)) {
			return fmt.Errorf("%s %q has character %q (allowed: letters, digits, - _ . = :)", what, s, r)
		}
	}
	return nil
}

// reservedInLocal are refused in a topic's local name although Pulsar
// accepts them: '/' (Pulsar reads a fourth segment as the legacy
// tenant/cluster/namespace form, and topics with a '/' in their name
// cannot be listed or administered: apache/pulsar#6885, #19770; it is also
// our key separator), and the URL metacharacters \ % ? # and the pattern
// character *, which the admin paths and the CLI would have to escape.
const reservedInLocal = `/\%?#*`

// checkLocal checks a topic's local name (what follows the namespace).
//
// Pulsar's own rule (TopicName's constructor, pulsar-common
// org.apache.pulsar.common.naming.TopicName) refuses only an empty or
// blank local name (StringUtils.isBlank); NamedEntity.checkName is not
// applied to topics, so Pulsar accepts spaces ("bad topic" is a valid
// Pulsar topic, reachable through the admin API as bad%20topic), quotes
// and most other characters (apache/pulsar#20231 is open about it). We
// follow Pulsar for spaces inside a name and printable characters, and
// refuse, as Pulsar does when a topic is created since apache/pulsar#26281,
// white space at either end (its Java clients trim names, so such a topic
// is unreachable). We are stricter on the rest:
//   - control characters (C0, DEL, C1) and invalid UTF-8 are refused: a
//     name must survive logs, JSON and etcd keys unchanged;
//   - reservedInLocal, above;
//   - blank means only Unicode white space (Go's unicode.IsSpace, which
//     unlike Java's Character.isWhitespace counts U+00A0 NO-BREAK SPACE).
//
// The partition suffix "-partition-N" is syntactically valid here; whether
// N is a partition of a partitioned topic is the broker's check (it needs
// the metadata).
func checkLocal(s string) error {
	if s == "" {
		return errors.New("empty topic")
	}
	if strings.TrimFunc(s, unicode.IsSpace) == "" {
		return fmt.Errorf("topic %q is blank", s)
	}
	if strings.TrimFunc(s, unicode.IsSpace) != s {
		return fmt.Errorf("topic %q begins or ends with white space", s)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("topic %q is not valid UTF-8", s)
	}
	for _, r := range s {
		if unicode.IsControl(r) || strings.ContainsRune(reservedInLocal, r) {
			return fmt.Errorf("topic %q has character %q (control characters and %s are not allowed)", s, r, reservedInLocal)
		}
	}
	return nil
}

// ContainsPartitionSuffix reports whether the local name contains "-partition-"
// anywhere, which Pulsar refuses in the name of a partitioned topic
// (PulsarWebResource/AdminResource.validatePartitionedTopicName), whatever
// follows it.
func (n Name) ContainsPartitionSuffix() bool { return strings.Contains(n.Local, partitionSuffix) }

// String is the full form.
func (n Name) String() string {
	scheme := persistentScheme
	if n.Domain == NonPersistent {
		scheme = nonPersistentScheme
	}
	return scheme + n.Tenant + "/" + n.Namespace + "/" + n.Local
}

// Persistent reports whether the topic stores its messages.
func (n Name) Persistent() bool { return n.Domain != NonPersistent }

// nonPersistentSegment marks a non-persistent topic's path.
const nonPersistentSegment = "non-persistent"

// Path is the form of the name in metadata keys: "tenant/namespace/topic"
// for a persistent topic, "tenant/namespace/non-persistent/topic" for a
// non-persistent one. A topic's local name has no '/', so the two never
// meet, and a namespace's topics of both kinds share the prefix
// "tenant/namespace/". ParsePath reads it back.
func (n Name) Path() string { return n.Tenant + "/" + n.Namespace + "/" + n.LocalPath() }

// LocalPath is the part of Path after the namespace: the local name, or
// "non-persistent/" and the local name. It keys what a namespace holds
// per topic (topic permissions).
func (n Name) LocalPath() string {
	if n.Domain == NonPersistent {
		return nonPersistentSegment + "/" + n.Local
	}
	return n.Local
}

// ParsePath parses what Path returns.
func ParsePath(p string) (Name, error) {
	parts := strings.Split(p, "/")
	switch {
	case len(parts) == 3:
		return Parse(persistentScheme + p)
	case len(parts) == 4 && parts[2] == nonPersistentSegment:
		return Parse(nonPersistentScheme + parts[0] + "/" + parts[1] + "/" + parts[3])
	}
	return Name{}, fmt.Errorf("%w: path %q: want tenant/namespace/topic or tenant/namespace/%s/topic", ErrInvalid, p, nonPersistentSegment)
}

// NamespaceName is "tenant/namespace".
func (n Name) NamespaceName() string { return n.Tenant + "/" + n.Namespace }

// Partition returns partition i of a partitioned topic.
func (n Name) Partition(i int) Name {
	p := n
	p.Local = n.Local + partitionSuffix + strconv.Itoa(i)
	return p
}

// PartitionIndex returns i for "T-partition-i", -1 for other names.
func (n Name) PartitionIndex() int {
	i := strings.LastIndex(n.Local, partitionSuffix)
	if i < 0 {
		return -1
	}
	idx, err := strconv.Atoi(n.Local[i+len(partitionSuffix):])
	if err != nil || idx < 0 || strconv.Itoa(idx) != n.Local[i+len(partitionSuffix):] {
		return -1
	}
	return idx
}

// Base is the partitioned topic a partition belongs to (n itself for
// other names).
func (n Name) Base() Name {
	if n.PartitionIndex() < 0 {
		return n
	}
	b := n
	b.Local = n.Local[:strings.LastIndex(n.Local, partitionSuffix)]
	return b
}
