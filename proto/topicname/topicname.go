// Package topicname parses and formats topic names as Pulsar writes them:
// persistent://tenant/namespace/topic, with the short forms "topic"
// (tenant "public", namespace "default") and "tenant/namespace/topic".
// Partition i of a partitioned topic T is the topic "T-partition-i".
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
	DefaultTenant    = "public"
	DefaultNamespace = "default"
	persistentScheme = "persistent://"
	partitionSuffix  = "-partition-"
	// MaxLength caps a full topic name.
	MaxLength = 512
)

// ErrInvalid is wrapped by every parse error.
var ErrInvalid = errors.New("invalid topic name")

// Name is a parsed topic name.
type Name struct {
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
	rest := s
	if i := strings.Index(s, "://"); i >= 0 {
		if s[:i+3] != persistentScheme {
			return Name{}, fmt.Errorf("%w: %q: only persistent:// topics are supported", ErrInvalid, s)
		}
		rest = s[i+3:]
		if strings.Count(rest, "/") != 2 {
			return Name{}, fmt.Errorf("%w: %q: want persistent://tenant/namespace/topic", ErrInvalid, s)
		}
	}
	var n Name
	switch parts := strings.Split(rest, "/"); len(parts) {
	case 1:
		n = Name{Tenant: DefaultTenant, Namespace: DefaultNamespace, Local: parts[0]}
	case 3:
		n = Name{Tenant: parts[0], Namespace: parts[1], Local: parts[2]}
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
	return persistentScheme + n.Tenant + "/" + n.Namespace + "/" + n.Local
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
