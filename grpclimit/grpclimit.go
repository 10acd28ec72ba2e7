package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/report"
)

// ErrInvalidOptions is wrapped by the errors of [New] about bad options or
// methods.
var ErrInvalidOptions = errors.New("grpclimit: invalid options")

// defaultGate is the name, in metrics and logs, of the gate of
// [Options.Default]: the limits of every method not listed in
// Options.Methods.
const defaultGate = "default"

// Options configures an [Interceptors]: the enforcement layer and the
// limits of each method. An Interceptors with no Methods and no Default
// limits nothing.
type Options struct {
	// Enforcer is the enforcement layer of the methods: its limiters,
	// metrics and logger, and one rule per name across every gate.
	// Required: the caller builds it with enforce.New and closes it on
	// shutdown (package enforce says who shares it).
	Enforcer *enforce.Enforcer

	// Methods maps full method names ("/bank.v1.Pix/Transfer", as in
	// grpc.UnaryServerInfo.FullMethod) to their limits. A listed method
	// with no Limits is not limited: how a health check is exempted from
	// Default.
	Methods map[string]Method
	// Default limits every method not in Methods, under one gate named
	// "default"; its limits count per rule name and key, so a Default
	// per-IP rule of 100 per minute admits 100 calls a minute to all those
	// methods together. The zero Method (no Limits) leaves them unlimited.
	Default Method
}

// Method configures the limits of one method, or of the default.
type Method struct {
	// Limits are checked together, all-or-nothing: either each records the
	// call or none does, and the answer reports the worst (a global
	// per-IP rule and a strict per-principal one). No two on the same rule
	// name.
	Limits []Limit
	// Failure is what to do when the store fails; the zero value is
	// enforce.FailLocal (per-replica in-memory limits). A fail-closed
	// method answers codes.Unavailable.
	Failure enforce.FailureMode
	// Shadow puts every limit of the method in shadow mode (see
	// Limit.Shadow): the method never denies, and counts what it would do.
	Shadow bool
	// Opaque makes a denial say nothing about which limit refused it, nor
	// how long that limit's key has left: for login, where "the account is
	// blocked" tells an attacker the account exists. The method sends no
	// rate-limit metadata and no QuotaFailure; every denial is the same
	// status, whose RetryInfo is the longest window of the method's limits,
	// shadow ones aside (a bound on every limit's wait). It cannot be
	// combined with MaxDelay, whose wait would tell the time each key has
	// left.
	Opaque bool
	// MaxDelay slows down before it rejects: a call denied with a wait of
	// at most MaxDelay waits and is decided again, for at most MaxDelay in
	// all, and never past the call's deadline (a call whose deadline
	// comes first is denied at once, with its RetryInfo). Zero means no
	// waiting. A stream open waits the same way.
	MaxDelay time.Duration
	// MaxWaiters bounds the calls of this method waiting at once; a call
	// over the bound is denied at once. Zero means 100.
	MaxWaiters int
}

// Limit is one rule applied to one key of a call.
type Limit struct {
	// Rule is the policy; its name appears in the metadata, the
	// QuotaFailure and the metrics. Limits on the same rule name and key
	// share their count, across methods too.
	Rule floodgate.Rule
	// Key returns the key the rule counts; required. A call for which it
	// returns "" is not counted by this limit: a skip, counted and
	// logged as enforce.Gate.Hits says.
	Key KeyFunc
	// Shadow checks and counts the limit but never lets it deny: how a new
	// limit is rolled out. Its outcome is counted as shadow_allowed or
	// shadow_denied; it sends no metadata and is not refunded.
	Shadow bool
	// Cost, if set, is what a call costs under the limit, estimated before
	// the handler runs; nil, and a cost of 0, mean 1 (floodgate.Hit.Cost).
	// The handler (or a stream, at its end)
	// settles the estimate with the actual cost through the call's Result
	// ([FromContext], enforce.Result.Settle): an overrun is charged past
	// the limit, an underrun refunded.
	Cost func(context.Context) int64
}

// Interceptors holds the interceptors' per-method gates. Build it with [New];
// it is safe for concurrent use, and its methods never change after New.
// It holds nothing to release.
type Interceptors struct {
	e       *enforce.Enforcer
	methods map[string]*method
	def     *method           // nil when Default has no limits
	folded  map[string]string // the Methods names by their lower case: a near miss of a call is a typo
	strays  strays            // the methods called that Methods does not name
}

// The bounds of the strays an Interceptors remembers: the names of the
// methods called that Options.Methods does not list. A server with an
// unknown-service handler (grpc.UnknownServiceHandler) is called by any
// name a client sends, and a set that kept every one grew without bound
// (100,000 distinct 1 KiB names held 122 MiB): it keeps at most maxStrays
// names of at most maxStrayLen bytes, at most 256 KiB of names.
const (
	maxStrays   = 1024
	maxStrayLen = 256
)

// strays is the bounded set of the methods called that Options.Methods
// does not name. A remembered name is checked once for a near miss; a
// name past the bounds is folded into one entry, the overflow: it is
// checked at each call, and only the first near miss among them is
// logged.
type strays struct {
	names    sync.Map     // name -> struct{}: at most maxStrays names
	n        atomic.Int64 // the slots of names taken or being taken
	full     atomic.Bool  // a name did not fit, which was logged
	overflow atomic.Bool  // a near miss that did not fit was logged
}

// method is a built Method: its gate, its keys and its serialized fields.
type method struct {
	Method
	gate     *enforce.Gate
	spec     enforce.Spec  // what gate enforces; the gate is made once every method is checked
	logger   *slog.Logger  // the Enforcer's
	panicked []atomic.Bool // by limit: its Key panicked, which was logged
	rules    report.Rules  // what the answers say of the method's enforced rules
}

// New returns the Interceptors of opts, or an error listing every bad method,
// each wrapping [ErrInvalidOptions] (and, for what the enforcement layer
// refuses, enforce.ErrInvalid as well). It also fails if opts.Enforcer is
// nil. Refused Options leave the Enforcer as it was: no gate is made and
// no rule name claimed.
func New(opts Options) (*Interceptors, error) {
	if opts.Enforcer == nil {
		return nil, fmt.Errorf("%w: Options.Enforcer is nil: build one with enforce.New", ErrInvalidOptions)
	}
	return build(opts.Enforcer, opts)
}

// build returns the Interceptors of opts's methods on e.
func build(e *enforce.Enforcer, opts Options) (*Interceptors, error) {
	l := &Interceptors{e: e, methods: make(map[string]*method, len(opts.Methods)), folded: make(map[string]string, len(opts.Methods))}
	var errs []error
	names := make([]string, 0, len(opts.Methods))
	for name := range opts.Methods {
		names = append(names, name)
	}
	slices.Sort(names) // the errors come in a stable order
	for _, name := range names {
		if !validMethodName(name) {
			errs = append(errs, fmt.Errorf("%w: method %q is not a full method name such as \"/package.Service/Method\"", ErrInvalidOptions, name))
			continue
		}
		m, err := buildMethod(e, name, opts.Methods[name])
		if err != nil {
			errs = append(errs, err)
		}
		l.methods[name] = m // nil: a method listed without limits is exempt
		l.folded[strings.ToLower(name)] = name
	}
	if len(opts.Default.Limits) > 0 {
		m, err := buildMethod(e, defaultGate, opts.Default)
		if err != nil {
			errs = append(errs, err)
		}
		l.def = m
	} else if opts.Default.Shadow || opts.Default.Opaque || opts.Default.MaxDelay != 0 || opts.Default.MaxWaiters != 0 || opts.Default.Failure != enforce.FailLocal {
		errs = append(errs, fmt.Errorf("%w: Default has settings but no Limits", ErrInvalidOptions))
	}
	var specs []enforce.Spec
	var built []*method
	for _, name := range append(names, defaultGate) {
		m := l.methods[name]
		if name == defaultGate {
			m = l.def
		}
		if m != nil {
			specs, built = append(specs, m.spec), append(built, m)
		}
	}
	if len(errs) > 0 {
		// The gates are not built, but the enforcement layer's problems
		// with the specs are listed too.
		if err := e.Validate(specs...); err != nil {
			errs = append(errs, fmt.Errorf("%w: %w", ErrInvalidOptions, err))
		}
		return nil, errors.Join(errs...)
	}
	// The gates claim their rule names in e all at once, or none does:
	// refused Options leave a shared Enforcer as it was.
	gs, err := e.Gates(specs...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	for i, m := range built {
		m.gate = gs[i]
	}
	return l, nil
}

// validMethodName reports whether s looks like "/package.Service/Method".
func validMethodName(s string) bool {
	svc, meth, ok := strings.Cut(strings.TrimPrefix(s, "/"), "/")
	return strings.HasPrefix(s, "/") && ok && svc != "" && meth != "" && !strings.Contains(meth, "/")
}

// buildMethod checks what is gRPC's in m and makes the method called name,
// its spec to be checked by the enforcement layer, with the problems of
// m. A method without limits builds to nil: it is not limited.
func buildMethod(e *enforce.Enforcer, name string, m Method) (*method, error) {
	if len(m.Limits) == 0 {
		return nil, nil
	}
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: method %q: "+format, append([]any{ErrInvalidOptions, name}, args...)...))
	}
	if m.Opaque && m.MaxDelay > 0 {
		bad("Opaque cannot be combined with MaxDelay: the wait would tell how long each key has left")
	}
	b := &method{Method: m, logger: e.Logger(), panicked: make([]atomic.Bool, len(m.Limits))}
	b.Limits = slices.Clone(m.Limits) // the caller may reuse its slice
	spec := enforce.Spec{Name: name, Failure: m.Failure, Shadow: m.Shadow, MaxDelay: m.MaxDelay, MaxWaiters: m.MaxWaiters}
	for i, lim := range b.Limits {
		if lim.Key == nil {
			bad("Limits[%d] (%q) has no Key", i, lim.Rule.Name)
		}
		spec.Limits = append(spec.Limits, enforce.Limit{Rule: lim.Rule, Shadow: lim.Shadow})
	}
	b.spec = spec
	var enforced []floodgate.Rule // a shadow limit is in no field, and makes nobody wait
	for _, lim := range b.Limits {
		if !lim.Shadow && !m.Shadow {
			enforced = append(enforced, lim.Rule)
		}
	}
	b.rules = report.NewRules(enforced)
	return b, errors.Join(errs...) // b, for its spec's problems to be listed too
}

// UnaryServerInterceptor returns the interceptor that limits unary calls:
//
//	grpc.NewServer(grpc.ChainUnaryInterceptor(auth, limiter.UnaryServerInterceptor()))
//
// An allowed call reaches the handler with the enforce.Result in its context
// ([FromContext]); a denied one gets the status described in the package
// doc, and the handler is not called.
func (l *Interceptors) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		m := l.method(info.FullMethod)
		if m == nil {
			return handler(ctx, req)
		}
		ctx, release, err := m.decide(ctx, func(md metadata.MD) error { return grpc.SetHeader(ctx, md) })
		if err != nil {
			return nil, err
		}
		defer release()
		return handler(ctx, req)
	}
}

// StreamServerInterceptor returns the interceptor that limits stream
// opens: each stream is one call, decided before the handler runs, and its
// messages are not counted.
//
//	grpc.NewServer(grpc.ChainStreamInterceptor(auth, limiter.StreamServerInterceptor()))
//
// An allowed stream's handler finds the enforce.Result in the stream's context.
func (l *Interceptors) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		m := l.method(info.FullMethod)
		if m == nil {
			return handler(srv, ss)
		}
		ctx, release, err := m.decide(ss.Context(), ss.SetHeader)
		if err != nil {
			return err
		}
		defer release() // the stream holds its leases until it ends
		return handler(srv, &stream{ServerStream: ss, ctx: ctx})
	}
}

// Limit decides the call whose server context is ctx, finding its method
// with grpc.Method. It implements the Limiter interface of
// go-grpc-middleware v2's interceptors/ratelimit, for servers already
// built on it:
//
//	grpc.ChainUnaryInterceptor(auth, ratelimit.UnaryServerInterceptor(limiter))
//
// It returns nil when the call may proceed, and otherwise the status error
// the interceptors would send. Prefer this package's interceptors: those
// of go-grpc-middleware answer every error with codes.ResourceExhausted
// and only the error's text (the RetryInfo and QuotaFailure details are
// lost, and a fail-closed Unavailable becomes ResourceExhausted), and the
// handler finds no Result in its context, so it cannot Refund. The
// rate-limit metadata is sent either way.
func (l *Interceptors) Limit(ctx context.Context) error {
	name, _ := grpc.Method(ctx)
	m := l.method(name)
	if m == nil {
		return nil
	}
	_, release, err := m.decide(ctx, func(md metadata.MD) error { return grpc.SetHeader(ctx, md) })
	if err == nil {
		// The call's end is not seen here; its context is canceled then.
		context.AfterFunc(ctx, release)
	}
	return err
}

// method returns the built method that limits calls to name, or nil.
func (l *Interceptors) method(name string) *method {
	if m, ok := l.methods[name]; ok {
		return m // nil for a listed method without limits
	}
	l.stray(name)
	return l.def
}

// stray checks the name of a called method that Options.Methods does not
// list for a near miss, once per remembered name (see strays).
func (l *Interceptors) stray(name string) {
	s := &l.strays
	if _, seen := s.names.Load(name); seen {
		return
	}
	if len(name) <= maxStrayLen {
		if s.n.Add(1) <= maxStrays {
			if _, seen := s.names.LoadOrStore(name, struct{}{}); seen {
				s.n.Add(-1) // another call stored it first
			} else {
				l.nearMiss(name, "")
			}
			return
		}
		s.n.Add(-1)
	}
	if s.full.CompareAndSwap(false, true) {
		l.e.Logger().LogAttrs(context.Background(), slog.LevelWarn, "floodgate: the methods called that Options.Methods does not list are past the bound "+
			"of the names remembered: further names are not remembered, and only the first near miss among them is logged",
			slog.Int("names", maxStrays), slog.Int("name_bytes", maxStrayLen))
	}
	if _, ok := l.folded[strings.ToLower(name)]; ok && s.overflow.CompareAndSwap(false, true) {
		l.nearMiss(name, " (the first near miss past the bound of the names remembered: no other is logged)")
	}
}

// nearMiss logs the Methods name that differs from a called method's
// only by case: a typo ("/pkg.Svc/Unarycall") that leaves the method
// under Default, or unlimited, with no other sign. note ends the message.
func (l *Interceptors) nearMiss(called, note string) {
	if listed, ok := l.folded[strings.ToLower(called)]; ok {
		l.e.Logger().LogAttrs(context.Background(), slog.LevelWarn, "floodgate: a method is called by a name that Options.Methods spells otherwise: "+
			"its limits do not apply to it (Default's do, if any)"+note, slog.String("called", called), slog.String("listed", listed))
	}
}

// CheckMethods returns an error, wrapping [ErrInvalidOptions], that lists
// the names of Options.Methods that are no method of services (a
// grpc.Server's GetServiceInfo, once its services are registered), with
// the name each was likely meant to be: a typo in a method name leaves
// that method unlimited, or under Default, with no other sign. An Interceptors
// built before its server's services are known logs the first call of a
// method that Methods spells only in another case. It remembers at most
// 1,024 names of unlisted methods called, of at most 256 bytes each (a
// server with an unknown-service handler is called by any name): past
// that, it logs the bound once and only the first near miss.
//
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(gl.UnaryServerInterceptor()))
//	pb.RegisterBankServer(srv, bank)
//	if err := gl.CheckMethods(srv.GetServiceInfo()); err != nil { ... }
func (l *Interceptors) CheckMethods(services map[string]grpc.ServiceInfo) error {
	known := make(map[string]string) // lower case -> name
	for svc, info := range services {
		for _, m := range info.Methods {
			name := "/" + svc + "/" + m.Name
			known[strings.ToLower(name)] = name
		}
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(l.methods)) {
		if _, ok := known[strings.ToLower(name)]; ok && known[strings.ToLower(name)] == name {
			continue
		}
		err := fmt.Errorf("%w: method %q is no method of the server's services", ErrInvalidOptions, name)
		if alt, ok := known[strings.ToLower(name)]; ok {
			err = fmt.Errorf("%w: method %q is no method of the server's services; did you mean %q?", ErrInvalidOptions, name, alt)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// decide checks the call whose context is ctx, sends its rate-limit
// metadata with setHeader, and returns the handler's context (with the
// Result) and the release of the call's leases (enforce.Result.Hold),
// which the caller must call when the call ends, or the status error of a
// denial.
func (m *method) decide(ctx context.Context, setHeader func(metadata.MD) error) (context.Context, func(), error) {
	var buf [4]string
	keys, err := m.keys(ctx, buf[:0])
	if err != nil {
		return ctx, nil, err
	}
	hits := m.gate.Hits(ctx, keys)
	for i, h := range hits {
		for _, lim := range m.Limits {
			if lim.Cost != nil && lim.Rule.Name == h.Rule.Name {
				hits[i].Cost = lim.Cost(ctx)
			}
		}
	}
	res, err := m.gate.Check(ctx, hits)
	if err != nil {
		// The call was canceled or ran out of time (Canceled,
		// DeadlineExceeded), or a hit the core refuses: the gate's rules
		// New checked and its keys fitKey bounds, so only a Limit's Cost
		// out of its rule's bounds makes one. That answers Unknown.
		return ctx, nil, status.FromContextError(err).Err()
	}
	if md := m.metadata(res); md != nil {
		// An error here means the headers went out already, or ctx is
		// not a server call's (go-grpc-middleware's client side):
		// nowhere to send them.
		_ = setHeader(md)
	}
	if !res.Allowed() {
		return ctx, nil, m.deny(res, hits)
	}
	return context.WithValue(ctx, resultKey{}, res), res.Hold(ctx), nil
}

// keys appends the key of each limit for the call to keys (the gate
// digests a key too long for the store). A KeyFunc that panics fails the
// call with codes.Internal, and the first panic of each limit is logged
// with its stack: gRPC recovers no panic, so one call that trips a key
// function's bug would otherwise stop the server for every client.
func (m *method) keys(ctx context.Context, keys []string) (_ []string, err error) {
	i := 0
	defer func() {
		if p := recover(); p != nil {
			if !m.panicked[i].Swap(true) {
				m.logger.LogAttrs(ctx, slog.LevelError, "floodgate: a rate-limit key function panicked; its calls fail with codes.Internal. Logged once per limit",
					slog.String("method", m.spec.Name), slog.String("policy", m.Limits[i].Rule.Name),
					slog.String("panic", fmt.Sprint(p)), slog.String("stack", string(debug.Stack())))
			}
			err = status.Error(codes.Internal, "the rate limit could not be checked: its key function failed")
		}
	}()
	for ; i < len(m.Limits); i++ {
		keys = append(keys, m.Limits[i].Key(ctx))
	}
	return keys, nil
}

// stream is a server stream whose context carries the Result.
type stream struct {
	grpc.ServerStream
	ctx context.Context
}

// Context returns the stream's context with the Result.
func (s *stream) Context() context.Context { return s.ctx }
