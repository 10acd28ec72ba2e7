// Package grpclimit is a pair of gRPC server interceptors that rate-limit
// calls with a [floodgate.Limiter], answer denials with the standard
// status details, and keep serving by a per-method policy when the store
// fails. It is a thin adapter over package enforce, which httplimit uses
// too: the same failure modes, shadow mode, throttling, metrics and logs.
//
// Build one [Interceptors] per server with [New], from the process's
// enforce.Enforcer and the limits of each method, then install its
// interceptors after authentication:
//
//	e, err := enforce.New(enforce.Options{Limiter: limiter, Registerer: prometheus.DefaultRegisterer, Logger: logger})
//	...
//	defer e.Close()
//	gl, err := grpclimit.New(grpclimit.Options{
//		Enforcer: e,
//		Methods: map[string]grpclimit.Method{
//			"/bank.v1.Pix/Transfer": {Failure: enforce.FailClosed, Limits: []grpclimit.Limit{
//				{Rule: perIP, Key: grpclimit.ClientIP(resolver)},
//				{Rule: pixRule, Key: grpclimit.Principal},
//			}},
//			"/grpc.health.v1.Health/Check": {}, // not limited
//		},
//		Default: grpclimit.Method{Limits: []grpclimit.Limit{{Rule: perIP, Key: grpclimit.ClientIP(resolver)}}},
//	})
//	...
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(auth, gl.UnaryServerInterceptor()),
//		grpc.ChainStreamInterceptor(authStream, gl.StreamServerInterceptor()),
//	)
//	pb.RegisterPixServer(srv, pix)
//	if err := gl.CheckMethods(srv.GetServiceInfo()); err != nil { // a misspelled method limits nothing
//		log.Fatal(err)
//	}
//
// Each method, and the Default for all the others, is one enforce gate,
// named in the metrics and logs by the full method name (the Default by
// "default"). The stream interceptor limits stream opens: a stream is
// one call, however many messages it carries.
//
// # Keys
//
// Each [Limit] pairs a rule with a [KeyFunc], which reads the call's
// context: [ClientIP] (the peer's address, or behind trusted proxies the
// client's from the x-forwarded-for metadata, through package clientip),
// [Metadata] (an API key, a tenant), [Principal] (set by an authentication
// interceptor with [WithPrincipal]), or combinations with [Join] and
// [First]. Any func(context.Context) string is a KeyFunc: the accessor of
// an authentication library that already stores the user in the context
// plugs in as it is, with no WithPrincipal at all:
//
//	{Rule: pixRule, Key: func(ctx context.Context) string { return auth.UserID(ctx) }}
//
// A KeyFunc returns "" when the call has no such key. That limit then
// skips the call, counted and logged (enforce.Gate.Hits), since a
// per-user limit installed before authentication would otherwise limit
// nobody, unnoticed. The limits of a
// method are checked together, all-or-nothing, and the worst is reported.
// Live limits (rlconfig.Rules reloads envoy-format YAML) and per-key
// overrides are the floodgate.Limiter's (floodgate.Options.Overrides):
// every call is decided, and reported, under the rule in force for its key.
//
// # Answers
//
// Every call that a limiter decided sends, as response header metadata,
// the fields of draft-ietf-httpapi-ratelimit-headers-11 (their figures
// are those package httplimit's "Response fields" describes), one list
// member per limit checked, in the method's order:
//
//	ratelimit-policy: "ip";q=100;w=60, "pix";q=10;w=60
//	ratelimit: "ip";r=93;t=60, "pix";r=7;t=42
//
// A denied call gets codes.ResourceExhausted with two details: a
// errdetails.RetryInfo whose RetryDelay is the exact time until the call
// would be allowed, and a errdetails.QuotaFailure with one violation per
// violated policy (Subject and QuotaId the policy's name, QuotaValue its
// limit, Description "10 requests per 60 s"). Its message says the same:
//
//	quota exceeded: 10 requests per 60 s (pix); retry after 42 s
//
// An opaque method ([Method.Opaque]) sends no rate-limit metadata and no
// QuotaFailure, and answers every denial alike, whichever limit refused
// it, with its longest window as the RetryDelay.
//
// # Failures of the store
//
// Every decision has the time budget of the floodgate.Limiter. A store
// that fails or does not answer in time is handled by the method's
// failure mode (enforce.FailLocal, the default, decides with per-replica
// in-memory limits; enforce.FailOpen lets the call through;
// enforce.FailClosed refuses it with codes.Unavailable and a RetryInfo of
// 5s, or the circuit breaker's remaining open time
// if longer). Degraded decisions are counted and logged in aggregate by
// the Enforcer. A client that cancels or runs out of time while the store
// is slow gets codes.Canceled or codes.DeadlineExceeded, and nothing is
// counted.
//
// # The handler
//
// The handler of an allowed call finds the enforce.Result with
// [FromContext] (a stream handler, in its stream's context), and may undo
// the call's hits with Result.Refund: the account's login attempt once the
// password proved right.
//
// # go-grpc-middleware
//
// An [Interceptors] is also a ratelimit.Limiter of go-grpc-middleware
// v2's interceptors/ratelimit ([Interceptors.Limit]), for servers already
// built on it, with the losses its doc lists: prefer the interceptors of this
// package.
package grpclimit
