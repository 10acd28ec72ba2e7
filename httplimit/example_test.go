package httplimit_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clientip"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/memstore"
)

// send serves one request from remote through h and returns the recorder.
func send(h http.Handler, method, target, remote string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, nil)
	req.RemoteAddr = remote
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// Two statement requests a minute per client IP, on a Go 1.22 ServeMux
// route. The third gets a 429 with Retry-After and a problem+json body.
func Example() {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	limiter, _ := floodgate.New(store, floodgate.Options{})
	e, err := enforce.New(enforce.Options{Limiter: limiter})
	if err != nil {
		panic(err)
	}
	defer e.Close()
	hl, err := httplimit.New(httplimit.Options{Enforcer: e})
	if err != nil {
		panic(err)
	}
	resolver, _ := clientip.New(clientip.Options{TrustedProxies: []string{"192.0.2.0/24"}})
	rule, _ := floodgate.NewRule("statement", 2, time.Minute, floodgate.SlidingWindow)
	limit, err := hl.Middleware(httplimit.Route{
		Limits:  []httplimit.Limit{{Rule: rule, Key: httplimit.ClientIP(resolver)}},
		Failure: enforce.FailOpen,
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /statement", limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "your statement")
	})))

	for range 3 {
		rec := send(mux, "GET", "/statement", "203.0.113.9:4711")
		h := rec.Header()
		fmt.Println(rec.Code, h.Get("RateLimit-Policy"), "|", h.Get("RateLimit"))
		if rec.Code == http.StatusTooManyRequests {
			fmt.Println("Retry-After:", h.Get("Retry-After"), h.Get("Content-Type"), rec.Body)
		}
	}
	// Output:
	// 200 "statement";q=2;w=60 | "statement";r=1;t=60
	// 200 "statement";q=2;w=60 | "statement";r=0;t=60
	// 429 "statement";q=2;w=60 | "statement";r=0;t=60
	// Retry-After: 60 application/problem+json {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"Quota exceeded: 2 requests per 60 s (statement); retry after 60 s.","violated-policies":["statement"]}
}

// Multi-level limits: a generous global rule per client IP and a strict
// rule per authenticated account, checked together. An office behind one
// IP is limited per account; the worst limit is reported in the legacy
// fields.
func ExampleRoutes_Middleware_multiLevel() {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	limiter, _ := floodgate.New(store, floodgate.Options{})
	e, _ := enforce.New(enforce.Options{Limiter: limiter})
	defer e.Close()
	hl, _ := httplimit.New(httplimit.Options{Enforcer: e})
	perIP, _ := floodgate.NewRule("global-ip", 100, time.Minute, floodgate.SlidingWindow)
	pix, _ := floodgate.NewRule("pix", 10, time.Minute, floodgate.SlidingWindow)
	limit, _ := hl.Middleware(httplimit.Route{
		Limits: []httplimit.Limit{
			{Rule: perIP, Key: httplimit.ClientIP(nil)},
			{Rule: pix, Key: httplimit.Principal},
		},
		Failure: enforce.FailClosed,
	})
	// auth stands for the service's authentication middleware.
	auth := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := httplimit.WithPrincipal(r.Context(), r.Header.Get("X-Demo-Account"))
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
	h := auth(limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	for _, account := range []string{"alice", "alice", "bob"} {
		rec := send(h, "POST", "/pix", "203.0.113.9:1", "X-Demo-Account", account)
		fmt.Println(account, rec.Code, rec.Header().Get("RateLimit"), "| remaining", rec.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// alice 200 "global-ip";r=99;t=60, "pix";r=9;t=60 | remaining 9
	// alice 200 "global-ip";r=98;t=60, "pix";r=8;t=60 | remaining 8
	// bob 200 "global-ip";r=97;t=60, "pix";r=9;t=60 | remaining 9
}

// An opaque login route limited per IP and per account answers the same
// bytes whichever key blocked, so a 429 tells an attacker nothing about the
// account.
func ExampleRoute_opaque() {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	limiter, _ := floodgate.New(store, floodgate.Options{})
	e, _ := enforce.New(enforce.Options{Limiter: limiter})
	defer e.Close()
	hl, _ := httplimit.New(httplimit.Options{Enforcer: e})
	byIP, _ := floodgate.NewRule("login-ip", 10, 10*time.Minute, floodgate.SlidingWindow)
	byAccount, _ := floodgate.NewRule("login-account", 5, 10*time.Minute, floodgate.SlidingWindow)
	limit, _ := hl.Middleware(httplimit.Route{
		Name:    "login",
		Opaque:  true,
		Failure: enforce.FailClosed,
		Limits: []httplimit.Limit{
			{Rule: byIP, Key: httplimit.ClientIP(nil)},
			{Rule: byAccount, Key: httplimit.Header("X-Demo-Account")},
		},
	})
	h := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	var ipBlocked, accountBlocked *httptest.ResponseRecorder
	for i := range 11 { // one IP, many accounts
		ipBlocked = send(h, "POST", "/login", "203.0.113.9:1", "X-Demo-Account", fmt.Sprint("acct-", i))
	}
	for i := range 6 { // a botnet on one account
		accountBlocked = send(h, "POST", "/login", fmt.Sprintf("198.51.100.%d:1", i), "X-Demo-Account", "12345678909")
	}
	same := ipBlocked.Code == accountBlocked.Code && ipBlocked.Body.String() == accountBlocked.Body.String() &&
		fmt.Sprint(ipBlocked.Header()) == fmt.Sprint(accountBlocked.Header())
	fmt.Println(ipBlocked.Code, accountBlocked.Code, "identical:", same)
	fmt.Println("Retry-After:", accountBlocked.Header().Get("Retry-After"))
	fmt.Println(accountBlocked.Body)
	// Output:
	// 429 429 identical: true
	// Retry-After: 600
	// {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"Too many requests. Try again later.","violated-policies":["login"]}
}

// When the store is down (here: closed), each route answers by its failure
// mode: fail-closed denies, fail-open allows, local decides with
// per-replica limits.
func ExampleRoute_failure() {
	store := memstore.New(memstore.Options{})
	store.Close() // a dead store
	limiter, _ := floodgate.New(store, floodgate.Options{Timeout: 30 * time.Millisecond})
	e, _ := enforce.New(enforce.Options{Limiter: limiter})
	defer e.Close()
	hl, _ := httplimit.New(httplimit.Options{Enforcer: e})
	for _, mode := range []enforce.FailureMode{enforce.FailClosed, enforce.FailOpen, enforce.FailLocal} {
		rule, _ := floodgate.NewRule("r-"+mode.String(), 1, time.Minute, floodgate.SlidingWindow)
		limit, _ := hl.Middleware(httplimit.Route{Failure: mode, Limits: []httplimit.Limit{{Rule: rule, Key: httplimit.ClientIP(nil)}}})
		h := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			res, _ := httplimit.FromContext(r.Context())
			fmt.Print("(", res.Outcome, ") ")
		}))
		var codes []string
		for range 2 {
			codes = append(codes, fmt.Sprint(send(h, "GET", "/", "203.0.113.9:1").Code))
		}
		fmt.Println(mode, strings.Join(codes, " "))
	}
	// Output:
	// closed 429 429
	// (failed_open) (failed_open) open 200 200
	// (local) local 200 429
}

// A throttled route waits for quota instead of refusing at once, when the
// wait is short enough.
func ExampleRoute_throttle() {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	limiter, _ := floodgate.New(store, floodgate.Options{})
	e, _ := enforce.New(enforce.Options{Limiter: limiter})
	defer e.Close()
	hl, _ := httplimit.New(httplimit.Options{Enforcer: e})
	rule, _ := floodgate.NewRule("export", 1, 100*time.Millisecond, floodgate.SlidingWindow)
	limit, _ := hl.Middleware(httplimit.Route{
		Limits:     []httplimit.Limit{{Rule: rule, Key: httplimit.ClientIP(nil)}},
		MaxDelay:   time.Second, // wait up to a second for quota
		MaxWaiters: 10,          // with at most 10 requests waiting
	})
	h := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	send(h, "GET", "/export", "203.0.113.9:1")
	start := time.Now()
	rec := send(h, "GET", "/export", "203.0.113.9:1")
	fmt.Println(rec.Code, "after waiting about the window:", time.Since(start) >= 90*time.Millisecond)
	// Output: 200 after waiting about the window: true
}

// The handler finds the decision in the request's context and refunds the
// account's attempt once the password proves right, so that the owner
// never locks themselves out.
func ExampleResult_Refund() {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	limiter, _ := floodgate.New(store, floodgate.Options{})
	e, _ := enforce.New(enforce.Options{Limiter: limiter})
	defer e.Close()
	hl, _ := httplimit.New(httplimit.Options{Enforcer: e})
	byIP, _ := floodgate.NewRule("login-ip", 100, time.Minute, floodgate.SlidingWindow)
	byAccount, _ := floodgate.NewRule("login-account", 2, time.Minute, floodgate.SlidingWindow)
	limit, _ := hl.Middleware(httplimit.Route{Limits: []httplimit.Limit{
		{Rule: byIP, Key: httplimit.ClientIP(nil)},
		{Rule: byAccount, Key: httplimit.Header("X-Demo-Account")},
	}})
	login := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Demo-Password") == "right" {
			res, _ := httplimit.FromContext(r.Context())
			_ = res.Refund(r.Context(), "login-account")
		}
	}))
	for range 5 {
		send(login, "POST", "/login", "203.0.113.9:1", "X-Demo-Account", "alice", "X-Demo-Password", "right")
	}
	rec := send(login, "POST", "/login", "203.0.113.9:1", "X-Demo-Account", "alice", "X-Demo-Password", "wrong")
	fmt.Println(rec.Code, rec.Header().Get("RateLimit"))
	// Output: 200 "login-ip";r=94;t=60, "login-account";r=1;t=60
}

// An LLM proxy with a budget of 1,000 tokens a minute per user: a request
// reserves an estimate from its prompt (a quarter of its bytes, plus the
// longest answer it asks for), the model answers, and the handler settles
// the estimate with the usage the answer reports. The unused part of an
// estimate is credited at once; an answer longer than its estimate is
// charged past the budget, and the user owes it: the next request waits
// until the token bucket has refilled the debt.
func ExampleResult_Settle() {
	// A clock that stands still, so that the bucket refills nothing
	// between the requests and the figures print the same on every run.
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	store := memstore.New(memstore.Options{Now: func() time.Time { return start }})
	defer store.Close()
	limiter, _ := floodgate.New(store, floodgate.Options{})
	e, _ := enforce.New(enforce.Options{Limiter: limiter})
	defer e.Close()
	hl, _ := httplimit.New(httplimit.Options{Enforcer: e})
	tokens := floodgate.Rule{Name: "llm-tokens", Limit: 1000, Window: time.Minute, Algorithm: floodgate.TokenBucket}
	estimate := func(r *http.Request) int64 {
		maxTokens, _ := strconv.ParseInt(r.Header.Get("X-Max-Tokens"), 10, 64)
		return r.ContentLength/4 + maxTokens
	}
	// model stands for the upstream call: it answers with the tokens it
	// used, prompt and completion, as an OpenAI-style usage object does.
	model := func(r *http.Request) (usage int64) {
		used, _ := strconv.ParseInt(r.Header.Get("X-Demo-Usage"), 10, 64)
		return used
	}
	limit, _ := hl.Middleware(httplimit.Route{Limits: []httplimit.Limit{
		{Rule: tokens, Key: httplimit.Header("X-User"), Cost: estimate},
	}})
	proxy := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		used := model(r)
		res, _ := httplimit.FromContext(r.Context())
		if _, err := res.Settle(r.Context(), "llm-tokens", used); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "used %d", used)
	}))
	chat := func(prompt string, maxTokens, usage int) {
		req := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(prompt))
		req.Header.Set("X-User", "ana")
		req.Header.Set("X-Max-Tokens", strconv.Itoa(maxTokens))
		req.Header.Set("X-Demo-Usage", strconv.Itoa(usage))
		rec := httptest.NewRecorder()
		proxy.ServeHTTP(rec, req)
		if rec.Code == http.StatusTooManyRequests {
			fmt.Println(rec.Code, rec.Header().Get("RateLimit"), "| Retry-After:", rec.Header().Get("Retry-After"))
			return
		}
		fmt.Println(rec.Code, rec.Header().Get("RateLimit"), "|", rec.Body.String())
	}
	prompt := strings.Repeat("word ", 80) // 400 bytes: 100 tokens estimated
	chat(prompt, 300, 250)                // reserves 400, settles 250: 150 back
	chat(prompt, 300, 1100)               // reserves 400, settles 1,100: 700 more, past the budget
	chat(prompt, 300, 0)                  // in debt: refused until refilled
	// Output:
	// 200 "llm-tokens";r=600;t=24 | used 250
	// 200 "llm-tokens";r=350;t=39 | used 1100
	// 429 "llm-tokens";r=0;t=81 | Retry-After: 45
}

// Key functions combine: First keys an authenticated request by its
// principal and an anonymous one by its IP, without the two ever sharing a
// key; Join keys by both at once.
func ExampleFirst() {
	key := httplimit.First(httplimit.Principal, httplimit.ClientIP(nil))
	both := httplimit.Join(httplimit.Principal, httplimit.ClientIP(nil))
	anon := httptest.NewRequest("GET", "/", nil)
	anon.RemoteAddr = "203.0.113.9:1"
	authed := anon.WithContext(httplimit.WithPrincipal(context.Background(), "alice"))
	fmt.Printf("%q %q\n", key(anon), key(authed))
	fmt.Printf("%q %q\n", both(anon), both(authed))
	// Output:
	// "1:203.0.113.9" "0:alice"
	// "" "5:alice11:203.0.113.9"
}

// Metrics go to the Enforcer's Registerer and degraded decisions to its
// Logger, in aggregate: the first line of an outage at once, then at most
// one line every 5s that counts what it held back (here written by the
// Enforcer's Close).
func Example_metricsAndLogs() {
	store := memstore.New(memstore.Options{})
	limiter, _ := floodgate.New(store, floodgate.Options{})
	reg := prometheus.NewRegistry()
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "error" {
				return slog.Attr{} // keep the output stable
			}
			return a
		},
	}))
	e, _ := enforce.New(enforce.Options{Limiter: limiter, Registerer: reg, Logger: logger})
	hl, _ := httplimit.New(httplimit.Options{Enforcer: e})
	rule, _ := floodgate.NewRule("statement", 100, time.Minute, floodgate.SlidingWindow)
	limit, _ := hl.Middleware(httplimit.Route{Name: "statement", Failure: enforce.FailOpen,
		Limits: []httplimit.Limit{{Rule: rule, Key: httplimit.ClientIP(nil)}}})
	h := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	send(h, "GET", "/statement", "203.0.113.9:1")
	store.Close() // the store goes down
	for range 1000 {
		send(h, "GET", "/statement", "203.0.113.9:1")
	}
	e.Close()

	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "floodgate_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if v := m.GetCounter().GetValue(); v > 0 {
				for _, l := range m.GetLabel() {
					if l.GetName() == "outcome" {
						fmt.Println(mf.GetName(), l.GetValue(), v)
					}
				}
			}
		}
	}
	// Output:
	// level=WARN msg="floodgate: rate-limit store failed; decided by the failure mode" gate=statement failure_mode=open outcome=failed_open suppressed=0
	// level=WARN msg="floodgate: rate-limit store failed; decided by the failure mode" gate=statement failure_mode=open outcome=failed_open suppressed=998
	// floodgate_decisions_total allowed 1
	// floodgate_decisions_total failed_open 1000
}
