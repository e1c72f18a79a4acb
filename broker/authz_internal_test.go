package broker

import (
	"errors"
	"testing"

	"github.com/magnetar-io/magnetar/proto/metapb"
)

// The authorization rule, case by case.
func TestDecide(t *testing.T) {
	acts := func(a ...string) *metapb.Actions { return &metapb.Actions{Actions: a} }
	p := &metapb.NamespacePolicies{
		NamespacePermissions: map[string]*metapb.Actions{"ns-producer": acts("produce"), "ns-consumer": acts("consume"), "fn": acts("functions")},
		TopicPermissions: map[string]*metapb.RolePermissions{
			"t": {Roles: map[string]*metapb.Actions{"t-consumer": acts("consume"), "t-both": acts("consume", "produce")}},
		},
	}
	prefix := &metapb.NamespacePolicies{SubscriptionPrefix: true, NamespacePermissions: map[string]*metapb.Actions{"bob": acts("consume")}}
	for _, c := range []struct {
		name string
		a    access
		ok   bool
	}{
		{"superuser administers", access{role: "root", superuser: true, op: opAdmin}, true},
		{"superuser without a namespace", access{role: "root", superuser: true, op: opProduce}, true},
		{"tenant admin administers", access{role: "ta", tenantAdmins: []string{"ta"}, op: opAdmin}, true},
		{"tenant admin produces", access{role: "ta", tenantAdmins: []string{"ta"}, policies: p, topic: "t", op: opProduce}, true},
		{"tenant admin ignores the prefix", access{role: "ta", tenantAdmins: []string{"ta"}, policies: prefix, topic: "t", op: opConsume, subscription: "x"}, true},
		{"grant holder does not administer", access{role: "t-both", policies: p, topic: "t", op: opAdmin}, false},
		{"cluster call", access{role: "ns-producer", op: opAdmin}, false},
		{"namespace produce grant", access{role: "ns-producer", policies: p, topic: "u", op: opProduce}, true},
		{"namespace produce grant: no consume", access{role: "ns-producer", policies: p, topic: "u", op: opConsume}, false},
		{"namespace produce grant: lookup", access{role: "ns-producer", policies: p, topic: "u", op: opLookup}, true},
		{"namespace consume grant: lookup", access{role: "ns-consumer", policies: p, topic: "u", op: opLookup}, true},
		{"namespace consume grant: list topics", access{role: "ns-consumer", policies: p, op: opLookup}, true},
		{"topic grant: its topic", access{role: "t-consumer", policies: p, topic: "t", op: opConsume}, true},
		{"topic grant: another topic", access{role: "t-consumer", policies: p, topic: "u", op: opConsume}, false},
		{"topic grant: not the namespace's topics list", access{role: "t-consumer", policies: p, op: opLookup}, false},
		{"topic grant: not produce", access{role: "t-consumer", policies: p, topic: "t", op: opProduce}, false},
		{"topic grant with produce", access{role: "t-both", policies: p, topic: "t", op: opProduce}, true},
		{"functions alone: no lookup", access{role: "fn", policies: p, topic: "t", op: opLookup}, false},
		{"no grant", access{role: "eve", policies: p, topic: "t", op: opLookup}, false},
		{"no namespace", access{role: "ns-producer", topic: "t", op: opProduce}, false},
		{"another tenant's admin", access{role: "other", tenantAdmins: []string{"ta"}, policies: p, topic: "t", op: opAdmin}, false},
		{"prefixed subscription", access{role: "bob", policies: prefix, topic: "t", op: opConsume, subscription: "bob-1"}, true},
		{"unprefixed subscription", access{role: "bob", policies: prefix, topic: "t", op: opConsume, subscription: "bobby"}, false},
		{"the role alone is no prefix", access{role: "bob", policies: prefix, topic: "t", op: opConsume, subscription: "bob"}, false},
		{"prefix without a subscription", access{role: "bob", policies: prefix, topic: "t", op: opConsume}, true},
		{"prefix rule off", access{role: "ns-consumer", policies: p, topic: "t", op: opConsume, subscription: "x"}, true},
	} {
		err := decide(c.a)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrUnauthorized)) {
			t.Errorf("%s: %v, want allowed=%v", c.name, err, c.ok)
		}
	}
}
