package broker_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// The admin API tells an unknown path (404 UNKNOWN_PATH) from a missing
// topic (404 TOPIC_NOT_FOUND), and a known path asked with the wrong
// method gets 405 with an Allow header; all with a JSON reason.
func TestAdminUnknownPathsAndMethods(t *testing.T) {
	e := newEnv(t, nil)
	for _, tc := range []struct {
		method, path string
		status       int
		code, allow  string
	}{
		{"GET", "/admin/v2/nothing/here", 404, "UNKNOWN_PATH", ""},
		{"GET", "/", 404, "UNKNOWN_PATH", ""},
		{"PUT", "/admin/v2/persistent/public/default/t/no-such-verb", 404, "UNKNOWN_PATH", ""},
		{"GET", "/admin/v2/persistent/public/default/nosuch/stats", 404, "TOPIC_NOT_FOUND", ""},
		{"DELETE", "/admin/v2/tenants", 405, "METHOD_NOT_ALLOWED", "GET"},
		{"POST", "/admin/v2/persistent/public/default/t/stats", 405, "METHOD_NOT_ALLOWED", "GET"},
		{"PATCH", "/admin/v2/tenants/acme", 405, "METHOD_NOT_ALLOWED", "DELETE, GET, HEAD, POST, PUT"},
		{"GET", "/admin/v2/persistent/public/default/t/subscription/s", 405, "METHOD_NOT_ALLOWED", "DELETE, PUT"},
	} {
		req, err := http.NewRequest(tc.method, "http://"+e.b.HTTPAddr()+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Reason string `json:"reason"`
			Code   string `json:"errorCode"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err != nil || body.Reason == "" || resp.StatusCode != tc.status || body.Code != tc.code {
			t.Errorf("%s %s: %s %+v (%v), want %d %s with a JSON reason", tc.method, tc.path, resp.Status, body, err, tc.status, tc.code)
		}
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Errorf("%s %s: Content-Type %q", tc.method, tc.path, ct)
		}
		if allow := resp.Header.Get("Allow"); tc.allow != "" && !strings.Contains(allow, tc.allow) {
			t.Errorf("%s %s: Allow %q, want it to list %s", tc.method, tc.path, allow, tc.allow)
		}
	}
}
