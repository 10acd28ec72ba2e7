package rls_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/floodgate-rl/floodgate/internal/faultstore"
	"github.com/floodgate-rl/floodgate/memstore"
)

// post sends body to /json and returns the status, the headers and the
// decoded response (nil unless 200 or 429).
func (s *service) post(t *testing.T, body string) (int, http.Header, *rlsv3.RateLimitResponse, string) {
	t.Helper()
	res, err := http.Post(s.url+"/json", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK && res.StatusCode != http.StatusTooManyRequests {
		return res.StatusCode, res.Header, nil, string(raw)
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var resp rlsv3.RateLimitResponse
	if err := protojson.Unmarshal(raw, &resp); err != nil {
		t.Fatalf("the answer is not a RateLimitResponse: %v: %s", err, raw)
	}
	return res.StatusCode, res.Header, &resp, string(raw)
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(raw)
}

// TestJSON runs the cases of the gRPC tests through POST /json.
func TestJSON(t *testing.T) {
	svc := start(t, setup{yaml: featureConfig, store: freshRedis(t)})

	t.Run("200 then 429 with the headers", func(t *testing.T) {
		body := `{"domain":"feat","descriptors":[{"entries":[{"key":"plain","value":"j"}]}]}`
		for _, want := range []uint32{2, 1, 0} {
			code, h, resp, raw := svc.post(t, body)
			if code != 200 {
				t.Fatalf("status %d: %s", code, raw)
			}
			expect(t, resp, ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{want})
			if h.Get("RateLimit-Policy") == "" || h.Get("Retry-After") != "" {
				t.Errorf("headers %v", h)
			}
		}
		code, h, resp, raw := svc.post(t, body)
		if code != 429 {
			t.Fatalf("status %d, want 429: %s", code, raw)
		}
		expect(t, resp, over, []rlsv3.RateLimitResponse_Code{over}, []uint32{0})
		// protojson varies its spacing on purpose: look for the values.
		if !strings.Contains(raw, `"OVER_LIMIT"`) || !strings.Contains(raw, `"MINUTE"`) {
			t.Errorf("body %s", raw)
		}
		if !regexp.MustCompile(`^[1-9][0-9]?$`).MatchString(h.Get("Retry-After")) || !strings.Contains(h.Get("RateLimit"), ";r=0;t=") {
			t.Errorf("429 headers %v", h)
		}
	})

	t.Run("all-or-nothing", func(t *testing.T) {
		body := `{"domain":"feat","descriptors":[{"entries":[{"key":"plain","value":"k"}]},{"entries":[{"key":"nested","value":"other"},{"key":"user","value":"k"}]}]}`
		if code, _, _, raw := svc.post(t, body); code != 200 {
			t.Fatalf("status %d: %s", code, raw)
		}
		code, _, resp, _ := svc.post(t, body)
		if code != 429 {
			t.Fatalf("status %d, want 429", code)
		}
		expect(t, resp, over, []rlsv3.RateLimitResponse_Code{ok, over}, []uint32{2, 0})
	})

	t.Run("peek", func(t *testing.T) {
		body := `{"domain":"feat","descriptors":[{"entries":[{"key":"plain","value":"jp"}],"hitsAddend":"0"}]}`
		for range 4 {
			code, _, resp, raw := svc.post(t, body)
			if code != 200 {
				t.Fatalf("status %d: %s", code, raw)
			}
			expect(t, resp, ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{3})
		}
	})

	t.Run("unknown domain", func(t *testing.T) {
		code, _, resp, raw := svc.post(t, `{"domain":"nope","descriptors":[{"entries":[{"key":"a","value":"b"}]}]}`)
		if code != 200 {
			t.Fatalf("status %d: %s", code, raw)
		}
		expect(t, resp, ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{0})
	})

	t.Run("bad requests", func(t *testing.T) {
		for _, c := range []struct{ body, want string }{
			{`{"domain":"","descriptors":[{"entries":[{"key":"a","value":"b"}]}]}`, "domain is empty"},
			{`{"domain":"feat","descriptors":[{"entries":[]}]}`, "descriptor 0 has no entries"},
			{`{"domain":"feat","descriptors":[`, "not a RateLimitRequest"},
			{`{"domain":"feat","descriptor":[]}`, "not a RateLimitRequest"},
		} {
			code, _, _, raw := svc.post(t, c.body)
			if code != 400 || !strings.Contains(raw, c.want) {
				t.Errorf("%s: status %d %q, want 400 with %q", c.body, code, raw, c.want)
			}
		}
		code, _, _, _ := svc.post(t, `{"domain":"`+strings.Repeat("x", 1<<20)+`"}`)
		if code != http.StatusRequestEntityTooLarge {
			t.Errorf("a body over 1 MiB: status %d, want 413", code)
		}
		res, err := http.Get(svc.url + "/json")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("GET /json: %d, want 405", res.StatusCode)
		}
	})
}

// TestJSONOutage: /json answers a store failure by each descriptor's
// failure mode: 503 for error, 429 for closed, 200 for open.
func TestJSONOutage(t *testing.T) {
	fs := faultstore.New(memstore.New(memstore.Options{}))
	svc := start(t, setup{yaml: outageConfig, store: fs, timeout: 30 * time.Millisecond})
	fs.Set(faultstore.Hang)
	for _, c := range []struct {
		value string
		want  int
	}{{"err", 503}, {"closed", 429}, {"open", 200}, {"local", 200}} {
		began := time.Now()
		code, h, _, raw := svc.post(t, `{"domain":"out","descriptors":[{"entries":[{"key":"`+c.value+`","value":"x"}]}]}`)
		if code != c.want {
			t.Errorf("%s: status %d (%s), want %d", c.value, code, raw, c.want)
		}
		if code == 429 && h.Get("Retry-After") != "5" {
			t.Errorf("%s: Retry-After %q, want 5", c.value, h.Get("Retry-After"))
		}
		if took := time.Since(began); took > 500*time.Millisecond {
			t.Errorf("%s: %v, want within the 30ms budget and some", c.value, took)
		}
	}
	fs.Set(faultstore.Pass)
	if code, _, _, raw := svc.post(t, `{"domain":"out","descriptors":[{"entries":[{"key":"err","value":"x"}]}]}`); code != 200 {
		t.Errorf("after the outage: %d %s", code, raw)
	}
}

// TestOperations: health (gRPC and HTTP), no reflection, /rlconfig,
// /metrics, and Shutdown draining the health checks.
func TestOperations(t *testing.T) {
	svc := start(t, setup{yaml: featureConfig, store: memstore.New(memstore.Options{})})
	ctx := context.Background()
	hc := healthpb.NewHealthClient(svc.conn)
	// "ratelimit" is the name envoyproxy/ratelimit serves its health
	// under, which probes and Envoy's health checks of a switching
	// deployment ask for.
	healthNames := []string{"", "envoy.service.ratelimit.v3.RateLimitService", "ratelimit"}
	for _, name := range healthNames {
		res, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: name})
		if err != nil || res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health of %q: %v, %v", name, res, err)
		}
	}
	// Reflection, which lists the services to any caller, is the
	// caller's to add: it is off.
	stream, err := reflectionpb.NewServerReflectionClient(svc.conn).ServerReflectionInfo(ctx)
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("reflection: %v, want Unimplemented", err)
	}

	svc.call(t, req("feat", desc("plain=m")))
	// The configuration is on the debug handler only, never on the
	// public port.
	if code, _ := get(t, svc.url+"/rlconfig"); code != http.StatusNotFound {
		t.Errorf("/rlconfig on the public handler: %d, want 404", code)
	}
	debug := httptest.NewServer(svc.srv.DebugHandler())
	defer debug.Close()
	if code, body := get(t, debug.URL+"/rlconfig"); code != 200 || !strings.Contains(body, "# domains: feat") || !strings.Contains(body, "feat.plain: 3/minute fixed-window") {
		t.Errorf("/rlconfig: %d %s", code, body)
	}
	if code, body := get(t, svc.url+"/metrics"); code != 200 ||
		!strings.Contains(body, `floodgate_rls_total_hits_total{descriptor="",domain="feat",limit="feat.plain"} 1`) ||
		!strings.Contains(body, "floodgate_config_load_success_total 1") {
		t.Errorf("/metrics: %d %s", code, body)
	}
	if code, body := get(t, svc.url+"/healthcheck"); code != 200 || body != "OK\n" {
		t.Errorf("/healthcheck: %d %q", code, body)
	}
	svc.srv.Close()
	if code, _ := get(t, svc.url+"/healthcheck"); code != http.StatusServiceUnavailable {
		t.Errorf("/healthcheck after Shutdown: %d, want 503", code)
	}
	for _, name := range healthNames {
		res, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: name})
		if err != nil || res.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("health of %q after Shutdown: %v, %v", name, res, err)
		}
	}
	// Requests in flight and after still answer.
	svc.call(t, req("feat", desc("plain=m")))
}
