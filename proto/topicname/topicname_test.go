package topicname

import (
	"errors"
	"slices"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"t", "persistent://public/default/t"},
		{"acme/orders/t.1", "persistent://acme/orders/t.1"},
		{"persistent://acme/orders/events-v2", "persistent://acme/orders/events-v2"},
		{"persistent://public/default/t-partition-3", "persistent://public/default/t-partition-3"},
		{"non-persistent://acme/orders/t", "non-persistent://acme/orders/t"},
		{"non-persistent://public/default/t-partition-0", "non-persistent://public/default/t-partition-0"},
	} {
		n, err := Parse(tc.in)
		if err != nil || n.String() != tc.want {
			t.Errorf("Parse(%q) = %q, %v; want %q", tc.in, n, err, tc.want)
		}
		again, err := Parse(n.String())
		if err != nil || again != n {
			t.Errorf("%q does not round-trip: %v", tc.in, err)
		}
	}
	for _, bad := range []string{
		"", "a/b", "a/b/c/d", "non-persistent://public/t", "non-persistent://t", "Persistent://a/b/c",
		"non-persistent://a/b/c/d", "persistent://public/t",
		"persistent://pub lic/default/t", "pub/ns/", "/ns/t", "t\x00", "t?x", "http://a/b/c",
		string(make([]byte, MaxLength+1)),
	} {
		if _, err := Parse(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestPartitions(t *testing.T) {
	n, _ := Parse("orders")
	p := n.Partition(7)
	if p.String() != "persistent://public/default/orders-partition-7" || p.PartitionIndex() != 7 || p.Base() != n {
		t.Fatalf("partition: %v %d %v", p, p.PartitionIndex(), p.Base())
	}
	for _, local := range []string{"orders", "orders-partition-", "orders-partition-x", "orders-partition-07", "orders-partition--1"} {
		if (Name{Tenant: "a", Namespace: "b", Local: local}).PartitionIndex() != -1 {
			t.Errorf("%q taken for a partition", local)
		}
	}
	if n.NamespaceName() != "public/default" {
		t.Fatal(n.NamespaceName())
	}
}

// TestDomains: the domain is part of the name: the same local name is two
// topics, with two paths, and the short forms are persistent.
func TestDomains(t *testing.T) {
	p, _ := Parse("persistent://a/b/c")
	np, err := Parse("non-persistent://a/b/c")
	if err != nil {
		t.Fatal(err)
	}
	if p.Domain != Persistent || np.Domain != NonPersistent || !p.Persistent() || np.Persistent() || p == np {
		t.Fatalf("domains: %+v %+v", p, np)
	}
	if p.Path() != "a/b/c" || np.Path() != "a/b/non-persistent/c" {
		t.Fatalf("paths %q %q", p.Path(), np.Path())
	}
	if short, _ := Parse("a/b/c"); short != p {
		t.Fatalf("short form %+v", short)
	}
	if part := np.Partition(2); part.Domain != NonPersistent || part.Base() != np || part.String() != "non-persistent://a/b/c-partition-2" {
		t.Fatalf("partition %+v", part)
	}
	if Persistent.String() != "persistent" || NonPersistent.String() != "non-persistent" {
		t.Fatal(Persistent, NonPersistent)
	}
	for _, n := range []Name{p, np, np.Partition(0)} {
		back, err := ParsePath(n.Path())
		if err != nil || back != n {
			t.Errorf("ParsePath(%q) = %+v, %v; want %+v", n.Path(), back, err, n)
		}
	}
	for _, bad := range []string{"a/b", "a/b/x/c", "a/b/non-persistent/c/d", "a/b/c?"} {
		if _, err := ParsePath(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParsePath(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add("persistent://a/b/c")
	f.Add("non-persistent://a/b/c")
	f.Add("t-partition-1")
	f.Fuzz(func(t *testing.T, s string) {
		n, err := Parse(s)
		if err != nil {
			return
		}
		again, err := Parse(n.String())
		if err != nil || again != n {
			t.Fatalf("%q parsed to %v, which does not round-trip: %v", s, n, err)
		}
		back, err := ParsePath(n.Path())
		if err != nil || back != n {
			t.Fatalf("%q: path %q does not round-trip: %v, %v", s, n.Path(), back, err)
		}
	})
}

// The character rules of names, case by case (see checkLocal and
// CheckSegment for where each comes from in Pulsar).
func TestNameCharacterRules(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
		// why documents the case.
		why string
	}{
		{"bad topic", true, "Pulsar accepts spaces inside a topic name"},
		{"t-partition-99999", true, "a partition name is valid syntax; the broker checks the partition exists"},
		{"t-partition-x", true, "not a partition name"},
		{`quo"te'`, true, "Pulsar accepts quotes (apache/pulsar#20231)"},
		{"ünïcødé-トピック", true, "printable Unicode"},
		{"a=b:c.d_e-f", true, "the named-entity characters"},
		{"tenant_1/ns.a=b:c-d/t", true, "tenant and namespace: [-=:.\\w]"},

		{"persistent://public/default/ leading", false, "leading white space (Pulsar refuses it at creation since apache/pulsar#26281)"},
		{"trailing ", false, "trailing white space"},
		{"trailing ", false, "trailing no-break space"},
		{" ", false, "blank (Pulsar: StringUtils.isBlank)"},
		{"   ", false, "blank"},
		{"\u3000", false, "blank: ideographic space"},
		{"\t", false, "blank, and a control character"},
		{"t\x00", false, "NUL"},
		{"t\nx", false, "newline"},
		{"t\x7f", false, "DEL"},
		{"t\u0085x", false, "C1 control character (NEL)"},
		{"t\u009b", false, "C1 control character (CSI)"},
		{"a\xffb", false, "invalid UTF-8"},
		{"t?x", false, "URL metacharacter ?"},
		{"t#x", false, "URL metacharacter #"},
		{"t%20x", false, "URL metacharacter %"},
		{`t\x`, false, "backslash"},
		{"t*", false, "pattern character *"},
		{"persistent://public/default/a/b", false, "a '/' in the local name"},
		{"persistent://bad tenant/ns/t", false, "tenant outside [-=:.\\w]"},
		{"persistent://pub/bad ns/t", false, "namespace outside [-=:.\\w]"},
		{"persistent://pub/n$s/t", false, "namespace outside [-=:.\\w]"},
		{"persistent://tenänt/ns/t", false, "Java's \\w is ASCII only"},
		{"persistent:///ns/t", false, "empty tenant"},
		{"persistent://t//x", false, "empty namespace"},
	} {
		_, err := Parse(tc.in)
		if tc.ok && err != nil {
			t.Errorf("Parse(%q) = %v; want it accepted: %s", tc.in, err, tc.why)
		}
		if !tc.ok && !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q) = %v; want ErrInvalid: %s", tc.in, err, tc.why)
		}
	}
}

func TestContainsPartitionSuffix(t *testing.T) {
	for local, want := range map[string]bool{"x": false, "x-partition-1": true, "x-partition-abc": true, "x-partition-": true, "xpartition-1": false} {
		if got := (Name{Tenant: "a", Namespace: "b", Local: local}).ContainsPartitionSuffix(); got != want {
			t.Errorf("%q: %v, want %v", local, got, want)
		}
	}
}

// A topic list's mode, as Pulsar spells it, names its domains.
func TestDomainsOfMode(t *testing.T) {
	for _, tc := range []struct {
		mode string
		want []Domain
		ok   bool
	}{
		{"", []Domain{Persistent}, true},
		{"PERSISTENT", []Domain{Persistent}, true},
		{"NON_PERSISTENT", []Domain{NonPersistent}, true},
		{"ALL", []Domain{Persistent, NonPersistent}, true},
		{"all", nil, false},
		{"NONPERSISTENT", nil, false},
	} {
		got, ok := DomainsOfMode(tc.mode)
		if ok != tc.ok || !slices.Equal(got, tc.want) {
			t.Errorf("DomainsOfMode(%q) = %v, %v; want %v, %v", tc.mode, got, ok, tc.want, tc.ok)
		}
	}
}
