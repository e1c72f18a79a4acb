package broker_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/magnetar-io/magnetar/bookie/autorecovery"
	"github.com/magnetar-io/magnetar/client"
)

// The bookies resource: list with states, one bookie, the marks, and the
// decommission actions with their errors in the API's JSON shape.
func TestAdminBookies(t *testing.T) {
	e := newEnv(t, nil)
	p, err := e.client().CreateProducer(client.ProducerOptions{Topic: "persistent://public/default/bk"})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, p, 0, 3)
	p.Close()
	all, err := adminGetJSON[[]autorecovery.BookieStatus](e, "/admin/v2/bookies/all")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || all[0].State != autorecovery.StateWritable || all[0].Ledgers == 0 || all[0].Address == "" || all[0].DiskFreeBytes == 0 {
		t.Fatalf("bookies: %+v", all)
	}
	id := all[0].ID
	one, err := adminGetJSON[autorecovery.BookieStatus](e, "/admin/v2/bookies/"+url.PathEscape(id))
	if err != nil || one.ID != id {
		t.Fatalf("one bookie: %+v, %v", one, err)
	}
	ur, err := adminGetJSON[struct {
		Count int                 `json:"count"`
		Marks []autorecovery.Mark `json:"marks"`
	}](e, "/admin/v2/bookies/under-replicated")
	if err != nil || ur.Count != 0 || ur.Marks == nil || len(ur.Marks) != 0 {
		t.Fatalf("under-replicated: %+v, %v", ur, err)
	}
	for _, tc := range []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/admin/v2/bookies/nosuch", 404, "BOOKIE_NOT_FOUND"},
		{"POST", "/admin/v2/bookies/nosuch/decommission", 404, "BOOKIE_NOT_FOUND"},
		// The only bookie: the ledgers' ensemble of 1 cannot be kept.
		{"POST", "/admin/v2/bookies/" + url.PathEscape(id) + "/decommission", 412, "NOT_ENOUGH_BOOKIES"},
		{"POST", "/admin/v2/bookies/" + url.PathEscape(id) + "/recommission", 409, "NOT_DRAINING"},
	} {
		code, body, err := adminDo(e, tc.method, tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Reason string `json:"reason"`
			Code   string `json:"errorCode"`
		}
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("%s %s: body %q is not JSON: %v", tc.method, tc.path, body, err)
		}
		if code != tc.status || got.Code != tc.code || got.Reason == "" {
			t.Errorf("%s %s: %d %+v, want %d %s", tc.method, tc.path, code, got, tc.status, tc.code)
		}
	}
	if code, _, _ := adminDo(e, http.MethodGet, "/admin/v2/bookies/"+url.PathEscape(id), nil); code != http.StatusOK {
		t.Fatalf("bookie after refused decommission: %d", code)
	}
}
