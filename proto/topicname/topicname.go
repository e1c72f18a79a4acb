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
// - _ . = : only.
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

func checkLocal(s string) error {
	if s == "" {
		return errors.New("empty topic")
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == '/' || r == '\\' || r == '%' || r == '?' || r == '#' || r == '*' {
			return fmt.Errorf("topic %q has character %q", s, r)
		}
	}
	return nil
}

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
