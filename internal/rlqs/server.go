package rlqs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/rlmatch"
	"github.com/floodgate-rl/floodgate/rlconfig"
)

// ErrInvalidOptions is wrapped by the errors of [New].
var ErrInvalidOptions = errors.New("rlqs: invalid options")

// Bounds on one stream.
const (
	// maxBuckets bounds the buckets one stream tracks; the reports of
	// more are ignored (counted in floodgate_rlqs_buckets_refused_total),
	// and Envoy applies its no_assignment_behavior to them.
	maxBuckets = 1024
	// maxBucketEntries bounds the entries of one bucket id.
	maxBucketEntries = 64
	// maxBucketBytes bounds the bytes of one bucket id's keys and values,
	// so that a stream's buckets hold at most 4 MiB.
	maxBucketBytes = 4 << 10
	// maxCount bounds a report's counts: more is absurd, and is read as
	// this.
	maxCount = 1 << 40
)

// Options configures a [Server]. Config and Ledger are required.
type Options struct {
	// Config returns the configuration in force, read once per round of
	// a stream: rls.Server.Config, so that RLS and RLQS follow the same
	// files or xDS server.
	Config func() *rlconfig.Config
	// Ledger records the shares: a [RedisLedger] for a fleet, a
	// [MemLedger] for one replica.
	Ledger Ledger
	// TTL is each assignment's assignment_time_to_live. Zero means 1s.
	// A share moves from one Envoy to another within about TTL+Grace
	// plus one Refresh.
	TTL time.Duration
	// Refresh is how often a stream's assignments are renewed, besides
	// every report. Zero means TTL/3.
	Refresh time.Duration
	// Grace bounds the time an assignment takes to reach Envoy once sent:
	// a grant counts in the ledger until TTL+Grace after it, and a
	// stream whose Send takes longer is ended. Zero means 250ms.
	Grace time.Duration
	// StoreTimeout bounds one ledger call. Zero means 100ms.
	StoreTimeout time.Duration
	// Registerer receives the metrics; nil registers none.
	Registerer prometheus.Registerer
	// Logger receives the service's logs; nil discards them.
	Logger *slog.Logger
}

// Server is the RLQS service: it implements
// rlqsv3.RateLimitQuotaServiceServer. Its methods are safe for
// concurrent use.
type Server struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer

	cfg                               func() *rlconfig.Config
	ledger                            Ledger
	ttl, refresh, grace, storeTimeout time.Duration
	logger                            *slog.Logger
	m                                 *metrics
	replica                           string
	seq                               atomic.Int64

	closing   chan struct{} // closed by Close: the streams end
	closeOnce sync.Once

	mu        sync.Mutex
	local     map[string]int // guarded by mu: this replica's holders of each limited bucket, for failure_mode local
	loggedErr time.Time      // guarded by mu: when a ledger error was last logged
	quiet     int            // guarded by mu: the ledger errors not logged since
}

// logStoreError logs a ledger error, at most once per 10s with the count
// of those not logged, so that an outage does not write a line per
// bucket and round.
func (s *Server) logStoreError(err error, mode enforce.FailureMode) {
	s.mu.Lock()
	now := time.Now()
	if now.Sub(s.loggedErr) < 10*time.Second {
		s.quiet++
		s.mu.Unlock()
		return
	}
	n := s.quiet
	s.loggedErr, s.quiet = now, 0
	s.mu.Unlock()
	s.logger.Warn("rlqs: the ledger cannot grant; the assignments in force stay until their TTL, then the limits' failure modes decide",
		"err", err, "failure_mode", mode.String(), "suppressed", n)
}

// New returns a Server for opts.
func New(opts Options) (*Server, error) {
	var errs []error
	if opts.Config == nil {
		errs = append(errs, fmt.Errorf("%w: Config is required", ErrInvalidOptions))
	}
	if opts.Ledger == nil {
		errs = append(errs, fmt.Errorf("%w: Ledger is required", ErrInvalidOptions))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"TTL", opts.TTL}, {"Refresh", opts.Refresh}, {"Grace", opts.Grace}, {"StoreTimeout", opts.StoreTimeout}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%w: %s %v is negative", ErrInvalidOptions, d.name, d.v))
		}
	}
	ttl := cmpDur(opts.TTL, time.Second)
	if opts.Refresh >= ttl {
		errs = append(errs, fmt.Errorf("%w: Refresh %v is not below TTL %v", ErrInvalidOptions, opts.Refresh, ttl))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	return &Server{cfg: opts.Config, ledger: opts.Ledger, ttl: ttl, refresh: cmpDur(opts.Refresh, ttl/3),
		grace: cmpDur(opts.Grace, 250*time.Millisecond), storeTimeout: cmpDur(opts.StoreTimeout, 100*time.Millisecond),
		logger: logger, m: m, replica: hex.EncodeToString(id[:]), local: map[string]int{}, closing: make(chan struct{})}, nil
}

// Close ends every stream with Unavailable, and every stream opened after
// it at once: a stream never ends by itself, and grpc.Server.GracefulStop
// waits for every stream. Envoy keeps its assignments until their TTL and
// opens a stream to another replica. Call it before stopping the gRPC
// server gracefully. Close is idempotent.
func (s *Server) Close() error {
	s.closeOnce.Do(func() { close(s.closing) })
	return nil
}

func cmpDur(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// Register registers the service on g.
func (s *Server) Register(g *grpc.Server) { rlqsv3.RegisterRateLimitQuotaServiceServer(g, s) }

// bucket is one bucket of one stream.
type bucket struct {
	id      *rlqsv3.BucketId
	entries []rlmatch.Entry // the bucket id's, sorted by key
	demand  int64           // units per window, from the last report; -1 before any
	last    time.Time       // the last report's arrival
	dirty   bool            // reported since the last round
	key     string          // its key in the stream's buckets
	gone    bool            // abandoned: dropped from the stream, as Envoy drops it

	// What is in force at Envoy, as last sent.
	kind        kind
	share       int64         // footprint of a share in force (kind share)
	sent        time.Time     // when the assignment in force was sent
	ttl         time.Duration // its TTL
	provisional bool          // a share claimed before any measured report, renewed every Refresh/4
	expires     bool          // the assignment in force has a TTL
	ledger      string        // the ledger bucket of the share, "" when none
	limit       string        // the limit's label, for the metrics
}

type kind uint8

const (
	none kind = iota
	allowAll
	denyAll
	share
	failed // an assignment of the failure mode
)

// stream is one StreamRateLimitQuotas call.
type stream struct {
	holder string
	domain string

	mu      sync.Mutex
	buckets map[string]*bucket // guarded by mu
	wake    chan struct{}
	hungry  atomic.Bool // a bucket got less than its fair share in the last round
	warned  bool        // guarded by mu: the stream's refused buckets were logged
}

// StreamRateLimitQuotas serves one Envoy's stream: it reads the usage
// reports, and answers with assignments at each report and every Refresh.
func (s *Server) StreamRateLimitQuotas(gs rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	st := &stream{holder: fmt.Sprintf("%s/%d", s.replica, s.seq.Add(1)), buckets: map[string]*bucket{}, wake: make(chan struct{}, 1)}
	s.m.streams.Inc()
	defer s.m.streams.Dec()
	recvErr := make(chan error, 1)
	go func() { recvErr <- s.receive(gs, st) }()
	defer s.leave(st)
	tick := time.NewTicker(s.refresh)
	defer tick.Stop()
	soon := time.NewTimer(0)
	<-soon.C
	for {
		all := false
		if st.hungry.Swap(false) {
			soon.Reset(s.refresh / 4)
		}
		select {
		case <-soon.C:
		case <-s.closing:
			return status.Error(codes.Unavailable, "rlqs: the server is shutting down")
		case <-gs.Context().Done():
			return status.FromContextError(gs.Context().Err()).Err()
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-st.wake:
		case <-tick.C:
			all = true
		}
		resp := s.round(gs.Context(), st, all)
		if len(resp.GetBucketAction()) == 0 {
			continue
		}
		if err := s.send(gs, resp); err != nil {
			return err
		}
	}
}

// send sends resp within Grace, or ends the stream: a client that does
// not read cannot hold assignments that would arrive late.
func (s *Server) send(gs rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer, resp *rlqsv3.RateLimitQuotaResponse) error {
	done := make(chan error, 1)
	go func() { done <- gs.Send(resp) }()
	t := time.NewTimer(s.grace)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		s.m.slowClients.Inc()
		s.logger.Warn("rlqs: a client did not read its assignments within the grace period; its stream is ended", "grace", s.grace)
		return status.Errorf(codes.ResourceExhausted, "rlqs: the client did not read its assignments within %v", s.grace)
	}
}

// receive reads the stream's reports until it ends.
func (s *Server) receive(gs rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer, st *stream) error {
	for {
		r, err := gs.Recv()
		if err != nil {
			return err
		}
		if err := s.report(st, r); err != nil {
			return err
		}
		select {
		case st.wake <- struct{}{}:
		default:
		}
	}
}

// report records one message of reports.
func (s *Server) report(st *stream, r *rlqsv3.RateLimitQuotaUsageReports) error {
	now := time.Now()
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.domain == "" {
		if r.GetDomain() == "" {
			return status.Error(codes.InvalidArgument, "rlqs: the first report has no domain")
		}
		st.domain = r.GetDomain()
	}
	cfg := (*rlmatch.Config)(s.cfg())
	for _, u := range r.GetBucketQuotaUsages() {
		m := u.GetBucketId().GetBucket()
		if len(m) == 0 || len(m) > maxBucketEntries || bucketBytes(m) > maxBucketBytes {
			s.m.refused.Inc()
			continue
		}
		key, entries := bucketKey(m)
		b := st.buckets[key]
		if b == nil {
			if len(st.buckets) >= maxBuckets {
				s.m.refused.Inc()
				if !st.warned {
					st.warned = true
					s.logger.Warn("rlqs: a stream reports more buckets than it may have; the others get no assignment (Envoy's no_assignment_behavior)",
						"domain", st.domain, "max_buckets", maxBuckets)
				}
				continue
			}
			b = &bucket{id: &rlqsv3.BucketId{Bucket: maps(m)}, entries: entries, demand: -1, key: key}
			st.buckets[key] = b
		}
		allowed, denied := min(u.GetNumRequestsAllowed(), maxCount), min(u.GetNumRequestsDenied(), maxCount)
		elapsed := u.GetTimeElapsed().AsDuration()
		if !b.last.IsZero() && (elapsed < time.Millisecond || elapsed > time.Hour) {
			elapsed = now.Sub(b.last)
		}
		lim, _ := pick(cfg.Match(st.domain, entries))
		if lim != nil && elapsed >= time.Millisecond {
			w := float64(lim.Rule.Window)
			d := float64(allowed+denied) * w / float64(elapsed)
			b.demand = int64(math.Min(math.Ceil(d), float64(lim.Rule.Limit)))
		}
		if lim != nil {
			s.m.reported(lim.Label, allowed, denied)
		}
		b.last, b.dirty = now, true
	}
	return nil
}

func bucketBytes(m map[string]string) int {
	n := 0
	for k, v := range m {
		n += len(k) + len(v)
	}
	return n
}

func maps(m map[string]string) map[string]string {
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// bucketKey returns a bucket id's entries, sorted by key, and a key
// naming them.
func bucketKey(m map[string]string) (string, []rlmatch.Entry) {
	es := make([]rlmatch.Entry, 0, len(m))
	for k, v := range m {
		es = append(es, rlmatch.Entry{Key: k, Value: v})
	}
	slices.SortFunc(es, func(a, b rlmatch.Entry) int { return strings.Compare(a.Key, b.Key) })
	var sb strings.Builder
	for _, e := range es {
		fmt.Fprintf(&sb, "%d:%s%d:%s", len(e.Key), e.Key, len(e.Value), e.Value)
	}
	return sb.String(), es
}

// pick returns the limit a matched bucket is assigned by: of its limits
// that may deny, the one of the lowest rate; nil when none applies (no
// limit, an unknown domain, unlimited, every limit in shadow mode). A
// limit of 0 is returned as it is: it denies all.
func pick(m rlmatch.Match) (*rlmatch.Limit, rlmatch.Match) {
	if m.Outcome != rlmatch.Limited {
		return nil, m
	}
	var best *rlmatch.Limit
	for _, l := range m.Limits {
		if l.Unlimited || l.ShadowMode || l.QuotaMode {
			continue
		}
		if best == nil || rate(l) < rate(best) {
			best = l
		}
	}
	return best, m
}

func rate(l *rlmatch.Limit) float64 {
	if l.Rule.Window <= 0 {
		return 0
	}
	return float64(l.Rule.Limit) / l.Rule.Window.Seconds()
}

// round decides the stream's buckets that reported (every one when all)
// and returns the actions to send.
func (s *Server) round(ctx context.Context, st *stream, all bool) *rlqsv3.RateLimitQuotaResponse {
	cfg := (*rlmatch.Config)(s.cfg()) // read once: no round sees half of a reload
	st.mu.Lock()
	var due []*bucket
	for _, b := range st.buckets {
		if all || b.dirty {
			b.dirty = false
			due = append(due, b)
		}
	}
	domain := st.domain
	st.mu.Unlock()
	resp := &rlqsv3.RateLimitQuotaResponse{}
	now := time.Now()
	r := &roundState{ctx: ctx, st: st, cfg: cfg, domain: domain, now: now}
	for _, b := range due {
		st.mu.Lock()
		demand := b.demand
		st.mu.Unlock()
		if a := s.decide(r, b, demand); a != nil {
			resp.BucketAction = append(resp.BucketAction, a)
		}
		if b.gone {
			st.mu.Lock()
			if st.buckets[b.key] == b {
				delete(st.buckets, b.key)
			}
			st.mu.Unlock()
		}
	}
	return resp
}

// roundState is what the buckets of one round share.
type roundState struct {
	ctx    context.Context
	st     *stream
	cfg    *rlmatch.Config
	domain string
	now    time.Time
	down   bool // a ledger call of this round failed: the others are not tried
}

// decide returns the action for one bucket, or nil when what is in force
// stays.
func (s *Server) decide(r *roundState, b *bucket, demand int64) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	st, now := r.st, r.now
	m := r.cfg.Match(r.domain, b.entries)
	lim, m := pick(m)
	switch {
	case lim == nil && m.Outcome != rlmatch.Unlimited && m.Outcome != rlmatch.Limited && b.kind != none && b.kind != allowAll:
		// Configured once, no longer: Envoy drops the bucket and goes
		// back to its no_assignment_behavior.
		s.setLedger(st, b, "")
		b.kind, b.gone = none, true
		s.m.assigned.WithLabelValues("abandon").Inc()
		return &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: b.id,
			BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}}}
	case lim == nil:
		s.setLedger(st, b, "")
		return s.blanket(b, allowAll, typev3.RateLimitStrategy_ALLOW_ALL, false, now)
	case lim.Blocked():
		s.setLedger(st, b, "")
		b.limit = lim.Label
		return s.blanket(b, denyAll, typev3.RateLimitStrategy_DENY_ALL, false, now)
	}
	b.limit = lim.Label
	lb := ledgerBucket(lim, m.Key)
	s.setLedger(st, b, lb)
	capacity := lim.Rule.Limit
	// Before its first measured report a holder claims an equal split
	// (the Ledger's negative Demand), for a provisionalTTL: its share is
	// renewed, or freed, within about one Refresh once its demand is
	// known.
	claim, ttl := int64(-1), s.provisionalTTL()
	if demand < 0 {
		// Renewed every Refresh/4, well within its TTL.
		st.mu.Lock()
		b.dirty = true
		st.mu.Unlock()
		st.hungry.Store(true)
	} else {
		ttl = s.ttl
		claim = min(footprint(demand), capacity) // denied requests count in the demand: no headroom needed
	}
	keep := int64(0)
	if b.kind == share {
		keep = b.share
	}
	if r.down {
		// A store that just failed is not waited for again, bucket
		// after bucket: a round of 1,024 buckets costs one StoreTimeout.
		return s.failed(b, lim, m.FailureMode, lb, now)
	}
	cctx, cancel := context.WithTimeout(r.ctx, s.storeTimeout)
	g, err := s.ledger.Grant(cctx, GrantRequest{Bucket: lb, Holder: st.holder, Capacity: capacity, Demand: claim,
		Keep: keep, Hysteresis: 2 + keep/50, TTL: ttl + s.grace})
	cancel()
	if err != nil {
		r.down = true
		s.m.storeErrors.Inc()
		s.logStoreError(err, m.FailureMode)
		return s.failed(b, lim, m.FailureMode, lb, now)
	}
	s.m.assigned.WithLabelValues("share").Inc()
	if g.Share < g.Fair {
		// Short of its fair share while others' older grants expire:
		// asked again soon rather than at the next Refresh.
		st.mu.Lock()
		b.dirty = true
		st.mu.Unlock()
		st.hungry.Store(true)
	}
	if g.Share == b.share && b.kind == share && ttl == b.ttl && now.Sub(b.sent) < s.refresh/2 {
		return nil // the same, sent since the last Refresh: Envoy keeps its bucket
	}
	b.kind, b.share, b.sent, b.expires, b.ttl, b.provisional = share, g.Share, now, true, ttl, demand < 0
	return s.tokens(b, g.Share, lim.Rule.Window, ttl)
}

// failed returns the action of the failure mode when the ledger cannot
// grant: nothing while the assignment in force lasts past the next
// round, then what the limit's failure_mode says.
func (s *Server) failed(b *bucket, lim *rlmatch.Limit, mode enforce.FailureMode, lb string, now time.Time) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	next := s.refresh // the next round of this bucket
	if b.provisional {
		next = s.refresh / 4
	}
	// Kept while the next round, its failed ledger call included, still
	// comes before the assignment expires, with half a round to spare.
	if b.kind != none && b.expires && now.Add(2*s.storeTimeout+next+next/2).Before(b.sent.Add(b.ttl)) {
		return nil
	}
	s.m.assigned.WithLabelValues("failure_" + mode.String()).Inc()
	switch mode {
	case enforce.FailClosed:
		return s.blanket(b, failed, typev3.RateLimitStrategy_DENY_ALL, true, now)
	case enforce.FailOpen:
		return s.blanket(b, failed, typev3.RateLimitStrategy_ALLOW_ALL, true, now)
	case enforce.FailLocal:
		s.mu.Lock()
		n := max(1, s.local[lb])
		s.mu.Unlock()
		b.kind, b.share, b.sent, b.expires, b.ttl, b.provisional = failed, 0, now, true, s.ttl, false
		return s.tokens(b, lim.Rule.Limit/int64(n), lim.Rule.Window, s.ttl)
	default: // FailError: Envoy's expired_assignment_behavior decides
		b.kind = none
		return nil
	}
}

// provisionalTTL is the TTL of a share claimed before any measured
// report: one Refresh, and two ledger calls' time so that a failed one
// still replaces it in time. It is renewed every Refresh/4.
func (s *Server) provisionalTTL() time.Duration { return s.refresh + 2*s.storeTimeout }

// blanket returns a blanket rule, or nil when it is what is in force
// without a TTL.
func (s *Server) blanket(b *bucket, k kind, rule typev3.RateLimitStrategy_BlanketRule, ttl bool, now time.Time) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	if b.kind == k && !ttl && !b.expires {
		return nil
	}
	b.kind, b.share, b.sent, b.expires, b.ttl, b.provisional = k, 0, now, ttl, s.ttl, false
	s.m.assigned.WithLabelValues(strings.ToLower(rule.String())).Inc()
	qa := &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
		RateLimitStrategy: &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule}}}
	if ttl {
		qa.AssignmentTimeToLive = durationpb.New(s.ttl)
	}
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: b.id,
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{QuotaAssignmentAction: qa}}
}

// burst is the max_tokens of a share of s units per window: 2% of it,
// at least 2 (a bucket of one token denies half of evenly spaced
// requests at exactly its rate, by the jitter of their arrivals).
func burst(s int64) int64 { return max(2, (s+49)/50) }

// footprint is what a share of s units per window can admit in any
// window: s, its bucket's tokens at the start, and a fresh bucket's at a
// change of assignment (Envoy starts each new token bucket full).
func footprint(s int64) int64 { return s + 2*burst(s) }

// shareOf is the largest share whose footprint is at most f; 0 when
// f < 5.
func shareOf(f int64) int64 {
	s := max(0, f*50/52)
	for s > 0 && footprint(s) > f {
		s--
	}
	for footprint(s+1) <= f {
		s++
	}
	if f < footprint(1) {
		return 0
	}
	return s
}

// tokens returns a token-bucket assignment of footprint f per window w,
// or a deny-all one when f leaves no share.
func (s *Server) tokens(b *bucket, f int64, w, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	qa := &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{AssignmentTimeToLive: durationpb.New(ttl)}
	sh := shareOf(f)
	if sh == 0 {
		qa.RateLimitStrategy = &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
	} else {
		// Envoy refills tokens_per_fill/fill_interval continuously; both
		// fit 32 bits by scaling the interval down.
		per, fill := sh, w
		if k := (per + math.MaxUint32 - 1) / math.MaxUint32; k > 1 {
			per, fill = per/k, w/time.Duration(k)
		}
		qa.RateLimitStrategy = &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
			MaxTokens: uint32(min(burst(sh), math.MaxUint32)), TokensPerFill: wrapperspb.UInt32(uint32(per)), FillInterval: durationpb.New(fill)}}}
	}
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: b.id,
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{QuotaAssignmentAction: qa}}
}

// ledgerBucket names a limit's bucket in the ledger: its rule (name and
// window: a changed window starts afresh, as every floodgate state) and
// the matched key.
func ledgerBucket(l *rlmatch.Limit, key string) string {
	return l.Rule.Name + "\x00" + l.Rule.Window.String() + "\x00" + key
}

// setLedger moves b to ledger bucket lb, counting this replica's holders
// of each bucket.
func (s *Server) setLedger(st *stream, b *bucket, lb string) {
	if b.ledger == lb {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.ledger != "" {
		if s.local[b.ledger]--; s.local[b.ledger] <= 0 {
			delete(s.local, b.ledger)
		}
	}
	if lb != "" {
		s.local[lb]++
	}
	b.ledger = lb
}

// leave withdraws an ended stream's demands: its grants count until they
// expire, and the other holders' fair shares no longer include it.
func (s *Server) leave(st *stream) {
	st.mu.Lock()
	var bs []*bucket
	for _, b := range st.buckets {
		bs = append(bs, b)
	}
	st.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), s.storeTimeout)
	defer cancel()
	for _, b := range bs {
		if b.ledger != "" {
			_, _ = s.ledger.Grant(ctx, GrantRequest{Bucket: b.ledger, Holder: st.holder, Capacity: 0, TTL: s.ttl + s.grace})
		}
		s.setLedger(st, b, "")
	}
}
