package rls_test

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-rl/floodgate/internal/rls"
	"github.com/floodgate-rl/floodgate/memstore"
)

// headersConfig has two limits of one request: per user (5 a minute) and
// per route (3 an hour).
const headersConfig = `domain: h
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: route
    rate_limit: {unit: hour, requests_per_unit: 3}
`

// upstream are envoyproxy/ratelimit's names under
// LIMIT_RESPONSE_HEADERS_ENABLED, as a test sets them.
var upstream = rls.Headers{Limit: "X-Lim", Remaining: "X-Left", Reset: "X-Reset"}

// headerList is a response's response_headers_to_add as "Key: value"
// lines, in order.
func headerList(resp *rlsv3.RateLimitResponse) []string {
	var hs []string
	for _, h := range resp.GetResponseHeadersToAdd() {
		hs = append(hs, h.GetKey()+": "+h.GetValue())
	}
	return hs
}

// untilWindowEnd is envoyproxy/ratelimit's reset of a fixed window of w
// at t: the window's length less the whole seconds into it.
func untilWindowEnd(t time.Time, w time.Duration) int64 {
	s := int64(w / time.Second)
	return s - t.Unix()%s
}

// TestHeadersAsAsked: no headers unless asked for; under upstream's
// setting, the three headers of the status it picks (the least remaining,
// else the last over its limit), with its limit, remaining and whole
// seconds to reset; draft-11's fields only when Draft is set.
func TestHeadersAsAsked(t *testing.T) {
	both := upstream
	both.Draft = true
	for _, c := range []struct {
		name    string
		headers rls.Headers
		// want lists the headers of each of 4 calls of user=u1 and
		// route=r1; "RESET-MIN" and "RESET-HOUR" stand for the fixed
		// window's reset in whole seconds, as upstream computes it.
		want [4][]string
	}{
		{"none", rls.Headers{}, [4][]string{}},
		{"upstream", upstream, [4][]string{
			{"X-Lim: 3", "X-Left: 2", "X-Reset: RESET-HOUR"}, // route leaves less
			{"X-Lim: 3", "X-Left: 1", "X-Reset: RESET-HOUR"},
			{"X-Lim: 3", "X-Left: 0", "X-Reset: RESET-HOUR"},
			{"X-Lim: 3", "X-Left: 0", "X-Reset: RESET-HOUR"}, // route over: it is picked though user leaves 2
		}},
		{"draft and upstream", both, [4][]string{
			{`RateLimit-Policy: "h.user";q=5;w=60, "h.route";q=3;w=3600`, `RateLimit: "h.user";r=4;t=RESET-MIN, "h.route";r=2;t=RESET-HOUR`, "X-Lim: 3", "X-Left: 2", "X-Reset: RESET-HOUR"},
			{`RateLimit-Policy: "h.user";q=5;w=60, "h.route";q=3;w=3600`, `RateLimit: "h.user";r=3;t=RESET-MIN, "h.route";r=1;t=RESET-HOUR`, "X-Lim: 3", "X-Left: 1", "X-Reset: RESET-HOUR"},
			{`RateLimit-Policy: "h.user";q=5;w=60, "h.route";q=3;w=3600`, `RateLimit: "h.user";r=2;t=RESET-MIN, "h.route";r=0;t=RESET-HOUR`, "X-Lim: 3", "X-Left: 0", "X-Reset: RESET-HOUR"},
			{`RateLimit-Policy: "h.user";q=5;w=60, "h.route";q=3;w=3600`, `RateLimit: "h.user";r=2;t=RESET-MIN, "h.route";r=0;t=RESET-HOUR`, "Retry-After: RESET-HOUR", "X-Lim: 3", "X-Left: 0", "X-Reset: RESET-HOUR"},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := c.headers
			svc := start(t, setup{yaml: headersConfig, store: memstore.New(memstore.Options{}), headers: &h})
			r := req("h", desc("user=u1"), desc("route=r1"))
			for i, want := range c.want {
				before := time.Now()
				resp := svc.call(t, r)
				after := time.Now()
				got := headerList(resp)
				// The call may straddle a second: either side's figures.
				if !sameHeaders(got, want, before) && !sameHeaders(got, want, after) {
					t.Errorf("call %d: headers %q, want %q (resets of %v or %v)", i+1, got, want, before, after)
				}
				for k, st := range resp.GetStatuses() {
					if d := st.GetDurationUntilReset(); d.GetNanos() != 0 || d.GetSeconds() < 1 {
						t.Errorf("call %d, status %d: duration_until_reset %v, want whole seconds, at least 1", i+1, k, d)
					}
				}
				if sec := resp.GetStatuses()[1].GetDurationUntilReset().GetSeconds(); sec != untilWindowEnd(before, time.Hour) && sec != untilWindowEnd(after, time.Hour) {
					t.Errorf("call %d: route's duration_until_reset %ds, want upstream's %d or %d", i+1, sec, untilWindowEnd(before, time.Hour), untilWindowEnd(after, time.Hour))
				}
			}
		})
	}
}

// sameHeaders reports whether got is want with the resets of t.
func sameHeaders(got, want []string, t time.Time) bool {
	if len(got) != len(want) {
		return false
	}
	minute, hour := strconv.FormatInt(untilWindowEnd(t, time.Minute), 10), strconv.FormatInt(untilWindowEnd(t, time.Hour), 10)
	for i := range want {
		w := strings.ReplaceAll(strings.ReplaceAll(want[i], "RESET-MIN", minute), "RESET-HOUR", hour)
		if got[i] != w {
			return false
		}
	}
	return true
}

// TestHeadersOverJSON: /json answers with the same headers as gRPC, and
// none unless asked for.
func TestHeadersOverJSON(t *testing.T) {
	for _, c := range []struct {
		name    string
		headers rls.Headers
		want    map[string]string
	}{
		{"none", rls.Headers{}, map[string]string{"X-Lim": "", "RateLimit": "", "RateLimit-Policy": ""}},
		{"upstream", upstream, map[string]string{"X-Lim": "3", "X-Left": "2", "RateLimit": ""}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := c.headers
			svc := start(t, setup{yaml: headersConfig, store: memstore.New(memstore.Options{}), headers: &h})
			res, err := http.Post(svc.url+"/json", "application/json", strings.NewReader(
				`{"domain":"h","descriptors":[{"entries":[{"key":"user","value":"u2"}]},{"entries":[{"key":"route","value":"r2"}]}]}`))
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Fatalf("/json: %s", res.Status)
			}
			for k, v := range c.want {
				if got := res.Header.Get(k); got != v {
					t.Errorf("%s: %q, want %q", k, got, v)
				}
			}
		})
	}
}

// TestHeadersValidated: the names of upstream's headers are all set or
// none, and each a header name.
func TestHeadersValidated(t *testing.T) {
	enf := memEnforcer(t)
	for _, c := range []struct {
		name    string
		headers rls.Headers
		want    string // in the error; empty: valid
	}{
		{"none", rls.Headers{}, ""},
		{"draft only", rls.Headers{Draft: true}, ""},
		{"all three", upstream, ""},
		{"one missing", rls.Headers{Limit: "A", Remaining: "B"}, "Headers.Reset is empty"},
		{"not a name", rls.Headers{Limit: "Rate Limit", Remaining: "B", Reset: "C"}, `Headers.Limit "Rate Limit" is not a header name`},
		{"empty name", rls.Headers{Limit: "A", Remaining: "B:", Reset: "C"}, `Headers.Remaining "B:"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, err := rls.New(rls.Options{Enforcer: enf, ConfigDir: configDir(t, map[string]string{"h.yaml": headersConfig}), Headers: c.headers})
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				srv.Close()
				return
			}
			if err == nil {
				srv.Close()
				t.Fatalf("New accepted %+v", c.headers)
			}
			if !errors.Is(err, rls.ErrInvalidOptions) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("New: %v, want ErrInvalidOptions saying %q", err, c.want)
			}
		})
	}
}

// TestUpstreamHeadersPickTheLastOver: of several descriptors over their
// limits, upstream's headers describe the last, as envoyproxy/ratelimit
// picks it (the first with the least remaining would be user's).
func TestUpstreamHeadersPickTheLastOver(t *testing.T) {
	h := upstream
	svc := start(t, setup{yaml: headersConfig, store: memstore.New(memstore.Options{}), headers: &h})
	for range 5 {
		svc.call(t, req("h", desc("user=u3")))
	}
	for range 3 {
		svc.call(t, req("h", desc("route=r3")))
	}
	resp := svc.call(t, req("h", desc("user=u3"), desc("route=r3")))
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("code %v, want OVER_LIMIT", resp.GetOverallCode())
	}
	got := headerList(resp)
	if len(got) != 3 || got[0] != "X-Lim: 3" || got[1] != "X-Left: 0" {
		t.Errorf("headers %q, want route's: X-Lim: 3, X-Left: 0 and its reset", got)
	}
}
