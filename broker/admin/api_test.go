package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/internal/errs"
	"github.com/magnetar-io/magnetar/broker/internal/mledger"
	"github.com/magnetar-io/magnetar/proto/entry"
	"github.com/magnetar-io/magnetar/proto/pulsarpb"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// fakeBackend answers the few calls these tests make; any other panics
// (the embedded nil interface).
type fakeBackend struct {
	Backend
	entry    mledger.Entry
	redirect error
	created  []string
}

func (f *fakeBackend) ClusterName() string { return "c1" }

func (f *fakeBackend) Tenants(context.Context) ([]string, error) { return nil, nil }

func (f *fakeBackend) Ready(context.Context) error { return nil }

func (f *fakeBackend) Entry(*http.Request, topicname.Name, mledger.Position) (mledger.Entry, error) {
	return f.entry, nil
}

func (f *fakeBackend) CheckTopic(*http.Request, topicname.Name) error { return f.redirect }

func (f *fakeBackend) CreateSubscription(_ *http.Request, n topicname.Name, sub string, start SubscriptionStart) error {
	f.created = append(f.created, n.String()+" "+sub+" "+start.String())
	return nil
}

type redirect struct{ url string }

func (r redirect) Error() string    { return "owned elsewhere" }
func (r redirect) Location() string { return r.url }

// codeOf is a stand-in for the broker's table.
func codeOf(err error) (string, int) {
	switch {
	case errors.Is(err, errs.ErrUnknownPath):
		return "UNKNOWN_PATH", http.StatusNotFound
	case errors.Is(err, errs.ErrMethodNotAllowed):
		return "METHOD_NOT_ALLOWED", http.StatusMethodNotAllowed
	case errors.Is(err, errs.ErrInvalidArgument):
		return "INVALID_ARGUMENT", http.StatusBadRequest
	case errors.Is(err, errs.ErrNotAllowed):
		return "AUTHORIZATION_ERROR", http.StatusForbidden
	}
	return "PERSISTENCE_ERROR", http.StatusInternalServerError
}

func serve(t *testing.T, b Backend, rules Rules) *httptest.Server {
	t.Helper()
	allow := func(*http.Request) error { return nil }
	for _, r := range []*Rule{&rules.Superuser, &rules.TenantAdmin, &rules.NamespaceLookup, &rules.TopicLookup, &rules.TopicConsume, &rules.TopicAdmin} {
		if *r == nil {
			*r = allow
		}
	}
	api := New(b, rules, codeOf)
	mux := http.NewServeMux()
	api.Register(mux)
	srv := httptest.NewServer(api.RoutingErrors(mux))
	t.Cleanup(srv.Close)
	return srv
}

type answer struct {
	status int
	header http.Header
	body   string
}

func do(t *testing.T, srv *httptest.Server, method, path, body string) answer {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header, string(b)}
}

// errorCode decodes the API's JSON error; it fails the test if the body
// is not one.
func errorCode(t *testing.T, a answer) string {
	t.Helper()
	var e struct {
		Reason string `json:"reason"`
		Code   string `json:"errorCode"`
	}
	if err := json.Unmarshal([]byte(a.body), &e); err != nil || e.Reason == "" || !strings.HasPrefix(a.header.Get("Content-Type"), "application/json") {
		t.Fatalf("%d %q (%s): not a JSON error (%v)", a.status, a.body, a.header.Get("Content-Type"), err)
	}
	return e.Code
}

// Unknown paths and methods are answered in the API's JSON shape, with
// the mux's Allow header.
func TestRoutingErrors(t *testing.T) {
	srv := serve(t, &fakeBackend{}, Rules{})
	a := do(t, srv, "GET", "/admin/v2/nothing", "")
	if code := errorCode(t, a); a.status != http.StatusNotFound || code != "UNKNOWN_PATH" {
		t.Errorf("unknown path: %d %s", a.status, code)
	}
	a = do(t, srv, "DELETE", "/admin/v2/tenants", "")
	if code := errorCode(t, a); a.status != http.StatusMethodNotAllowed || code != "METHOD_NOT_ALLOWED" || !strings.Contains(a.header.Get("Allow"), "GET") {
		t.Errorf("wrong method: %d %s, Allow %q", a.status, code, a.header.Get("Allow"))
	}
}

// A route's rule is checked before its handler runs; its error is the
// answer.
func TestRuleRefuses(t *testing.T) {
	b := &fakeBackend{}
	srv := serve(t, b, Rules{TopicConsume: func(*http.Request) error { return errs.ErrNotAllowed }})
	a := do(t, srv, "PUT", "/admin/v2/persistent/public/default/t/subscription/s", "")
	if code := errorCode(t, a); a.status != http.StatusForbidden || code != "AUTHORIZATION_ERROR" || len(b.created) != 0 {
		t.Errorf("refused: %d %s, created %v", a.status, code, b.created)
	}
}

// Results are JSON (a list never null), nothing is 204, text is
// text/plain.
func TestResults(t *testing.T) {
	srv := serve(t, &fakeBackend{}, Rules{})
	if a := do(t, srv, "GET", "/admin/v2/tenants", ""); a.status != http.StatusOK || strings.TrimSpace(a.body) != "[]" ||
		a.header.Get("Content-Type") != "application/json" {
		t.Errorf("tenants: %d %q %q", a.status, a.body, a.header.Get("Content-Type"))
	}
	if a := do(t, srv, "GET", "/admin/v2/brokers/ready", ""); a.status != http.StatusOK || a.body != "ok" ||
		!strings.HasPrefix(a.header.Get("Content-Type"), "text/plain") {
		t.Errorf("ready: %d %q %q", a.status, a.body, a.header.Get("Content-Type"))
	}
	if a := do(t, srv, "PUT", "/admin/v2/persistent/public/default/t/subscription/s", ""); a.status != http.StatusNoContent || a.body != "" {
		t.Errorf("create: %d %q", a.status, a.body)
	}
}

// A Redirect is a 307 to its Location, in the JSON shape.
func TestRedirect(t *testing.T) {
	srv := serve(t, &fakeBackend{redirect: redirect{"http://other:8080/admin/v2/persistent/public/default/t/properties"}}, Rules{})
	a := do(t, srv, "GET", "/admin/v2/persistent/public/default/t/properties", "")
	if code := errorCode(t, a); a.status != http.StatusTemporaryRedirect || code != "REDIRECT" ||
		a.header.Get("Location") != "http://other:8080/admin/v2/persistent/public/default/t/properties" {
		t.Errorf("redirect: %d %s, Location %q", a.status, code, a.header.Get("Location"))
	}
}

// A message is answered as Pulsar answers it: its payload, and its
// metadata in X-Pulsar-* headers.
func TestRawMessage(t *testing.T) {
	md := &pulsarpb.MessageMetadata{ProducerName: proto.String("p1"), SequenceId: proto.Uint64(7), PublishTime: proto.Uint64(1700000000123),
		PartitionKey: proto.String("k"), Properties: []*pulsarpb.KeyValue{{Key: proto.String("a"), Value: proto.String("b")}}}
	data, err := entry.Encode(md, []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, &fakeBackend{entry: mledger.Entry{Pos: mledger.Position{Ledger: 3, Entry: 4}, Data: data}}, Rules{})
	a := do(t, srv, "GET", "/admin/v2/persistent/public/default/t/ledger/3/entry/4", "")
	if a.status != http.StatusOK || a.body != "hello" || a.header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("entry: %d %q %q", a.status, a.body, a.header.Get("Content-Type"))
	}
	for k, want := range map[string]string{
		"X-Pulsar-Message-ID": "3:4", "X-Pulsar-producer-name": "p1", "X-Pulsar-sequence-id": "7",
		"X-Pulsar-publish-time": "2023-11-14T22:13:20.123Z", "X-Pulsar-partition-key": "k", "X-Pulsar-PROPERTY": `{"a":"b"}`,
	} {
		if got := a.header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
}

// The body of a subscription's creation: Pulsar's admin clients' message
// ids, or no body (latest, or ?messageId=).
func TestReadSubscriptionStart(t *testing.T) {
	for _, tc := range []struct {
		query, body, want string
	}{
		{"", "", "latest"},
		{"", "null", "latest"},
		{"?messageId=earliest", "", "earliest"},
		{"", `{"ledgerId":-1,"entryId":-1,"partitionedIndex":-1}`, "earliest"},
		{"", `{"ledgerId":9223372036854775807,"entryId":9223372036854775807}`, "latest"},
		{"", `{"ledgerId":3,"entryId":4,"partitionIndex":-1,"isExcluded":false,"batchIndex":-1}`, "3:4"},
		{"?messageId=middle", "", "error"},
		{"", `{"ledgerId":-5,"entryId":3}`, "error"},
		{"", `{"entryId":3}`, "error"},
		{"", `[1,2]`, "error"},
	} {
		r := httptest.NewRequest("PUT", "/x"+tc.query, strings.NewReader(tc.body))
		st, err := readSubscriptionStart(r)
		got := st.String()
		if err != nil {
			got = "error"
			if !errors.Is(err, errs.ErrInvalidArgument) {
				t.Errorf("%s %s: %v, want ErrInvalidArgument", tc.query, tc.body, err)
			}
		}
		if got != tc.want {
			t.Errorf("%s %s: %s, want %s", tc.query, tc.body, got, tc.want)
		}
	}
	if b := (SubscriptionStart{Latest: true}).Body(); b["ledgerId"] != math.MaxInt64 || b["entryId"] != math.MaxInt64 {
		t.Errorf("latest's body: %v", b)
	}
}
