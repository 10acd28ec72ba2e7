// Package httplimit is net/http middleware that rate-limits requests with
// a [floodgate.Limiter], answers with the standard rate-limit fields, and
// keeps serving by a per-route policy when the store fails.
//
// Build one [Routes] per service with [New], on the process's
// enforce.Enforcer, then one middleware per route with
// [Routes.Middleware]. A middleware is a plain
// func(http.Handler) http.Handler, so it wraps handlers of the standard
// ServeMux (Go 1.22 patterns such as "POST /pix/{id}") and of chi, gorilla
// or any other router:
//
//	e, err := enforce.New(enforce.Options{Limiter: limiter, Registerer: prometheus.DefaultRegisterer, Logger: logger})
//	...
//	defer e.Close()
//	hl, err := httplimit.New(httplimit.Options{Enforcer: e})
//	...
//	pix, err := hl.Middleware(httplimit.Route{
//		Limits:  []httplimit.Limit{{Rule: perIP, Key: httplimit.ClientIP(resolver)}, {Rule: pixRule, Key: httplimit.Principal}},
//		Failure: enforce.FailClosed,
//	})
//	...
//	mux.Handle("POST /pix", auth(pix(pixHandler)))
//
// # Keys
//
// Each [Limit] of a route pairs a rule with a [KeyFunc]: [ClientIP] (the
// client's address behind trusted proxies, from package clientip),
// [Header], [Principal] (set by an authentication middleware with
// [WithPrincipal]), or combinations with [Join] and [First]. A KeyFunc
// returns "" when the request has no such key; the limit's [Missing] says
// whether the limit then skips the request ([Skip], the default: an
// anonymous request is not limited per principal, but still per IP) or
// counts it under one key shared by all keyless requests ([Share]). The
// limits of a route are checked together, all-or-nothing, and the worst
// is reported (see [floodgate.Limiter.Check]).
//
// # Response fields
//
// Every response decided by a limiter carries, per
// draft-ietf-httpapi-ratelimit-headers-11 (Structured Field Lists, RFC
// 9651; a policy name that needs escaping goes through
// github.com/dunglas/httpsfv), one list member per limit checked, in the
// route's order, those of nested routes on the same field line after the
// outer route's:
//
//	RateLimit-Policy: "ip";q=100;w=60, "pix";q=10;w=60
//	RateLimit: "ip";r=93;t=60, "pix";r=7;t=42
//
// q is the rule's limit and w its window in seconds (rounded up); r is the
// requests left now and t the seconds (rounded up) until the quota is
// whole again. The fields are written before the handler runs: with a
// [Limit.Cost], r counts the estimate, and a cost settled after the
// response ([enforce.Result.Settle]) shows in the next answer; a request
// denied for costing more than is left shows what is left (r=5 for a
// cost of 10). A token bucket's r is the tokens in its bucket, up to its
// Burst, so it exceeds q when Burst does: 2 a second with Burst 4 sends
// q=2;w=1 and, after a first request, r=3 (X-RateLimit-Remaining too). A
// concurrency limit (floodgate.Concurrency) counts
// requests in flight, which its member says in the draft's quota unit,
// with no window: "reports";q=2;qu="concurrent-requests". By default the legacy X-RateLimit-Limit,
// X-RateLimit-Remaining and X-RateLimit-Reset (delta seconds) describe the
// worst limit; [Options.NoLegacyHeaders] turns them off.
//
// A denial answers 429 (or [Route.Status]) with Retry-After in whole
// seconds, rounded up and at least 1 (1.2s gives 2, 0.3s gives 1),
// Cache-Control: no-store, and an RFC 9457 application/problem+json body:
//
//	{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",
//	 "title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,
//	 "detail":"Quota exceeded: 10 requests per 60 s (pix); retry after 42 s.",
//	 "violated-policies":["pix"]}
//
// Its type is [QuotaExceeded], and violated-policies names the policies
// whose quota is exhausted (the route's Name on an opaque route). A route
// that fails closed answers type "about:blank", the status's text as
// title, and a detail that says the limit could not be checked.
// [Route.Deny] may log or count a denial before this answer, or write
// its own. Retry-After is sent with 429 and 503 only (RFC 9110 §10.2.3),
// never on other statuses.
//
// An opaque route ([Route.Opaque]) answers every denial with the same
// bytes, whichever limit refused it, and sends no per-limit fields at all:
// see Route.Opaque for the exact answer and why.
//
// # Failures of the store
//
// The enforcement layer (package enforce) decides: every decision has the
// time budget of the floodgate.Limiter (floodgate.Options.Timeout); a
// store that fails or does not answer in time is handled by
// the route's [enforce.FailureMode]: [enforce.FailLocal] (the default)
// decides with per-replica in-memory limits, [enforce.FailClosed] denies,
// [enforce.FailOpen] allows, [enforce.FailError] answers 503 (package
// enforce tells the rest, the circuit breaker included). A fail-closed 429 (or 503) sends a Retry-After of 5s, or the
// breaker's remaining open time if that is longer. Each degraded decision
// is counted in the metrics and logged in aggregate, as package enforce
// says: never one line per request.
//
// # Throttling
//
// A route with [Route.MaxDelay] slows down before it rejects: a request
// denied with a Retry-After within MaxDelay waits, and is decided again,
// for at most MaxDelay in all. At most [Route.MaxWaiters] requests of the
// route wait at once; more are denied at once. A client that goes away
// ends its wait immediately.
//
// # Shadow mode, nesting, and the shortest start
//
// A limit or a route in shadow mode (Limit.Shadow, Route.Shadow) is
// checked and counted but never denies: how a new limit is rolled out (see
// Limit.Shadow). Middlewares may nest (a global per-IP one around
// per-route ones): a hit that both list counts once, a denial by the inner
// one refunds the outer one's hits, and the legacy fields describe the
// worst limit; one Route with every limit is still the one atomic check.
// Each nested route decides on its own, within its own time budget, so
// while the store hangs a request waits one budget per route until the
// breaker opens; the fields an outer route wrote still count a request
// that an inner one denied, whose outer hits it then refunds.
// A rule name means one rule on one Enforcer, among its routes and gRPC
// methods: a route whose rule has another's name but other parameters is
// refused. A limit that skips a
// request for want of a key (a principal never set) is counted and logged
// once. [PerIP] is the shortest start: middleware of one limit per client
// address, in one call.
//
// # The handler
//
// The handler of an allowed request finds the [Result] with
// [FromContext], and may undo its hits with [Result.Refund] (the account's
// login attempt once the password proved right).
//
// # Metrics
//
// The Enforcer's metrics (see package enforce) count each route's
// decisions under a gate label that is the route's Name.
package httplimit
