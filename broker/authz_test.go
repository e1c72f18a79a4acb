package broker_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/proto/brokerpb"
)

// newAuthzEnv is a broker with authentication and authorization on;
// "admin" is its superuser.
func newAuthzEnv(t *testing.T) *authEnv {
	return newAuthEnv(t, func(c *broker.Config) {
		c.AuthorizationEnabled, c.SuperuserRoles = true, []string{"admin"}
	})
}

// call is an admin request with a JSON body (nil for none) and the role's
// token; it returns the status and the body.
func (e *authEnv) call(t *testing.T, role, method, path string, body any) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, "http://"+e.b.HTTPAddr()+path, rd)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+e.token(t, role, time.Hour))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// must is call that fails the test unless the answer is 2xx.
func (e *authEnv) must(t *testing.T, role, method, path string, body any) string {
	t.Helper()
	code, out := e.call(t, role, method, path, body)
	if code/100 != 2 {
		t.Fatalf("%s %s as %s: %d %s", method, path, role, code, out)
	}
	return out
}

func (e *authEnv) as(t *testing.T, role string) client.Client {
	return e.clientWith(t, client.NewAuthenticationToken(e.token(t, role, time.Hour)))
}

// Roles get what Pulsar's model gives them, at every edge: the superuser
// everything; a tenant's admins their tenant; other roles what the grants
// of a namespace or topic allow, for produce, consume, lookups, stats and
// peeks; nothing is read or written for a refused one.
func TestAuthorizationAtEveryEdge(t *testing.T) {
	e := newAuthzEnv(t)
	const ns = "/admin/v2/namespaces/acme/ns"
	const topic = "persistent://acme/ns/orders"
	const topicPath = "/admin/v2/persistent/acme/ns/orders"
	e.must(t, "admin", "PUT", "/admin/v2/tenants/acme", map[string]any{"adminRoles": []string{"acme-admin"}})
	e.must(t, "admin", "PUT", "/admin/v2/tenants/globex", map[string]any{"adminRoles": []string{"globex-admin"}})
	// The tenant admin sets its tenant up.
	e.must(t, "acme-admin", "PUT", ns, nil)
	e.must(t, "acme-admin", "PUT", topicPath, nil)
	e.must(t, "acme-admin", "POST", ns+"/permissions/alice", []string{"produce"})
	e.must(t, "acme-admin", "POST", topicPath+"/permissions/bob", []string{"consume"})
	if got := e.must(t, "acme-admin", "GET", topicPath+"/permissions", nil); got != `{"alice":["produce"],"bob":["consume"]}` {
		t.Fatalf("topic permissions: %s", got)
	}

	// alice produces and may look the topic up, but not consume.
	alice := e.as(t, "alice")
	p, err := alice.CreateProducer(client.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, p, 0, 5)
	p.Close()
	if _, err := alice.TopicPartitions(topic); err != nil {
		t.Fatalf("lookup with produce: %v", err)
	}
	if _, err := alice.Subscribe(client.ConsumerOptions{Topic: topic, SubscriptionName: "a"}); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("alice subscribes: %v, want ErrUnauthorized", err)
	}
	// bob consumes this topic only, and reads its stats and peeks.
	bob := e.as(t, "bob")
	cons, err := bob.Subscribe(client.ConsumerOptions{Topic: topic, SubscriptionName: "s", SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	receiveN(t, cons, 5)
	cons.Close()
	if _, err := bob.CreateProducer(client.ProducerOptions{Topic: topic}); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("bob produces: %v, want ErrUnauthorized", err)
	}
	if _, err := bob.Subscribe(client.ConsumerOptions{Topic: "persistent://acme/ns/other", SubscriptionName: "s"}); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("bob subscribes to another topic: %v, want ErrUnauthorized", err)
	}
	e.must(t, "bob", "GET", topicPath+"/stats", nil)
	e.must(t, "bob", "GET", topicPath+"/subscription/s/position/1", nil)
	if code, out := e.call(t, "bob", "DELETE", topicPath, nil); code != http.StatusForbidden {
		t.Fatalf("bob deletes the topic: %d %s, want 403", code, out)
	}

	// Roles without grants, and another tenant's admin, get nothing; a
	// refusal is a clear error, fast, and writes nothing.
	for _, role := range []string{"eve", "globex-admin"} {
		t.Run(role, func(t *testing.T) {
			c := e.as(t, role)
			start := time.Now()
			for what, err := range map[string]error{
				"produce": func() error {
					_, err := c.CreateProducer(client.ProducerOptions{Topic: "persistent://acme/ns/new"})
					return err
				}(),
				"consume": func() error {
					_, err := c.Subscribe(client.ConsumerOptions{Topic: topic, SubscriptionName: "x"})
					return err
				}(),
				"read": func() error {
					_, err := c.CreateReader(client.ReaderOptions{Topic: topic, StartMessageID: client.EarliestMessageID()})
					return err
				}(),
				"partitioned lookup":  func() error { _, err := c.TopicPartitions(topic); return err }(),
				"lookup of a new one": func() error { _, err := c.TopicPartitions("persistent://acme/ns/new"); return err }(),
			} {
				if !errors.Is(err, client.ErrUnauthorized) {
					t.Errorf("%s: %v, want ErrUnauthorized", what, err)
				}
			}
			// The unary calls, straight on the wire.
			ctx := metadata.AppendToOutgoingContext(ctxT(t), "authorization", "Bearer "+e.token(t, role, time.Hour))
			bc := dialBroker(t, e.b.Addr())
			_, lerr := bc.Lookup(ctx, &brokerpb.LookupRequest{Topic: topic})
			_, merr := bc.GetLastMessageId(ctx, &brokerpb.GetLastMessageIdRequest{Topic: topic})
			_, perr := bc.PartitionedMetadata(ctx, &brokerpb.PartitionedMetadataRequest{Topic: topic})
			for what, err := range map[string]error{"Lookup": lerr, "GetLastMessageId": merr, "PartitionedMetadata": perr} {
				if status.Code(err) != codes.PermissionDenied {
					t.Errorf("%s: %v, want PermissionDenied", what, err)
				}
			}
			if time.Since(start) > 20*time.Second {
				t.Errorf("refused after %v: an authorization failure is not retried", time.Since(start))
			}
			for _, c := range []struct{ method, path string }{
				{"GET", topicPath + "/stats"},
				{"GET", topicPath + "/internalStats"},
				{"GET", topicPath + "/subscription/s/position/1"},
				{"POST", topicPath + "/subscription/s/skip/1"},
				{"PUT", topicPath + "/subscription/mine"},
				{"GET", topicPath + "/permissions"},
				{"POST", topicPath + "/permissions/" + role},
				{"PUT", "/admin/v2/persistent/acme/ns/created"},
				{"GET", "/admin/v2/persistent/acme/ns"},
				{"GET", ns + "/retention"},
				{"POST", ns + "/permissions/" + role},
				{"PUT", "/admin/v2/namespaces/acme/ns2"},
				{"GET", "/admin/v2/namespaces/acme"},
				{"GET", "/admin/v2/tenants"},
				{"GET", "/admin/v2/tenants/acme"},
				{"POST", "/admin/v2/tenants/acme"},
				{"GET", "/admin/v2/brokers"},
				{"GET", "/admin/v2/owners"},
				{"GET", "/admin/v2/bookies/all"},
			} {
				code, out := e.call(t, role, c.method, c.path, []string{"produce", "consume"})
				if code != http.StatusForbidden || !strings.Contains(out, "AUTHORIZATION_ERROR") || !strings.Contains(out, role) {
					t.Errorf("%s %s: %d %s, want 403 naming the role", c.method, c.path, code, out)
				}
			}
		})
	}
	for _, path := range []string{"/admin/v2/persistent/acme/ns/new/stats", "/admin/v2/persistent/acme/ns/created/stats"} {
		if code, out := e.call(t, "admin", "GET", path, nil); code != http.StatusNotFound {
			t.Fatalf("after the refusals %s: %d %s, want 404 (nothing created)", path, code, out)
		}
	}
	if got := e.must(t, "admin", "GET", topicPath+"/subscriptions", nil); got != `["s"]` {
		t.Fatalf("subscriptions after the refusals: %s", got)
	}
	// A name that tries to leave its tenant is refused as a name.
	if code, out := e.call(t, "bob", "GET", "/admin/v2/persistent/acme/ns/..%2F..%2Fglobex%2Fns%2Ft/stats", nil); code != http.StatusBadRequest {
		t.Fatalf("a topic name with slashes: %d %s, want 400", code, out)
	}
	// globex's admin runs its own tenant.
	e.must(t, "globex-admin", "PUT", "/admin/v2/namespaces/globex/ns", nil)
	gp, err := e.as(t, "globex-admin").CreateProducer(client.ProducerOptions{Topic: "persistent://globex/ns/t"})
	if err != nil {
		t.Fatal(err)
	}
	gp.Close()
}

// With the namespace's subscription auth mode at Prefix, a role's durable
// subscriptions must be named "<role>-..."; readers are exempt, and so are
// tenant admins.
func TestSubscriptionPrefixRule(t *testing.T) {
	e := newAuthzEnv(t)
	const ns = "/admin/v2/namespaces/acme/ns"
	const topic = "persistent://acme/ns/t"
	e.must(t, "admin", "PUT", "/admin/v2/tenants/acme", map[string]any{"adminRoles": []string{"acme-admin"}})
	e.must(t, "acme-admin", "PUT", ns, nil)
	e.must(t, "acme-admin", "POST", ns+"/permissions/bob", []string{"consume", "produce"})
	if got := e.must(t, "acme-admin", "GET", ns+"/subscriptionAuthMode", nil); got != `"None"` {
		t.Fatalf("default mode: %s", got)
	}
	bob := e.as(t, "bob")
	c, err := bob.Subscribe(client.ConsumerOptions{Topic: topic, SubscriptionName: "anything"})
	if err != nil {
		t.Fatalf("without the rule: %v", err)
	}
	c.Close()
	e.must(t, "acme-admin", "POST", ns+"/subscriptionAuthMode", "Prefix")
	if code, out := e.call(t, "acme-admin", "POST", ns+"/subscriptionAuthMode", "Sometimes"); code != http.StatusBadRequest {
		t.Fatalf("a bad mode: %d %s", code, out)
	}
	_, err = bob.Subscribe(client.ConsumerOptions{Topic: topic, SubscriptionName: "anything"})
	if !errors.Is(err, client.ErrUnauthorized) || !strings.Contains(err.Error(), `"bob-..."`) {
		t.Fatalf("an unprefixed subscription: %v, want ErrUnauthorized naming the prefix", err)
	}
	if code, out := e.call(t, "bob", "POST", "/admin/v2/persistent/acme/ns/t/subscription/anything/skip/1", nil); code != http.StatusForbidden {
		t.Fatalf("skip on another's subscription: %d %s, want 403", code, out)
	}
	c, err = bob.Subscribe(client.ConsumerOptions{Topic: topic, SubscriptionName: "bob-orders"})
	if err != nil {
		t.Fatalf("a prefixed subscription: %v", err)
	}
	c.Close()
	r, err := bob.CreateReader(client.ReaderOptions{Topic: topic, StartMessageID: client.EarliestMessageID()})
	if err != nil {
		t.Fatalf("a reader: %v", err)
	}
	r.Close()
	// A reader (not held to the prefix) cannot take over a durable
	// subscription by its name, nor a durable subscription a reader's.
	e.must(t, "acme-admin", "POST", ns+"/permissions/carol", []string{"consume"})
	carol := e.as(t, "carol")
	if _, err := carol.CreateReader(client.ReaderOptions{Topic: topic, Name: "bob-orders", StartMessageID: client.EarliestMessageID()}); err == nil ||
		!strings.Contains(err.Error(), "is a durable subscription") {
		t.Fatalf("a reader named after bob's subscription: %v", err)
	}
	r, err = carol.CreateReader(client.ReaderOptions{Topic: topic, Name: "bob-later", StartMessageID: client.EarliestMessageID()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bob.Subscribe(client.ConsumerOptions{Topic: topic, SubscriptionName: "bob-later"}); err == nil || !strings.Contains(err.Error(), "is a reader's") {
		t.Fatalf("a durable subscription named after a reader's: %v", err)
	}
	r.Close()
	c, err = e.as(t, "acme-admin").Subscribe(client.ConsumerOptions{Topic: topic, SubscriptionName: "ops"})
	if err != nil {
		t.Fatalf("the tenant admin: %v", err)
	}
	c.Close()
}

// Grants are revoked by role; a deleted topic's grants go with it, so a
// topic created again under its name starts with none.
func TestGrantsRevokedAndDroppedWithTheTopic(t *testing.T) {
	e := newAuthzEnv(t)
	const ns = "/admin/v2/namespaces/acme/ns"
	const topicPath = "/admin/v2/persistent/acme/ns/t"
	e.must(t, "admin", "PUT", "/admin/v2/tenants/acme", nil)
	e.must(t, "admin", "PUT", ns, nil)
	e.must(t, "admin", "PUT", topicPath, nil)
	// Bad grants are refused.
	for _, c := range []struct {
		path string
		body any
	}{
		{ns + "/permissions/bob", []string{"fly"}},
		{ns + "/permissions/bob", []string{}},
		{ns + "/permissions/bob", "produce"},
		{topicPath + "-partition-0/permissions/bob", []string{"produce"}},
	} {
		if code, out := e.call(t, "admin", "POST", c.path, c.body); code != http.StatusBadRequest {
			t.Errorf("grant %s %v: %d %s, want 400", c.path, c.body, code, out)
		}
	}
	e.must(t, "admin", "POST", ns+"/permissions/carol", []string{"consume", "produce", "produce"})
	if got := e.must(t, "admin", "GET", ns+"/permissions", nil); got != `{"carol":["consume","produce"]}` {
		t.Fatalf("namespace permissions: %s", got)
	}
	carol := e.as(t, "carol")
	p, err := carol.CreateProducer(client.ProducerOptions{Topic: "persistent://acme/ns/t"})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	e.must(t, "admin", "DELETE", ns+"/permissions/carol", nil)
	if code, _ := e.call(t, "admin", "DELETE", ns+"/permissions/carol", nil); code != http.StatusNotFound {
		t.Fatalf("revoking again: %d, want 404", code)
	}
	if _, err := carol.CreateProducer(client.ProducerOptions{Topic: "persistent://acme/ns/t"}); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("after the revocation: %v, want ErrUnauthorized", err)
	}
	// A topic grant, then the topic is deleted and created again.
	e.must(t, "admin", "POST", topicPath+"/permissions/dave", []string{"produce"})
	e.must(t, "admin", "DELETE", topicPath, nil)
	e.must(t, "admin", "PUT", topicPath, nil)
	if got := e.must(t, "admin", "GET", topicPath+"/permissions", nil); got != `{}` {
		t.Fatalf("the new topic's permissions: %s, want none", got)
	}
	if _, err := e.as(t, "dave").CreateProducer(client.ProducerOptions{Topic: "persistent://acme/ns/t"}); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("dave on the new topic: %v, want ErrUnauthorized", err)
	}
	// The tenant's admin roles can be replaced by a superuser.
	e.must(t, "admin", "POST", "/admin/v2/tenants/acme", map[string]any{"adminRoles": []string{"dave"}})
	if got := e.must(t, "admin", "GET", "/admin/v2/tenants/acme", nil); got != `{"adminRoles":["dave"],"allowedClusters":[]}` {
		t.Fatalf("tenant: %s", got)
	}
	// Reading a tenant is a superuser's, as in Pulsar: not its admin's.
	if code, out := e.call(t, "dave", "GET", "/admin/v2/tenants/acme", nil); code != http.StatusForbidden || !strings.Contains(out, "AUTHORIZATION_ERROR") {
		t.Fatalf("the tenant's admin reading the tenant: %d %s, want 403", code, out)
	}
	p, err = e.as(t, "dave").CreateProducer(client.ProducerOptions{Topic: "persistent://acme/ns/t"})
	if err != nil {
		t.Fatalf("dave as the tenant's admin: %v", err)
	}
	p.Close()
}

func TestAuthorizationSettingsAreChecked(t *testing.T) {
	for _, tc := range []struct {
		configure func(*broker.Config)
		want      string
	}{
		{func(c *broker.Config) { c.AuthorizationEnabled = true }, "--authorization-enabled needs --authentication-enabled"},
		{func(c *broker.Config) { c.SuperuserRoles = []string{"admin"} }, "--superuser-roles without --authorization-enabled"},
		{func(c *broker.Config) {
			c.AuthenticationEnabled, c.TokenSecretKey, c.AuthorizationEnabled, c.SuperuserRoles = true, "k", true, []string{""}
		}, `role ""`},
	} {
		c := broker.DefaultConfig()
		c.Metastore = []string{"127.0.0.1:2379"}
		tc.configure(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v, want %q", err, tc.want)
		}
	}
}

// With authorization on, profiles are for superusers (the command line
// they show may hold a key), and so is /metrics when it wants credentials.
func TestProfilesAndMetricsForSuperusers(t *testing.T) {
	e := newAuthEnv(t, func(c *broker.Config) {
		c.AuthorizationEnabled, c.SuperuserRoles, c.Pprof, c.AuthenticateMetricsEndpoint = true, []string{"admin"}, true, true
	})
	for _, path := range []string{"/debug/pprof/cmdline", "/debug/pprof/", "/metrics"} {
		if code, out := e.call(t, "alice", "GET", path, nil); code != http.StatusForbidden {
			t.Errorf("%s as a plain role: %d %.80s, want 403", path, code, out)
		}
		if code, out := e.call(t, "admin", "GET", path, nil); code != http.StatusOK {
			t.Errorf("%s as the superuser: %d %.80s", path, code, out)
		}
	}
}
