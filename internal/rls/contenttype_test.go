package rls_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/floodgate-rl/floodgate/memstore"
)

// TestJSONContentType: POST /json takes application/json alone (with
// parameters), so that a web page cannot have a browser forge it as a
// text/plain, form or multipart body, which it sends without a CORS
// preflight. A refused body spends nothing: the key keeps its quota.
func TestJSONContentType(t *testing.T) {
	store := memstore.New(memstore.Options{})
	t.Cleanup(func() { store.Close() })
	svc := start(t, setup{yaml: featureConfig, store: store})
	body := `{"domain":"feat","hits_addend":2,"descriptors":[{"entries":[{"key":"plain","value":"victim"}]}]}`
	for _, ct := range []string{"", "text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded",
		"multipart/form-data; boundary=x", "application/jsonx", "application/json;;", "application/problem+json"} {
		req, err := http.NewRequest(http.MethodPost, svc.url+"/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusUnsupportedMediaType || !strings.Contains(string(raw), "Content-Type must be application/json") {
			t.Errorf("Content-Type %q: %d %q, want 415", ct, res.StatusCode, raw)
		}
	}
	// Parameters and case are the media type's own: accepted. The quota
	// (3 a minute) is whole: the refused bodies counted nothing.
	for i, ct := range []string{"application/json; charset=utf-8", "Application/JSON"} {
		req, err := http.NewRequest(http.MethodPost, svc.url+"/json", strings.NewReader(
			`{"domain":"feat","descriptors":[{"entries":[{"key":"plain","value":"victim"}]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", ct)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("Content-Type %q: %d %s, want 200", ct, res.StatusCode, raw)
		}
		var resp rlsv3.RateLimitResponse
		if err := protojson.Unmarshal(raw, &resp); err != nil {
			t.Fatalf("Content-Type %q: %v: %s", ct, err, raw)
		}
		expect(t, &resp, ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{uint32(2 - i)})
	}
}
