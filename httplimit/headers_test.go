package httplimit_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/breakerstore"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/internal/faultstore"
	"github.com/floodgate-rl/floodgate/memstore"
)

// member is one parsed member of a RateLimit or RateLimit-Policy list.
type member struct {
	name   string
	params map[string]int64
}

// parseList parses the structured field list of the named header with an
// RFC 9651 parser, failing t on anything that is not a list of strings
// with integer parameters.
func parseList(t *testing.T, h http.Header, name string) []member {
	t.Helper()
	l, err := httpsfv.UnmarshalList(h.Values(name))
	if err != nil {
		t.Fatalf("%s %q is not a structured field list: %v", name, h.Values(name), err)
	}
	var out []member
	for _, m := range l {
		it, ok := m.(httpsfv.Item)
		if !ok {
			t.Fatalf("%s: member %v is not an item", name, m)
		}
		s, ok := it.Value.(string)
		if !ok {
			t.Fatalf("%s: member value %#v is not a String", name, it.Value)
		}
		p := member{name: s, params: map[string]int64{}}
		for _, k := range it.Params.Names() {
			v, _ := it.Params.Get(k)
			n, ok := v.(int64)
			if !ok {
				t.Fatalf("%s: parameter %s=%#v is not an Integer", name, k, v)
			}
			p.params[k] = n
		}
		out = append(out, p)
	}
	return out
}

func wantList(t *testing.T, h http.Header, name string, want ...string) {
	t.Helper()
	var got []string
	for _, m := range parseList(t, h, name) {
		s := fmt.Sprintf("%s", m.name)
		for _, k := range slices.Sorted(maps.Keys(m.params)) {
			s += fmt.Sprintf(";%s=%d", k, m.params[k])
		}
		got = append(got, s)
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s = %q, parsed %q, want %q", name, h.Values(name), got, want)
	}
}

// problem decodes an application/problem+json body.
func problem(t *testing.T, rec *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	var p map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("body %q: %v", rec.Body, err)
	}
	return p
}

func TestAllowedResponseFields(t *testing.T) {
	e := newEnv(t, envOptions{})
	h := e.handler(t, httplimit.Route{Limits: []httplimit.Limit{
		{Rule: rule(t, "ip", 100, time.Minute), Key: httplimit.ClientIP(nil)},
		{Rule: rule(t, "acct", 10, time.Minute), Key: httplimit.Header("X-Account")},
	}})
	var rec *httptest.ResponseRecorder
	for range 3 {
		rec = do(h, "192.0.2.1:1234", "X-Account", "42")
	}
	if rec.Code != http.StatusOK || rec.Body.String() != "ok" {
		t.Fatalf("got %d %q, want 200 ok", rec.Code, rec.Body)
	}
	if got := rec.Header().Get("RateLimit-Policy"); got != `"ip";q=100;w=60, "acct";q=10;w=60` {
		t.Errorf("RateLimit-Policy = %s", got)
	}
	if got := rec.Header().Get("RateLimit"); got != `"ip";r=97;t=60, "acct";r=7;t=60` {
		t.Errorf("RateLimit = %s", got)
	}
	wantList(t, rec.Header(), "RateLimit-Policy", "ip;q=100;w=60", "acct;q=10;w=60")
	wantList(t, rec.Header(), "RateLimit", "ip;r=97;t=60", "acct;r=7;t=60")
	for name, want := range map[string]string{
		"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "7", "X-RateLimit-Reset": "60",
		"Retry-After": "", "Cache-Control": "",
	} {
		if got := rec.Header().Get(name); got != want {
			t.Errorf("%s = %q, want %q (the worst limit; Retry-After only on 429)", name, got, want)
		}
	}
}

func TestDeniedResponse(t *testing.T) {
	for _, tc := range []struct {
		elapsed    time.Duration // since the two admitted requests
		retryAfter string        // 10s - elapsed, rounded up, at least 1
		reset      int64
	}{
		{0, "10", 10},
		{8 * time.Second, "2", 2},
		{8800 * time.Millisecond, "2", 2}, // 1.2s
		{9700 * time.Millisecond, "1", 1}, // 0.3s
		{10*time.Second - time.Microsecond, "1", 1},
	} {
		t.Run(fmt.Sprint(tc.elapsed), func(t *testing.T) {
			e := newEnv(t, envOptions{})
			h := e.handler(t, httplimit.Route{Limits: []httplimit.Limit{{Rule: rule(t, "pix", 2, 10*time.Second), Key: httplimit.ClientIP(nil)}}})
			do(h, "192.0.2.1:1", "")
			do(h, "192.0.2.1:1", "")
			e.clock.Advance(tc.elapsed)
			rec := do(h, "192.0.2.1:1")
			if rec.Code != http.StatusTooManyRequests {
				t.Fatalf("status %d, want 429", rec.Code)
			}
			hd := rec.Header()
			if got := hd.Get("Retry-After"); got != tc.retryAfter {
				t.Errorf("Retry-After %q, want %q", got, tc.retryAfter)
			}
			if got := hd.Get("Cache-Control"); got != "no-store" {
				t.Errorf("Cache-Control %q, want no-store", got)
			}
			wantList(t, hd, "RateLimit-Policy", "pix;q=2;w=10")
			wantList(t, hd, "RateLimit", fmt.Sprintf("pix;r=0;t=%d", tc.reset))
			if hd.Get("X-RateLimit-Remaining") != "0" || hd.Get("X-RateLimit-Limit") != "2" || hd.Get("X-RateLimit-Reset") != fmt.Sprint(tc.reset) {
				t.Errorf("legacy fields %v", hd)
			}
			p := problem(t, rec)
			if p["type"] != httplimit.QuotaExceeded || p["status"] != 429.0 || p["title"] == "" ||
				!strings.Contains(fmt.Sprint(p["detail"]), "retry after "+tc.retryAfter+" s") ||
				fmt.Sprint(p["violated-policies"]) != "[pix]" {
				t.Errorf("problem %v", p)
			}
		})
	}
}

func TestMultiKeyDenialNamesOnlyTheViolatedPolicies(t *testing.T) {
	e := newEnv(t, envOptions{})
	h := e.handler(t, httplimit.Route{Limits: []httplimit.Limit{
		{Rule: rule(t, "ip", 100, time.Minute), Key: httplimit.ClientIP(nil)},
		{Rule: rule(t, "acct", 1, time.Minute), Key: httplimit.Header("X-Account")},
	}})
	do(h, "192.0.2.1:1", "X-Account", "42")
	rec := do(h, "192.0.2.1:1", "X-Account", "42")
	if rec.Code != 429 {
		t.Fatalf("status %d", rec.Code)
	}
	if got := problem(t, rec)["violated-policies"]; fmt.Sprint(got) != "[acct]" {
		t.Errorf("violated-policies %v, want [acct]", got)
	}
	// Nothing was recorded: ip still has the 99 requests the first one left.
	wantList(t, rec.Header(), "RateLimit", "ip;r=99;t=60", "acct;r=0;t=60")
	if got := rec.Header().Get("Retry-After"); got != "60" {
		t.Errorf("Retry-After %q, want the worst: 60", got)
	}
}

func TestLegacyHeadersCanBeTurnedOff(t *testing.T) {
	e := newEnv(t, envOptions{opts: httplimit.Options{NoLegacyHeaders: true}})
	h := e.handler(t, httplimit.Route{Limits: []httplimit.Limit{{Rule: rule(t, "r", 1, time.Minute), Key: httplimit.ClientIP(nil)}}})
	for _, rec := range []*httptest.ResponseRecorder{do(h, "192.0.2.1:1"), do(h, "192.0.2.1:1")} {
		for _, name := range rateLimitFields(rec.Header()) {
			if strings.HasPrefix(name, "X-") {
				t.Errorf("status %d has %s with NoLegacyHeaders", rec.Code, name)
			}
		}
		if rec.Header().Get("RateLimit") == "" {
			t.Errorf("status %d lost RateLimit", rec.Code)
		}
	}
}

func TestStatusAndBodyOverrides(t *testing.T) {
	e := newEnv(t, envOptions{})
	h := e.handler(t, httplimit.Route{
		Limits: []httplimit.Limit{{Rule: rule(t, "r", 1, time.Minute), Key: httplimit.ClientIP(nil)}},
		Status: http.StatusServiceUnavailable,
		Deny: func(w http.ResponseWriter, r *http.Request, answer http.Handler) {
			// The custom body keeps the status of the default answer,
			// which must be Status's.
			def := httptest.NewRecorder()
			answer.ServeHTTP(def, r)
			res, _ := httplimit.FromContext(r.Context())
			w.WriteHeader(def.Code)
			fmt.Fprintf(w, "slow down (%s)", res.Decision.Policy)
		},
	})
	do(h, "192.0.2.1:1")
	rec := do(h, "192.0.2.1:1")
	if rec.Code != 503 || rec.Body.String() != "slow down (r)" {
		t.Fatalf("got %d %q, want 503 (Status, in the default answer) from the custom Deny", rec.Code, rec.Body)
	}
	if got := rec.Header().Get("Retry-After"); got != "60" {
		t.Errorf("Retry-After on a 503: %q, want 60 (RFC 9110 §10.2.3: how long the service is unavailable to the client)", got)
	}
	if rec.Header().Get("Cache-Control") != "no-store" || rec.Header().Get("RateLimit") == "" {
		t.Errorf("the middleware's fields must be set before Deny runs: %v", rec.Header())
	}
}

// A custom Deny finds the verdict with FromContext, as a handler would,
// and the answer it is given writes the default denial byte for byte.
func TestDenySeesTheVerdictAndTheDefaultAnswer(t *testing.T) {
	type denial struct {
		code   int
		header http.Header
		body   string
	}
	var answers [2]denial
	for i, custom := range []bool{false, true} {
		e := newEnv(t, envOptions{})
		var got httplimit.Result
		var found bool
		calls := 0
		rt := httplimit.Route{Limits: []httplimit.Limit{
			{Rule: rule(t, "ip", 100, time.Minute), Key: httplimit.ClientIP(nil)},
			{Rule: rule(t, "pix", 2, time.Minute), Key: httplimit.Header("User")},
		}}
		if custom {
			rt.Deny = func(w http.ResponseWriter, r *http.Request, answer http.Handler) {
				calls++
				got, found = httplimit.FromContext(r.Context())
				answer.ServeHTTP(w, r)
			}
		}
		h := e.handler(t, rt)
		for range 2 {
			if rec := do(h, "192.0.2.1:1", "User", "u1"); rec.Code != http.StatusOK {
				t.Fatalf("allowed request: %d", rec.Code)
			}
		}
		e.clock.Advance(18 * time.Second)
		rec := do(h, "192.0.2.1:1", "User", "u1")
		answers[i] = denial{rec.Code, rec.Header(), rec.Body.String()}
		if !custom {
			continue
		}
		if calls != 1 || !found {
			t.Fatalf("Deny ran %d times and found a Result: %v; want once, with one", calls, found)
		}
		d := got.Decision
		if got.Outcome != enforce.Denied || d.Allowed || d.Policy != "pix" || d.Limit != 2 || d.Remaining != 0 || d.RetryAfter != 42*time.Second {
			t.Errorf("Deny found %v %+v; want denied by pix, limit 2, 0 remaining, retry after 42s", got.Outcome, d)
		}
		if len(d.Each) != 2 || d.Each[0].Policy != "ip" || !d.Each[0].Allowed || d.Each[0].Remaining != 98 || d.Each[1].Policy != "pix" || d.Each[1].Allowed {
			t.Errorf("Deny found the decisions %+v; want ip allowed with 98 remaining, pix denied", d.Each)
		}
	}
	const body = `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"Quota exceeded: 2 requests per 60 s (pix); retry after 42 s.","violated-policies":["pix"]}`
	for i, a := range answers {
		if a.code != http.StatusTooManyRequests || a.body != body || a.header.Get("Retry-After") != "42" ||
			a.header.Get("Content-Type") != "application/problem+json" || a.header.Get("Content-Length") != strconv.Itoa(len(body)) {
			t.Errorf("answer %d (custom Deny: %v): %d %v %s\nwant 429, Retry-After 42 and %s", i, i == 1, a.code, a.header, a.body, body)
		}
	}
	if !maps.EqualFunc(answers[0].header, answers[1].header, slices.Equal) {
		t.Errorf("headers differ: default %v, through Deny %v", answers[0].header, answers[1].header)
	}
}

// An opaque login route must answer byte for byte the same whichever of
// its keys blocked, however long that key has left, and even when its
// store is down.
func TestOpaqueDenialsAreByteIdentical(t *testing.T) {
	route := func(t *testing.T) httplimit.Route {
		return httplimit.Route{
			Name:    "login",
			Opaque:  true,
			Failure: enforce.FailClosed,
			Limits: []httplimit.Limit{
				{Rule: rule(t, "login-ip", 10, 10*time.Minute), Key: httplimit.ClientIP(nil)},
				{Rule: rule(t, "login-account", 5, 10*time.Minute), Key: httplimit.Header("X-Account")},
			},
		}
	}
	type answer struct {
		code   int
		header http.Header
		body   []byte
	}
	capture := func(rec *httptest.ResponseRecorder) answer {
		return answer{rec.Code, rec.Header().Clone(), rec.Body.Bytes()}
	}
	scenarios := map[string]func(t *testing.T) answer{
		"one IP, many accounts (IP blocks)": func(t *testing.T) answer {
			e := newEnv(t, envOptions{})
			h := e.handler(t, route(t))
			for i := range 10 {
				if rec := do(h, "203.0.113.9:1", "X-Account", fmt.Sprint(i)); rec.Code != 200 {
					t.Fatalf("attempt %d: %d", i, rec.Code)
				} else if f := rateLimitFields(rec.Header()); len(f) != 0 {
					t.Fatalf("an opaque route sent %v on success; it must send no per-key fields", f)
				}
				e.clock.Advance(7 * time.Second)
			}
			return capture(do(h, "203.0.113.9:1", "X-Account", "new"))
		},
		"botnet on one account (account blocks)": func(t *testing.T) answer {
			e := newEnv(t, envOptions{})
			h := e.handler(t, route(t))
			for i := range 5 {
				do(h, fmt.Sprintf("192.0.2.%d:1", i+1), "X-Account", "12345678909")
				e.clock.Advance(time.Minute)
			}
			return capture(do(h, "198.51.100.7:1", "X-Account", "12345678909"))
		},
		"both block": func(t *testing.T) answer {
			e := newEnv(t, envOptions{})
			h := e.handler(t, route(t))
			for range 12 {
				do(h, "203.0.113.9:1", "X-Account", "12345678909")
			}
			return capture(do(h, "203.0.113.9:1", "X-Account", "12345678909"))
		},
		"store down, fail-closed": func(t *testing.T) answer {
			e := newEnv(t, envOptions{})
			h := e.handler(t, route(t))
			e.fault.Set(faultstore.Fail)
			return capture(do(h, "203.0.113.9:1", "X-Account", "12345678909"))
		},
	}
	var first answer
	var firstName string
	for _, name := range slices.Sorted(maps.Keys(scenarios)) {
		got := scenarios[name](t)
		if got.code != 429 {
			t.Fatalf("%s: status %d, want 429", name, got.code)
		}
		if firstName == "" {
			first, firstName = got, name
			continue
		}
		if got.code != first.code || !maps.EqualFunc(got.header, first.header, slices.Equal) || !bytes.Equal(got.body, first.body) {
			t.Errorf("opaque answers differ:\n%s: %d %v %s\n%s: %d %v %s", firstName, first.code, first.header, first.body, name, got.code, got.header, got.body)
		}
	}
	t.Logf("the opaque answer: %d %v %s", first.code, first.header, first.body)
	if first.header.Get("Retry-After") != "600" {
		t.Errorf("Retry-After %q, want the longest window, 600", first.header.Get("Retry-After"))
	}
	if f := rateLimitFields(first.header); len(f) != 0 {
		t.Errorf("opaque denial has %v", f)
	}
	var p struct {
		Type             string
		ViolatedPolicies []string `json:"violated-policies"`
	}
	if err := json.Unmarshal(first.body, &p); err != nil || p.Type != httplimit.QuotaExceeded || !slices.Equal(p.ViolatedPolicies, []string{"login"}) {
		t.Errorf("problem %+v (%v)", p, err)
	}
}

func TestFailClosedAnswer(t *testing.T) {
	for _, tc := range []struct {
		status     int
		retryAfter string
	}{{0, "5"}, {503, "5"}, {500, ""}} { // 5: MinFailRetryAfter, not an invitation to retry every second; 503 carries it too (RFC 9110 §10.2.3)
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			e := newEnv(t, envOptions{})
			h := e.handler(t, httplimit.Route{Failure: enforce.FailClosed, FailStatus: tc.status,
				Limits: []httplimit.Limit{{Rule: rule(t, "r", 1, time.Minute), Key: httplimit.ClientIP(nil)}}})
			e.fault.Set(faultstore.Fail)
			rec := do(h, "192.0.2.1:1")
			want := tc.status
			if want == 0 {
				want = 429
			}
			if rec.Code != want || rec.Header().Get("Retry-After") != tc.retryAfter || rec.Header().Get("Cache-Control") != "no-store" {
				t.Fatalf("got %d %v, want %d with Retry-After %q", rec.Code, rec.Header(), want, tc.retryAfter)
			}
			if rec.Header().Get("RateLimit") != "" {
				t.Errorf("RateLimit sent though no limiter decided")
			}
			if p := problem(t, rec); p["type"] != "about:blank" || p["status"] != float64(want) {
				t.Errorf("problem %v", p)
			}
		})
	}
}

// While the store's circuit breaker is open, a fail-closed 429 tells the
// client to come back when the breaker probes again (its remaining open
// time), never sooner than MinFailRetryAfter.
func TestFailClosedRetryAfterFollowsTheBreaker(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cooldown time.Duration
		min, max int // Retry-After bounds, in seconds
	}{
		{"long cooldown", 30 * time.Second, 29, 30},
		{"short cooldown", time.Second, 5, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms := memstore.New(memstore.Options{})
			defer ms.Close()
			fault := faultstore.New(ms)
			bs, err := breakerstore.New(fault, breakerstore.Options{Failures: 1, Cooldown: tc.cooldown})
			if err != nil {
				t.Fatal(err)
			}
			e := newEnv(t, envOptions{store: bs, bare: true})
			h := e.handler(t, httplimit.Route{Failure: enforce.FailClosed,
				Limits: []httplimit.Limit{{Rule: rule(t, "r", 1, time.Minute), Key: httplimit.ClientIP(nil)}}})
			fault.Set(faultstore.Fail)
			do(h, "192.0.2.1:1") // opens the breaker
			if bs.State() != breakerstore.Open {
				t.Fatalf("breaker %v, want open", bs.State())
			}
			rec := do(h, "192.0.2.1:1")
			got, err := strconv.Atoi(rec.Header().Get("Retry-After"))
			if rec.Code != 429 || err != nil || got < tc.min || got > tc.max {
				t.Fatalf("breaker open for %v: %d with Retry-After %q, want 429 with %d to %d", tc.cooldown, rec.Code, rec.Header().Get("Retry-After"), tc.min, tc.max)
			}
			if p := problem(t, rec); !strings.Contains(fmt.Sprint(p["detail"]), fmt.Sprintf("Try again in %d s", got)) {
				t.Errorf("detail %q does not say when to come back", p["detail"])
			}
		})
	}
}

func TestMissingKey(t *testing.T) {
	e := newEnv(t, envOptions{})
	var got httplimit.Result
	capture := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got, _ = httplimit.FromContext(r.Context()) })
	mw, err := e.hl.Middleware(httplimit.Route{Name: "mixed", Limits: []httplimit.Limit{
		{Rule: rule(t, "ip", 3, time.Minute), Key: httplimit.ClientIP(nil), Missing: httplimit.Share},
		{Rule: rule(t, "user", 1, time.Minute), Key: httplimit.Principal},
	}})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(capture)
	withUser := func(remote, user string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = remote
		if user != "" {
			req = req.WithContext(httplimit.WithPrincipal(req.Context(), user))
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	// Anonymous: the user limit skips, the IP limit counts.
	for i := range 3 {
		if rec := withUser("192.0.2.1:1", ""); rec.Code != 200 {
			t.Fatalf("anonymous request %d: %d", i, rec.Code)
		}
		if len(got.Decision.Each) != 0 || got.Decision.Policy != "ip" {
			t.Fatalf("anonymous request checked %+v, want the ip limit only", got.Decision)
		}
	}
	if rec := withUser("192.0.2.1:1", ""); rec.Code != 429 {
		t.Fatalf("4th anonymous request from one IP: %d, want 429", rec.Code)
	}
	// No address (a Unix socket peer): every such request shares one ip key.
	for i := range 3 {
		if rec := withUser("@", "u"+fmt.Sprint(i)); rec.Code != 200 {
			t.Fatalf("keyless request %d: %d", i, rec.Code)
		}
	}
	if rec := withUser("", "u9"); rec.Code != 429 {
		t.Fatalf("4th request without an address: %d, want 429: Share counts them under one key", rec.Code)
	}

	// A route whose only limit skips passes the request unlimited.
	only, err := e.hl.Middleware(httplimit.Route{Limits: []httplimit.Limit{{Rule: rule(t, "user", 1, time.Minute), Key: httplimit.Principal}}})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		rec := httptest.NewRecorder()
		only(capture).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if rec.Code != 200 || got.Outcome != enforce.Skipped || rec.Header().Get("RateLimit") != "" {
			t.Fatalf("got %d %v outcome %v, want 200 Skipped without fields", rec.Code, rec.Header(), got.Outcome)
		}
	}
	if n := metric(t, e.reg, "floodgate_decisions_total", map[string]string{"gate": "user", "outcome": "skipped"}); n != 3 {
		t.Errorf("skipped decisions counted %v, want 3", n)
	}
}

func TestRefundFromTheHandler(t *testing.T) {
	e := newEnv(t, envOptions{})
	ipRule, acctRule := rule(t, "ip", 100, time.Minute), rule(t, "acct", 1, time.Minute)
	login := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, ok := httplimit.FromContext(r.Context())
		if !ok || res.Outcome != enforce.Allowed {
			t.Errorf("FromContext = %+v, %v", res, ok)
		}
		if r.Header.Get("X-Password") == "right" {
			if err := res.Refund(r.Context(), "acct"); err != nil {
				t.Error(err)
			}
		}
	})
	mw, _ := e.hl.Middleware(httplimit.Route{Limits: []httplimit.Limit{
		{Rule: ipRule, Key: httplimit.ClientIP(nil)}, {Rule: acctRule, Key: httplimit.Header("X-Account")},
	}})
	h := mw(login)
	for i := range 5 {
		if rec := do(h, "192.0.2.1:1", "X-Account", "a", "X-Password", "right"); rec.Code != 200 {
			t.Fatalf("successful login %d: %d; its account hit must have been refunded", i, rec.Code)
		}
	}
	wantList(t, do(h, "192.0.2.1:1", "X-Account", "a").Header(), "RateLimit", "ip;r=94;t=60", "acct;r=0;t=60")
	if rec := do(h, "192.0.2.1:1", "X-Account", "a"); rec.Code != 429 {
		t.Fatalf("after a failed login: %d, want 429", rec.Code)
	}
}

func TestInvalidRoutes(t *testing.T) {
	e := newEnv(t, envOptions{})
	r := rule(t, "r", 1, time.Minute)
	for name, rt := range map[string]httplimit.Route{
		"no limits":        {},
		"nil key":          {Limits: []httplimit.Limit{{Rule: r}}},
		"invalid rule":     {Limits: []httplimit.Limit{{Key: httplimit.Principal}}},
		"duplicate rule":   {Limits: []httplimit.Limit{{Rule: r, Key: httplimit.Principal}, {Rule: r, Key: httplimit.Header("a")}}},
		"bad name":         {Name: "a b", Limits: []httplimit.Limit{{Rule: r, Key: httplimit.Principal}}},
		"opaque throttles": {Opaque: true, MaxDelay: time.Second, Limits: []httplimit.Limit{{Rule: r, Key: httplimit.Principal}}},
		"status 200":       {Status: 200, Limits: []httplimit.Limit{{Rule: r, Key: httplimit.Principal}}},
		"bad failure mode": {Failure: 9, Limits: []httplimit.Limit{{Rule: r, Key: httplimit.Principal}}},
		"negative waiters": {MaxWaiters: -1, Limits: []httplimit.Limit{{Rule: r, Key: httplimit.Principal}}},
	} {
		if _, err := e.hl.Middleware(rt); !errors.Is(err, httplimit.ErrInvalidOptions) {
			t.Errorf("%s: err = %v, want ErrInvalidOptions", name, err)
		}
	}
	if _, err := httplimit.New(httplimit.Options{}); !errors.Is(err, httplimit.ErrInvalidOptions) {
		t.Errorf("New without an Enforcer: %v", err)
	}
	if _, err := enforce.ParseFailureMode("sideways"); !errors.Is(err, httplimit.ErrInvalidOptions) {
		t.Errorf("ParseFailureMode: %v", err)
	}
}

// rateLimitFields returns the names of h's RateLimit and X-RateLimit fields.
func rateLimitFields(h http.Header) []string {
	var names []string
	for name := range h {
		if n := strings.ToLower(name); strings.HasPrefix(n, "ratelimit") || strings.HasPrefix(n, "x-ratelimit") {
			names = append(names, name)
		}
	}
	return names
}

// A token bucket's r is the tokens in its bucket, up to Burst: above q,
// the refill per window, while the burst lasts, as the package doc says;
// t is the time until the bucket is full again.
func TestTokenBucketFieldsCountTheBurst(t *testing.T) {
	e := newEnv(t, envOptions{})
	tb := floodgate.Rule{Name: "tb", Limit: 2, Window: time.Second, Algorithm: floodgate.TokenBucket, Burst: 4}
	h := e.handler(t, httplimit.Route{Name: "api", Limits: []httplimit.Limit{{Rule: tb, Key: httplimit.ClientIP(nil)}}})
	for i, want := range []struct {
		code      int
		r, legacy string
	}{
		{200, "tb;r=3;t=1", "3"}, // 3 tokens left; 0.5 s to refill the one taken, rounded up
		{200, "tb;r=2;t=1", "2"},
		{200, "tb;r=1;t=2", "1"}, // 1.5 s to refill three
		{200, "tb;r=0;t=2", "0"},
		{429, "tb;r=0;t=2", "0"},
	} {
		rec := do(h, "192.0.2.1:1")
		if rec.Code != want.code {
			t.Fatalf("request %d: %d, want %d", i+1, rec.Code, want.code)
		}
		wantList(t, rec.Header(), "RateLimit-Policy", "tb;q=2;w=1")
		wantList(t, rec.Header(), "RateLimit", want.r)
		if got := rec.Header().Get("X-RateLimit-Remaining"); got != want.legacy || rec.Header().Get("X-RateLimit-Limit") != "2" {
			t.Errorf("request %d: X-RateLimit-Limit %q, X-RateLimit-Remaining %q; want 2 and %s", i+1, rec.Header().Get("X-RateLimit-Limit"), got, want.legacy)
		}
	}
}
