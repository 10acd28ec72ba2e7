// Package bank is floodgate's reference service: a digital bank whose PIX
// transfers, statement and login are rate limited as the seed describes.
// It uses only floodgate's public API, like any user would.
package bank

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clientip"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// Deps is what a [Server] is built from.
type Deps struct {
	Config Config
	// Limiter decides against the shared store (Redis, or memory).
	Limiter *floodgate.Limiter
	// Breaker is the Redis store, whose circuit breaker is exported as the
	// floodgate_breaker_state gauge; nil without one.
	Breaker *redisstore.Store
	// Ready reports whether the shared store is reachable, for /readyz.
	Ready func(ctx context.Context) error
	// Users is the account directory.
	Users *Directory
	// Ledger holds the transfers; replicas in one process may share it.
	Ledger *Ledger
	// Logger receives the service's logs. Nil discards them.
	Logger *slog.Logger
	// Registry receives the metrics that [Server.MetricsHandler] serves. Nil
	// means a new one.
	Registry *prometheus.Registry
	// Now is the clock of tokens and transfers. Nil means time.Now.
	Now func() time.Time
}

// Server is the bank's HTTP service.
type Server struct {
	deps    Deps
	keys    Keys
	limits  *httplimit.Routes
	enforce *enforce.Enforcer // the limits' enforcement layer: metrics, failure modes, logs
	checks  *gate             // bounds the password checks running at once
	handler http.Handler
	metrics http.Handler
	ip      *clientip.Resolver
	// failed and denied log failed logins and 429s by client IP, in
	// aggregate (never the document).
	failed *ipTally
	denied []*ipTally
}

// Token and device cookie lifetimes, and the device cookie's name.
const (
	tokenTTL     = 15 * time.Minute
	deviceTTL    = 90 * 24 * time.Hour
	DeviceCookie = "fg_device"
	maxBody      = 4 << 10
)

// NewServer builds the service and its routes.
func NewServer(d Deps) (*Server, error) {
	if d.Limiter == nil || d.Users == nil || d.Ledger == nil {
		return nil, errors.New("bank: NewServer needs a Limiter, Users and a Ledger")
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Registry == nil {
		d.Registry = prometheus.NewRegistry()
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Ready == nil {
		d.Ready = func(context.Context) error { return nil }
	}
	c := d.Config
	resolver, err := clientip.New(clientip.Options{TrustedProxies: c.TrustedProxies, IPv6Prefix: c.IPv6Prefix})
	if err != nil {
		return nil, fmt.Errorf("bank: %w", err)
	}
	enforcer, err := enforce.New(enforce.Options{Limiter: d.Limiter, Breaker: d.Breaker, Registerer: d.Registry, Logger: d.Logger})
	if err != nil {
		return nil, fmt.Errorf("bank: %w", err)
	}
	limits, err := httplimit.New(httplimit.Options{Enforcer: enforcer})
	if err != nil {
		enforcer.Close()
		return nil, fmt.Errorf("bank: %w", err)
	}
	s := &Server{deps: d, keys: NewKeys([]byte(c.TokenSecret)), limits: limits, enforce: enforcer,
		checks: newGate(c.LoginConcurrency, c.LoginQueue), ip: resolver,
		failed: newTally(d.Logger, "login failed")}
	// Every API route checks the global per-IP limit first, in the same
	// all-or-nothing decision as its own limits: the body is parsed and
	// the token checked before the decision (the login and PIX limits need
	// their keys), but a request that fails them is answered only after
	// it, so malformed logins and forged tokens count against the global
	// limit too. Their own limits skip them (no key). Health probes and
	// metrics are not limited.
	byIP := httplimit.ClientIP(resolver)
	global := httplimit.Limit{Rule: c.GlobalIP, Key: byIP}
	loginIP := func(r *http.Request) string {
		if loginKey(r) == "" {
			return "" // not a well-formed login: only the global limit counts it
		}
		return byIP(r)
	}
	// loginNet keys an IPv6 client's network (a /48 by default): IPv4
	// clients skip it.
	loginNet := func(r *http.Request) string {
		a := resolver.ClientIP(r)
		if loginKey(r) == "" || !a.Is6() {
			return ""
		}
		p, _ := a.Prefix(c.LoginNetPrefix)
		return p.String()
	}
	routes := []struct {
		pattern string
		route   httplimit.Route
		handler http.Handler
		wrap    func(http.Handler) http.Handler
	}{
		{"POST /login", httplimit.Route{
			Name: "login", Opaque: true, Failure: failure(c.FailureLogin),
			Limits: []httplimit.Limit{global, {Rule: c.LoginIP, Key: loginIP}, {Rule: c.LoginNet, Key: loginNet}, {Rule: c.LoginAccount, Key: loginKey}},
		}, http.HandlerFunc(s.login), s.parseLogin},
		{"POST /pix", httplimit.Route{
			Name: "pix", Failure: failure(c.FailurePIX),
			Limits: []httplimit.Limit{global, {Rule: c.PIX, Key: httplimit.Principal}},
		}, http.HandlerFunc(s.pix), s.authenticate},
		{"GET /statement", httplimit.Route{
			Name: "statement", Failure: failure(c.FailureStatement),
			Limits: []httplimit.Limit{global, {Rule: c.Statement, Key: httplimit.Principal}},
		}, http.HandlerFunc(s.statement), s.authenticate},
	}
	mux := http.NewServeMux()
	for _, rt := range routes {
		denied := newTally(d.Logger, "rate limited", slog.String("route", rt.route.Name))
		s.denied = append(s.denied, denied)
		rt.route.Deny = func(w http.ResponseWriter, r *http.Request, answer http.Handler) {
			denied.add(s.clientIP(r))
			answer.ServeHTTP(w, r)
		}
		limit, err := limits.Middleware(rt.route)
		if err != nil {
			enforcer.Close()
			return nil, fmt.Errorf("bank: route %s: %w", rt.pattern, err)
		}
		mux.Handle(rt.pattern, rt.wrap(limit(answerRefusal(rt.handler))))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "alive"})
	})
	mux.HandleFunc("GET /readyz", s.ready)
	s.handler = mux
	metrics := http.NewServeMux()
	metrics.Handle("GET /metrics", promhttp.HandlerFor(d.Registry, promhttp.HandlerOpts{}))
	s.metrics = metrics
	return s, nil
}

// Handler returns the service's public HTTP handler: the API and the
// health probes.
func (s *Server) Handler() http.Handler { return s.handler }

// MetricsHandler returns the handler of /metrics, and of any debug
// endpoint, to be served on a listener of its own (METRICS_ADDR), never
// on the public one: the metrics tell which limit refused an opaque login
// and who failed on which account lately.
func (s *Server) MetricsHandler() http.Handler { return s.metrics }

// Close writes the failed logins and 429s not yet logged and releases the
// rate-limit middleware's resources.
func (s *Server) Close() error {
	for _, t := range append(s.denied, s.failed) {
		t.stop()
	}
	return s.enforce.Close()
}

// clientIP returns the address of req's client, as the limits see it.
func (s *Server) clientIP(req *http.Request) string {
	if a := s.ip.ClientIP(req); a.IsValid() {
		return a.String()
	}
	return ""
}

func failure(m FailureMode) enforce.FailureMode {
	switch m {
	case FailOpen:
		return enforce.FailOpen
	case FailLocal:
		return enforce.FailLocal
	default:
		return enforce.FailClosed
	}
}

func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), time.Second)
	defer cancel()
	if err := s.deps.Ready(ctx); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "store unavailable"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// loginAttempt is a parsed login body, with the key its account is
// limited by.
type loginAttempt struct {
	doc      Document
	password string
	account  string // AccountID of doc
	key      string // "device:<id>" with a valid device cookie, else "account:<id>"
}

type loginKeyCtx struct{}

// loginKey keys the login-account limit: a client with a valid device
// cookie for the account is limited on its own device key, so a botnet
// hammering the account cannot lock the owner out of a known device.
func loginKey(r *http.Request) string {
	a, _ := r.Context().Value(loginKeyCtx{}).(loginAttempt)
	return a.key
}

// refusal is the answer a request earned before the limiter ran: a
// malformed login, a missing or bad token. It is given after the limiter
// (see answerRefusal), so that the request counts against the global
// limit.
type refusal struct {
	status int
	msg    string
}

type refusalCtx struct{}

// refuseAfterLimits returns r marked with the answer it will get once the
// limiter has counted it.
func refuseAfterLimits(r *http.Request, status int, msg string) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), refusalCtx{}, refusal{status, msg}))
}

// answerRefusal runs after the limiter: a request marked by
// refuseAfterLimits gets its answer instead of next.
func answerRefusal(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f, ok := r.Context().Value(refusalCtx{}).(refusal); ok {
			writeError(w, f.status, f.msg)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// parseLogin decodes the login body before the limiter runs, so that the
// account key is known. A malformed body is answered after the limiter,
// and counts against the global limit only.
func (s *Server) parseLogin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// JSON only: a cross-site HTML form cannot send it without a CORS
		// preflight, so a page cannot make its visitors' browsers guess
		// passwords.
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			next.ServeHTTP(w, refuseAfterLimits(r, http.StatusUnsupportedMediaType, "Content-Type must be application/json"))
			return
		}
		var body struct {
			Document string `json:"document"`
			Password string `json:"password"`
		}
		if status, msg := decodeJSON(w, r, &body); status != 0 {
			if r.Context().Err() != nil {
				// The body's read failed (ReadTimeout: a client trickling
				// it) and net/http cancelled the request: no decision can
				// be made, so answer now.
				writeError(w, status, msg)
				return
			}
			next.ServeHTTP(w, refuseAfterLimits(r, status, msg))
			return
		}
		doc, err := ParseDocument(body.Document)
		if err != nil || body.Password == "" || len(body.Password) > 72 {
			next.ServeHTTP(w, refuseAfterLimits(r, http.StatusBadRequest, "document must be a valid CPF or CNPJ and password 1 to 72 bytes"))
			return
		}
		a := loginAttempt{doc: doc, password: body.Password, account: s.keys.AccountID(doc)}
		a.key = "account:" + a.account
		if c, err := r.Cookie(DeviceCookie); err == nil {
			if device, err := s.keys.VerifyDeviceCookie(c.Value, a.account, s.deps.Users.Credential(doc), s.deps.Now()); err == nil {
				a.key = "device:" + device
			}
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), loginKeyCtx{}, a)))
	})
}

// busyRetry is the Retry-After of a login refused because the password
// checks are all taken: the queue drains in about LoginQueue /
// LoginConcurrency checks, well under a second at bcrypt's default cost.
const busyRetry = "1"

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	a, _ := r.Context().Value(loginKeyCtx{}).(loginAttempt)
	release, err := s.checks.enter(r.Context())
	if err != nil {
		// No password was checked: give the attempt back to the login
		// limits, so that a busy server locks nobody out.
		s.refundLogin(r)
		if errors.Is(err, errBusy) {
			w.Header().Set("Retry-After", busyRetry)
			writeError(w, http.StatusServiceUnavailable, "too many logins in progress; try again shortly")
		}
		return // otherwise the client went away
	}
	_, ok := s.deps.Users.Authenticate(a.doc, a.password)
	release()
	if !ok {
		s.failed.add(s.clientIP(r))
		writeError(w, http.StatusUnauthorized, "invalid credentials")
		return
	}
	// The owner proved who they are: the login limits count failed
	// attempts only, so give the IP and the account (or device) their
	// attempt back, and remember this device. An office behind one IP can
	// thus log in all day, while guessing still runs into both limits.
	s.refundLogin(r)
	now := s.deps.Now()
	cred := s.deps.Users.Credential(a.doc)
	device := randomID()
	if c, err := r.Cookie(DeviceCookie); err == nil {
		if d, err := s.keys.VerifyDeviceCookie(c.Value, a.account, cred, now); err == nil {
			device = d
		}
	}
	http.SetCookie(w, &http.Cookie{
		Name: DeviceCookie, Value: s.keys.DeviceCookie(a.account, device, cred, now.Add(deviceTTL)),
		Path: "/login", MaxAge: int(deviceTTL / time.Second), HttpOnly: true, SameSite: http.SameSiteStrictMode,
		// Secure unless configured otherwise: behind a TLS-terminating
		// proxy r.TLS is nil although the client speaks HTTPS.
		Secure: !s.deps.Config.InsecureCookies,
	})
	s.deps.Logger.InfoContext(r.Context(), "login", "account", a.account)
	w.Header().Set("Cache-Control", "no-store") // a bearer token: no cache may keep it
	writeJSON(w, http.StatusOK, map[string]string{"token": s.keys.Token(a.account, now.Add(tokenTTL))})
}

// refundLogin gives the request's attempt back to the login limits (not
// to the global one, which counts every request).
func (s *Server) refundLogin(r *http.Request) {
	res, ok := httplimit.FromContext(r.Context())
	if !ok {
		return
	}
	c := s.deps.Config
	// Even for a client that left while queued: its password was not
	// checked. The limiter's budget still bounds the call.
	ctx := context.WithoutCancel(r.Context())
	if err := res.Refund(ctx, c.LoginIP.Name, c.LoginNet.Name, c.LoginAccount.Name); err != nil {
		s.deps.Logger.WarnContext(ctx, "login refund failed", "err", err)
	}
}

// authenticate turns a valid bearer token into the request's principal;
// without one, 401, answered after the limiter (which counts the request
// against the global limit only).
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		const prefix = "Bearer "
		h := r.Header.Get("Authorization")
		if len(h) <= len(prefix) || h[:len(prefix)] != prefix {
			next.ServeHTTP(w, refuseAfterLimits(r, http.StatusUnauthorized, "missing bearer token"))
			return
		}
		account, err := s.keys.VerifyToken(h[len(prefix):], s.deps.Now())
		if err != nil {
			next.ServeHTTP(w, refuseAfterLimits(r, http.StatusUnauthorized, "invalid or expired token"))
			return
		}
		next.ServeHTTP(w, r.WithContext(httplimit.WithPrincipal(r.Context(), account)))
	})
}

// maxAmount is the largest transfer accepted: one billion reais.
const maxAmount = 100_000_000_000

func (s *Server) pix(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Key         string `json:"key"`
		AmountCents int64  `json:"amount_cents"`
	}
	if !decode(w, r, &body) {
		return
	}
	if body.Key == "" || len(body.Key) > 77 || body.AmountCents <= 0 || body.AmountCents > maxAmount {
		writeError(w, http.StatusBadRequest, "key must be 1 to 77 bytes and amount_cents a positive integer up to 100000000000")
		return
	}
	t := s.deps.Ledger.Add(httplimit.Principal(r), body.Key, body.AmountCents, s.deps.Now())
	writeJSON(w, http.StatusCreated, t)
}

func (s *Server) statement(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"transfers": s.deps.Ledger.Statement(httplimit.Principal(r))})
}

// decode reads a JSON body of at most maxBody bytes into v, answering
// itself when it cannot: 413 for a body over maxBody (RFC 9110, Content
// Too Large), 400 for a malformed one.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if status, msg := decodeJSON(w, r, v); status != 0 {
		writeError(w, status, msg)
		return false
	}
	return true
}

// decodeJSON is decode that returns the status and message of its answer
// (zero when v was decoded) instead of writing it.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) (status int, msg string) {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if tooLarge := new(http.MaxBytesError); errors.As(err, &tooLarge) {
			return http.StatusRequestEntityTooLarge, fmt.Sprintf("body larger than %d bytes", maxBody)
		}
		return http.StatusBadRequest, "malformed JSON body"
	}
	if dec.More() {
		return http.StatusBadRequest, "malformed JSON body: trailing data"
	}
	return 0, ""
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
