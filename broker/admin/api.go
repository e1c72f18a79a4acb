package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/magnetar-io/magnetar/broker/internal/errs"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// maxBody caps a request body.
const maxBody = 1 << 20

// Rule is a route's authorization: it returns nil to let the request
// through. Every route names one, checked before its handler runs.
type Rule func(r *http.Request) error

// Rules are the authorization rules the routes name; the broker decides
// them (broker/authz.go).
type Rules struct {
	// Superuser is the rule of cluster-wide calls.
	Superuser Rule
	// TenantAdmin is the rule of calls on a tenant ({tenant}) or one of
	// its namespaces ({tenant}/{ns}).
	TenantAdmin Rule
	// NamespaceLookup is the rule of listing a namespace's topics: a
	// grant on the namespace.
	NamespaceLookup Rule
	// TopicLookup, TopicConsume and TopicAdmin are the rules of calls on
	// the topic of the path (and its subscription {sub}, if the route has
	// one): looking it up, consuming from it, administering it.
	TopicLookup, TopicConsume, TopicAdmin Rule
}

// anyone lets every caller through (with authentication on, the path must
// also be in the broker's list of open paths).
func anyone(*http.Request) error { return nil }

// Backend is what the API asks of the broker, resource by resource; each
// resource's file declares its part.
type Backend interface {
	Clusters
	Brokers
	Tenants
	Namespaces
	Topics
	Subscriptions
	Schemas
	Permissions
	Bookies
}

// Redirect is an error that sends the request to the broker that owns
// its topic: it is answered 307 (which keeps the method and body) with
// Location.
type Redirect interface {
	error
	// Location is the owner's URL for the request.
	Location() string
}

// API serves the admin REST API under Pulsar's paths (/admin/v2/...).
// Errors are 4xx/5xx with a JSON body {"reason": ..., "errorCode": ...},
// unknown paths and methods included: Pulsar's {"reason"} plus a
// machine-readable code. (Not "code": the official Go admin library
// decodes "code" as a number.)
type API struct {
	b      Backend
	rules  Rules
	codeOf func(error) (string, int)
}

// New returns the API over b. codeOf is the one mapping of errors to the
// JSON "errorCode" and HTTP status.
func New(b Backend, rules Rules, codeOf func(error) (code string, status int)) *API {
	return &API{b: b, rules: rules, codeOf: codeOf}
}

// handler answers a request: a result to write (nil for 204) or an error.
type handler func(r *http.Request) (any, error)

// route registers a handler under its authorization rule.
type route func(pattern string, allow Rule, fn handler)

// Register adds the API's routes to mux.
func (a *API) Register(mux *http.ServeMux) {
	var h route = func(pattern string, allow Rule, fn handler) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			r.Body = http.MaxBytesReader(w, r.Body, maxBody)
			ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
			defer cancel()
			r = r.WithContext(ctx)
			if err := allow(r); err != nil {
				a.write(w, nil, err)
				return
			}
			out, err := fn(r)
			a.write(w, out, err)
		})
	}
	tenantRoutes(h, a.rules, a.b)
	namespaceRoutes(h, a.rules, a.b)
	subscriptionRoutes(h, a.rules, a.b)
	topicRoutes(h, a.rules, a.b)
	schemaRoutes(h, a.rules, a.b)
	clusterRoutes(h, a.rules, a.b)
	brokerRoutes(h, a.rules, a.b)
	bookieRoutes(h, a.rules, a.b)
	permissionRoutes(h, a.rules, a.b)
}

// WriteError answers a request with err, as the API answers errors.
func (a *API) WriteError(w http.ResponseWriter, err error) { a.write(w, nil, err) }

// RoutingErrors serves requests with mux, answering those it has no
// handler for in the API's JSON shape: 404 UNKNOWN_PATH for a path no
// pattern matches, 405 METHOD_NOT_ALLOWED (with mux's Allow header) for a
// path some pattern matches with another method. ServeMux decides which
// (a path matched with another method is its 405); it is asked, and its
// own plain-text answer is replaced.
func (a *API) RoutingErrors(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" { // a handler, or mux's redirect to a clean path
			mux.ServeHTTP(w, r)
			return
		}
		rec := &headerRecorder{header: http.Header{}}
		h.ServeHTTP(rec, r)
		if rec.status == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", rec.header.Get("Allow"))
			a.WriteError(w, fmt.Errorf("%w: %s %s (allowed: %s)", errs.ErrMethodNotAllowed, r.Method, r.URL.Path, rec.header.Get("Allow")))
			return
		}
		a.WriteError(w, fmt.Errorf("%w: %s %s", errs.ErrUnknownPath, r.Method, r.URL.Path))
	})
}

// headerRecorder keeps the status and headers a handler writes and drops
// its body.
type headerRecorder struct {
	header http.Header
	status int
}

func (h *headerRecorder) Header() http.Header { return h.header }

func (h *headerRecorder) WriteHeader(status int) {
	if h.status == 0 {
		h.status = status
	}
}

func (h *headerRecorder) Write(b []byte) (int, error) {
	h.WriteHeader(http.StatusOK)
	return len(b), nil
}

// plainText is a handler's answer sent as text/plain, not JSON (Pulsar's
// health check answers "ok").
type plainText string

// rawMessage is an answer of raw bytes with headers.
type rawMessage struct {
	header http.Header
	body   []byte
}

// write writes a JSON result, 204 for none, or the error.
func (a *API) write(w http.ResponseWriter, out any, err error) {
	w.Header().Set("Content-Type", "application/json")
	var redirect Redirect
	if errors.As(err, &redirect) {
		// 307 keeps the method and body: the owner answers.
		w.Header().Set("Location", redirect.Location())
		w.WriteHeader(http.StatusTemporaryRedirect)
		writeJSONBody(w, map[string]string{"reason": redirect.Error(), "errorCode": "REDIRECT"})
		return
	}
	if err != nil {
		code, status := a.codeOf(err)
		w.WriteHeader(status)
		writeJSONBody(w, map[string]string{"reason": err.Error(), "errorCode": code})
		return
	}
	if out == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if m, ok := out.(rawMessage); ok {
		writeRaw(w, m)
		return
	}
	if text, ok := out.(plainText); ok {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, string(text))
		return
	}
	if b, err := json.Marshal(out); err != nil {
		w.WriteHeader(http.StatusInternalServerError)
		writeJSONBody(w, map[string]string{"reason": "the answer could not be encoded: " + err.Error(), "errorCode": "INTERNAL"})
	} else {
		w.Write(b)
	}
}

// writeJSONBody writes v as JSON without a newline after it, as Pulsar's
// (Jackson's) answers: pulsaradmin takes some (a schema strategy) as the
// bare text.
func writeJSONBody(w http.ResponseWriter, v any) {
	b, _ := json.Marshal(v) // maps of strings: always encode
	w.Write(b)
}

// writeRaw writes a rawMessage answer.
func writeRaw(w http.ResponseWriter, m rawMessage) {
	for k, v := range m.header {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(m.body)))
	w.WriteHeader(http.StatusOK)
	w.Write(m.body)
}

// readJSON decodes the request body; an empty body is an error unless
// optional.
func readJSON(r *http.Request, v any, optional bool) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return errorf(errs.ErrInvalidArgument, "request body: %v", err)
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		if optional {
			return nil
		}
		return errorf(errs.ErrInvalidArgument, "request body is empty")
	}
	if err := json.Unmarshal(body, v); err != nil {
		return errorf(errs.ErrInvalidArgument, "request body: %v", err)
	}
	return nil
}

// nsOf is the namespace of the path ({tenant}/{ns}).
func nsOf(r *http.Request) string { return r.PathValue("tenant") + "/" + r.PathValue("ns") }

// TopicOf is the topic of the path ({tenant}/{ns}/{topic}), in the domain
// the path names.
func TopicOf(r *http.Request) (topicname.Name, error) {
	return topicname.Parse(domainOf(r).String() + "://" + nsOf(r) + "/" + r.PathValue("topic"))
}

// domainOf is the topic domain of a path under /admin/v2/{domain}/ or
// /lookup/v2/topic/{domain}/.
func domainOf(r *http.Request) topicname.Domain {
	for _, prefix := range []string{"/admin/v2/", "/lookup/v2/topic/"} {
		if strings.HasPrefix(r.URL.Path, prefix+topicname.NonPersistent.String()+"/") {
			return topicname.NonPersistent
		}
	}
	return topicname.Persistent
}

// nonNil answers a list, empty rather than null.
func nonNil(v []string, err error) (any, error) {
	if v == nil {
		v = []string{}
	}
	return v, err
}

func errorf(sentinel error, format string, args ...any) error {
	return errs.Errorf(sentinel, format, args...)
}
