package topicname

import (
	"errors"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"t", "persistent://public/default/t"},
		{"acme/orders/t.1", "persistent://acme/orders/t.1"},
		{"persistent://acme/orders/events-v2", "persistent://acme/orders/events-v2"},
		{"persistent://public/default/t-partition-3", "persistent://public/default/t-partition-3"},
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
		"", "a/b", "a/b/c/d", "non-persistent://public/default/t", "persistent://public/t",
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

func FuzzParse(f *testing.F) {
	f.Add("persistent://a/b/c")
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
	})
}
