package broker_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// adminDo sends an admin request and returns the status and body.
func adminDo(e *env, method, path string, body any) (int, []byte, error) {
	return adminDoAt(e.b.HTTPAddr(), method, path, body)
}

// adminDoAt is adminDo against the admin address addr.
func adminDoAt(addr, method, path string, body any) (int, []byte, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://"+addr+path, r)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

func adminGetJSON[T any](e *env, path string) (T, error) {
	var v T
	code, body, err := adminDo(e, http.MethodGet, path, nil)
	if err != nil {
		return v, err
	}
	if code != http.StatusOK {
		return v, fmt.Errorf("GET %s: %d %s", path, code, body)
	}
	return v, json.Unmarshal(body, &v)
}
