package main

import (
	"context"
	"crypto/tls"
	"io"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/floodgate-rl/floodgate/internal/testcerts"
)

// jsonClient is an HTTPS client of the JSON listener: it trusts ca and
// presents cert (none when nil); h2 asks for HTTP/2.
func jsonClient(ca *testcerts.CA, cert *tls.Certificate, h2 bool) *http.Client {
	cfg := &tls.Config{RootCAs: ca.Pool(), ServerName: "envoy-ratelimit"}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: h2}}
}

// postAs posts body with Content-Type ct (none when empty) and returns
// the status, the body and the HTTP major version.
func postAs(c *http.Client, url, ct, body string) (int, string, int, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, "", 0, err
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	res, err := c.Do(req)
	if err != nil {
		return 0, "", 0, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, string(b), res.ProtoMajor, err
}

// loginBody asks for hits logins of address addr (examples/rls/config:
// 5 in 10 minutes).
func loginBody(addr string, hits int) string {
	return `{"domain":"edge","hits_addend":` + string(rune('0'+hits)) +
		`,"descriptors":[{"entries":[{"key":"path","value":"/login"},{"key":"remote_address","value":"` + addr + `"}]}]}`
}

// loginsLeft returns what a gRPC login of addr leaves, over c.
func loginsLeft(t *testing.T, c rlsv3.RateLimitServiceClient, addr string) uint32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{{
		Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "path", Value: "/login"}, {Key: "remote_address", Value: addr}},
	}}})
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || len(resp.GetStatuses()) != 1 {
		t.Fatalf("gRPC login of %s: %v, %v; want OK with one status", addr, resp, err)
	}
	return resp.GetStatuses()[0].GetLimitRemaining()
}

// TestServeJSONUnderClientCertificates: where gRPC requires client
// certificates, POST /json is no way around them. Unset, JSON_ADDR
// leaves /json off: the plain HTTP listener answers 404 to it and an
// attacker's hits_addend 3 spends nothing of a victim's logins, while
// /healthcheck still answers there, in plain HTTP, for probes without a
// certificate. With JSON_ADDR, /json is served there over TLS with
// gRPC's certificate, and only to a client certificate of the CA (over
// HTTP/1.1 and HTTP/2), with application/json bodies only.
func TestServeJSONUnderClientCertificates(t *testing.T) {
	ca := testcerts.NewCA(t, "client CA")
	dir := t.TempDir()
	cert, key, caFile := ca.Files(t, dir, "envoy-ratelimit", "envoy-ratelimit")
	vars := func(extra map[string]string) map[string]string {
		m := map[string]string{"CONFIG_DIR": "../../examples/rls/config", "GRPC_SERVER_USE_TLS": "true",
			"GRPC_SERVER_TLS_CERT": cert, "GRPC_SERVER_TLS_KEY": key, "GRPC_CLIENT_TLS_CACERT": caFile}
		maps.Copy(m, extra)
		return m
	}
	envoyCert := ca.Pair(t, "envoy", "envoy")

	t.Run("JSON_ADDR unset", func(t *testing.T) {
		r := startServe(t, vars(nil))
		if code, body := postJSON(t, "http://"+r.http+"/json", loginBody("192.0.2.7", 3)); code != 404 || !strings.Contains(body, "JSON_ADDR") {
			t.Errorf("unauthenticated /json on HTTP_ADDR: %d %q, want 404 naming JSON_ADDR", code, body)
		}
		if code, body := get(t, "http://"+r.http+"/healthcheck"); code != 200 || body != "OK\n" {
			t.Errorf("/healthcheck on HTTP_ADDR: %d %q, want 200 OK", code, body)
		}
		if !strings.Contains(r.logs.String(), "POST /json is not served") || !strings.Contains(r.logs.String(), "gRPC requires client certificates") {
			t.Errorf("no log line says /json is off and why:\n%s", r.logs.String())
		}
		// The refused hits_addend 3 took nothing: this login leaves 4 of 5.
		if left := loginsLeft(t, envoyClient(t, r, ca, true), "192.0.2.7"); left != 4 {
			t.Errorf("after the refused /json, a login leaves %d, want 4", left)
		}
	})

	t.Run("JSON_ADDR set", func(t *testing.T) {
		r := startServe(t, vars(map[string]string{"JSON_ADDR": "127.0.0.1:0"}))
		if r.json == "" {
			t.Fatal("no JSON_ADDR listener")
		}
		url := "https://" + r.json + "/json"
		other := testcerts.NewCA(t, "another CA").Pair(t, "envoy", "envoy")
		for name, c := range map[string]*http.Client{
			"no client certificate":              jsonClient(ca, nil, false),
			"a certificate of another CA":        jsonClient(ca, &other, false),
			"no client certificate, over HTTP/2": jsonClient(ca, nil, true),
		} {
			if code, body, _, err := postAs(c, url, "application/json", loginBody("192.0.2.8", 3)); err == nil {
				t.Errorf("%s: %d %q, want a refused handshake", name, code, body)
			}
		}
		if code, body, _, err := postAs(http.DefaultClient, "http://"+r.json+"/json", "application/json", loginBody("192.0.2.8", 3)); err != nil || code != 400 {
			t.Errorf("plain HTTP to JSON_ADDR: %d %q %v, want 400 (an HTTP request to an HTTPS server)", code, body, err)
		}
		if code, body := postJSON(t, "http://"+r.http+"/json", loginBody("192.0.2.8", 3)); code != 404 {
			t.Errorf("/json on HTTP_ADDR beside JSON_ADDR: %d %q, want 404", code, body)
		}
		// A browser's forms: 415, nothing spent.
		c := jsonClient(ca, &envoyCert, false)
		for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=b"} {
			if code, body, _, err := postAs(c, url, ct, loginBody("192.0.2.8", 3)); err != nil || code != 415 {
				t.Errorf("Content-Type %q with a client certificate: %d %q %v, want 415", ct, code, body, err)
			}
		}
		// A client certificate of the CA, HTTP/1.1 then HTTP/2: decided.
		for i, h2 := range []bool{false, true} {
			code, body, proto, err := postAs(jsonClient(ca, &envoyCert, h2), url, "application/json; charset=utf-8", loginBody("192.0.2.8", 1))
			if err != nil || code != 200 {
				t.Fatalf("/json with a client certificate (HTTP/2 %v): %d %q %v, want 200", h2, code, body, err)
			}
			if want := map[bool]int{false: 1, true: 2}[h2]; proto != want {
				t.Errorf("HTTP/%d, want HTTP/%d", proto, want)
			}
			var resp rlsv3.RateLimitResponse
			if err := protojson.Unmarshal([]byte(body), &resp); err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK ||
				len(resp.GetStatuses()) != 1 || resp.GetStatuses()[0].GetLimitRemaining() != uint32(4-i) {
				t.Errorf("/json login %d: %s (%v), want OK leaving %d", i+1, body, err, 4-i)
			}
		}
		if left := loginsLeft(t, envoyClient(t, r, ca, true), "192.0.2.8"); left != 2 {
			t.Errorf("after two logins over /json, a gRPC login leaves %d, want 2", left)
		}
		if code, body := get(t, "http://"+r.http+"/healthcheck"); code != 200 || body != "OK\n" {
			t.Errorf("/healthcheck on HTTP_ADDR: %d %q, want 200 OK", code, body)
		}
		res, err := c.Get("https://" + r.json + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 404 {
			t.Errorf("/metrics on JSON_ADDR: %d, want 404 (/json and /healthcheck only)", res.StatusCode)
		}
	})

	t.Run("JSON_ADDR=off without TLS", func(t *testing.T) {
		r := startServe(t, map[string]string{"CONFIG_DIR": "../../examples/rls/config", "JSON_ADDR": "off"})
		if code, body := postJSON(t, "http://"+r.http+"/json", loginBody("192.0.2.9", 1)); code != 404 {
			t.Errorf("/json with JSON_ADDR=off: %d %q, want 404", code, body)
		}
		if code, _ := get(t, "http://"+r.http+"/healthcheck"); code != 200 {
			t.Errorf("/healthcheck: %d, want 200", code)
		}
	})
}
