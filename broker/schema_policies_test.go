package broker_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/magnetar-io/magnetar/client"
)

// A namespace's schema policies: its compatibility strategy, over the
// broker's (FULL here), decides which new schema versions are taken
// (UNDEFINED gives it back to the broker's); with schema validation
// enforced, a producer without a schema (the SDK's) is refused on a topic
// that has one, and admitted on one that has none.
func TestNamespaceSchemaPolicies(t *testing.T) {
	e := newEnv(t, nil)
	const ns = "/admin/v2/namespaces/public/default"
	const schemas = "/admin/v2/schemas/public/default/typed"
	for _, topic := range []string{"typed", "untyped"} {
		if code, body, err := adminDo(e, http.MethodPut, "/admin/v2/persistent/public/default/"+topic, nil); err != nil || code != http.StatusNoContent {
			t.Fatalf("create %s: %d %s %v", topic, code, body, err)
		}
	}
	record := func(fields string) map[string]any {
		return map[string]any{"type": "AVRO", "schema": `{"type":"record","name":"R","fields":[` + fields + `]}`, "properties": map[string]string{}}
	}
	v0 := record(`{"name":"a","type":"string"}`)
	v1 := record(`{"name":"a","type":"string"},{"name":"b","type":"int","default":0}`)
	v2 := record(`{"name":"a","type":"string"},{"name":"b","type":"int","default":0},{"name":"c","type":"int","default":1}`)
	upload := func(schema map[string]any) int {
		t.Helper()
		code, _, err := adminDo(e, http.MethodPost, schemas+"/schema", schema)
		if err != nil {
			t.Fatal(err)
		}
		return code
	}
	strategy := func(s string) {
		t.Helper()
		if code, body, err := adminDo(e, http.MethodPut, ns+"/schemaCompatibilityStrategy", s); err != nil || code != http.StatusNoContent {
			t.Fatalf("set the strategy %s: %d %s %v", s, code, body, err)
		}
	}
	if code := upload(v0); code != http.StatusOK {
		t.Fatalf("first schema: %d", code)
	}
	strategy("ALWAYS_INCOMPATIBLE")
	if code := upload(v1); code != http.StatusConflict {
		t.Fatalf("a new version under the namespace's ALWAYS_INCOMPATIBLE: %d, want 409", code)
	}
	code, body, err := adminDo(e, http.MethodPost, schemas+"/compatibility", v1)
	var compat struct {
		Compatibility bool   `json:"compatibility"`
		Strategy      string `json:"schemaCompatibilityStrategy"`
	}
	if err != nil || code != http.StatusOK || json.Unmarshal(body, &compat) != nil || compat.Compatibility || compat.Strategy != "ALWAYS_INCOMPATIBLE" {
		t.Fatalf("compatibility under ALWAYS_INCOMPATIBLE: %d %s %v", code, body, err)
	}
	strategy("UNDEFINED") // the broker's FULL: a field with a default may be added
	if code := upload(v1); code != http.StatusOK {
		t.Fatalf("a compatible version under the broker's FULL: %d", code)
	}
	if got, err := adminGetJSON[string](e, ns+"/schemaCompatibilityStrategy"); err != nil || got != "UNDEFINED" {
		t.Fatalf("the strategy after UNDEFINED: %q %v", got, err)
	}
	if code, _, _ := adminDo(e, http.MethodPut, ns+"/schemaCompatibilityStrategy", "SIDEWAYS"); code != http.StatusBadRequest {
		t.Fatalf("an unknown strategy: %d, want 400", code)
	}
	strategy("ALWAYS_COMPATIBLE")
	if code := upload(v2); code != http.StatusOK {
		t.Fatalf("a version under ALWAYS_COMPATIBLE: %d", code)
	}

	cl := e.client()
	if code, body, err := adminDo(e, http.MethodPost, ns+"/schemaValidationEnforced", true); err != nil || code != http.StatusNoContent {
		t.Fatalf("enforce schema validation: %d %s %v", code, body, err)
	}
	if _, err := cl.CreateProducer(client.ProducerOptions{Topic: "typed"}); !errors.Is(err, client.ErrIncompatibleSchema) {
		t.Fatalf("a producer without a schema on a topic with one, validation enforced: %v, want ErrIncompatibleSchema", err)
	}
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "untyped"})
	if err != nil {
		t.Fatalf("a producer without a schema on a topic without one: %v", err)
	}
	p.Close()
	if code, body, err := adminDo(e, http.MethodPost, ns+"/schemaValidationEnforced", false); err != nil || code != http.StatusNoContent {
		t.Fatalf("stop enforcing schema validation: %d %s %v", code, body, err)
	}
	p, err = cl.CreateProducer(client.ProducerOptions{Topic: "typed"})
	if err != nil {
		t.Fatalf("a producer without a schema, validation not enforced: %v", err)
	}
	p.Close()
}
