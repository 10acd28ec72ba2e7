package rls

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/rlmatch"
)

// ShouldRateLimit decides one request: every descriptor's limits are
// checked together and recorded only if every one is within its limit.
// It answers InvalidArgument for a request it cannot decide (see the
// package documentation), Unavailable when the store failed and a
// descriptor's failure_mode is error, ResourceExhausted for a large
// request that the server's codec did not get to decode in time (see
// [Server.GRPCServerOptions]), and the context's code when ctx ends
// first.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp, err := s.shouldRateLimit(ctx, req)
	switch {
	case err != nil:
		s.metrics.requests.WithLabelValues(toSnake(status.Code(err).String())).Inc()
		if s.metrics.up != nil {
			s.metrics.up.CallError(status.Code(err) == codes.Unavailable)
		}
	case resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT:
		s.metrics.overall.Inc()
	default:
		s.metrics.ok.Inc()
	}
	return resp, err
}

// toSnake turns a gRPC code name ("InvalidArgument") into a metric label
// ("invalid_argument").
func toSnake(s string) string {
	var b strings.Builder
	for i, c := range s {
		if c >= 'A' && c <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			c += 'a' - 'A'
		}
		b.WriteRune(c)
	}
	return b.String()
}

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, "rls: "+format, args...)
}

func (s *Server) shouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if err := refusal(req); err != nil {
		return nil, err // refused by the codec (budgetCodec)
	}
	p := s.plans.Get().(*plan)
	defer s.release(p)
	entries, size, err := p.requestEntries(req)
	if err != nil {
		return nil, err
	}
	var shed bool
	if size >= largeRequest {
		n := s.large.Add(int64(size))
		defer s.large.Add(-int64(size))
		shed = n > maxLargeInFlight
	}
	cfg := (*rlmatch.Config)(s.Config()) // read once: no request sees half of a reload
	ms := cfg.MatchAll(req.GetDomain(), entries)
	if ms[0].Outcome == rlmatch.UnknownDomain {
		s.metrics.unknownDomain.Inc()
		if s.metrics.up != nil {
			s.metrics.up.DomainNotFound(req.GetDomain())
		}
		return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: okStatuses(len(ms))}, nil
	}
	over, set := cfg.CountsOverLimit(req.GetDomain())
	if !set {
		over = s.over
	}
	if err := p.build(req, entries, ms, s.shadow, s.quota, over); err != nil {
		return nil, err
	}
	g, err := s.gate(req.GetDomain())
	if err != nil {
		return nil, status.Errorf(codes.Internal, "rls: %v", err)
	}
	opts := []enforce.Option{enforce.DenyOversize()}
	if shed {
		s.metrics.shed.Inc()
		opts = append(opts, enforce.Unavailable(ErrShed))
	}
	var res enforce.Result // no hits: nothing to decide, within the limits
	if len(p.hits) > 0 {
		res, err = g.Check(ctx, p.hits, opts...)
	}
	err = p.settle(res, err)
	if err != nil {
		if status.Code(err) == codes.Unavailable {
			// The error failure mode decided: its hits reached their
			// limits, and count as every other failure mode's (the
			// package doc's Metrics).
			p.judge()
			p.count(s.metrics, req.GetDomain(), s.near)
		}
		return nil, err
	}
	p.judge()
	p.count(s.metrics, req.GetDomain(), s.near)
	resp := p.response(s.headers)
	if s.metadata {
		resp.DynamicMetadata = p.metadata(req)
	}
	return resp, nil
}

// release returns p to the Server's pool, holding nothing of its request:
// a large request's strings are not kept alive by a plan waiting for the
// next one. A plan that grew past maxPooledEntries entries or hits is
// dropped.
func (s *Server) release(p *plan) {
	if cap(p.entries) > maxPooledEntries || cap(p.hits) > maxPooledEntries {
		return
	}
	p.reset()
	s.plans.Put(p)
}

// maxPooledEntries bounds the entries and hits a pooled plan keeps room
// for: Envoy's requests have a few; a plan grown past that by a large
// request goes to the garbage collector.
const maxPooledEntries = 64

// modes returns m with its limits as the Server's shadow and quota
// settings make them. A limit in quota mode (its quota_mode, or
// Options.QuotaMode) is in shadow mode too: it never denies, and its
// QuotaMode marks it for the metrics and the metadata. Shadow mode wins:
// a limit in both (or every limit under Options.ShadowMode) is in shadow
// mode alone, as envoyproxy/ratelimit answers it. The configuration's
// limits are shared, so a changed one is copied; m is returned as it is
// when nothing changes.
func modes(m rlmatch.Match, shadow, quota bool) rlmatch.Match {
	var ls []*rlmatch.Limit
	for j, l := range m.Limits {
		q := (l.QuotaMode || quota) && !l.ShadowMode && !shadow
		sh := l.ShadowMode || shadow || q
		if sh == l.ShadowMode && q == l.QuotaMode {
			continue
		}
		if ls == nil {
			ls = slices.Clone(m.Limits)
		}
		c := *l
		c.ShadowMode, c.QuotaMode = sh, q
		ls[j] = &c
	}
	if ls != nil {
		m.Limits = ls
	}
	return m
}

// requestEntries checks the request's shape and returns its descriptors'
// entries, and their size in bytes of keys and values. They are p's,
// valid until p is reset.
func (p *plan) requestEntries(req *rlsv3.RateLimitRequest) ([][]rlmatch.Entry, int, error) {
	switch {
	case req.GetDomain() == "":
		return nil, 0, invalid("domain is empty")
	case len(req.GetDescriptors()) == 0:
		return nil, 0, invalid("no descriptors")
	case len(req.GetDescriptors()) > maxDescriptors:
		return nil, 0, invalid("%d descriptors, at most %d allowed", len(req.GetDescriptors()), maxDescriptors)
	}
	n := 0
	for i, d := range req.GetDescriptors() {
		switch {
		case len(d.GetEntries()) == 0:
			return nil, 0, invalid("descriptor %d has no entries", i)
		case len(d.GetEntries()) > maxEntries:
			return nil, 0, invalid("descriptor %d has %d entries, at most %d allowed", i, len(d.GetEntries()), maxEntries)
		case d.GetIsNegativeHits():
			return nil, 0, invalid("descriptor %d: is_negative_hits is not supported", i)
		}
		n += len(d.GetEntries())
	}
	// One array for every entry; each descriptor's is a slice of it. Both
	// are p's from the start, so that reset clears what a request refused
	// half-way wrote.
	p.entries = slices.Grow(p.entries[:0], n)[:n]
	p.descEntries = slices.Grow(p.descEntries[:0], len(req.GetDescriptors()))
	size, k := 0, 0
	for i, d := range req.GetDescriptors() {
		es := p.entries[k : k+len(d.GetEntries()) : k+len(d.GetEntries())]
		for j, e := range d.GetEntries() {
			if e.GetKey() == "" {
				return nil, 0, invalid("descriptor %d, entry %d: key is empty", i, j)
			}
			es[j] = rlmatch.Entry{Key: e.GetKey(), Value: e.GetValue()}
			size += len(e.GetKey()) + len(e.GetValue())
		}
		k += len(es)
		p.descEntries = append(p.descEntries, es)
	}
	return p.descEntries, size, nil
}

func okStatuses(n int) []*rlsv3.RateLimitResponse_DescriptorStatus {
	st := make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)
	for i := range st {
		st[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	}
	return st
}

// plan is one request, matched: its descriptors, the distinct hits they
// make, and, once decided, each hit's decision. A Server keeps plans in a
// pool: one request's working memory serves the next (see reset).
type plan struct {
	descs []desc
	// hits are the distinct hits: descriptors that make the same hit (the
	// same rule and key) share it, their costs summed. Once decided, each
	// has enforce's verdict: the rule in force for its key (an
	// override's), which its status reports, and its decision.
	hits  []enforce.Hit
	each  []enforce.Verdict
	shown []bool // by hit: the response's headers have its figures

	over       bool          // the answer is OVER_LIMIT
	failClosed bool          // over because the store failed and a descriptor's failure_mode is closed
	failRetry  time.Duration // that failure's wait, for Retry-After

	// Room reused from request to request: the backing arrays of the
	// request's entries, and of every descriptor's refs and verdicts.
	entries     []rlmatch.Entry
	descEntries [][]rlmatch.Entry
	refs        []ref
	vs          []verdict
	index       map[hitID]int // the hits by identity, for a request of many
}

// reset empties p for another request, keeping its arrays and dropping
// every reference into the last one.
func (p *plan) reset() {
	clear(p.entries)
	clear(p.descEntries)
	clear(p.descs)
	clear(p.hits)
	clear(p.refs)
	clear(p.vs)
	clear(p.shown)
	*p = plan{descs: p.descs[:0], hits: p.hits[:0], entries: p.entries[:0], descEntries: p.descEntries[:0],
		refs: p.refs[:0], vs: p.vs[:0], shown: p.shown[:0]}
}

// desc is one descriptor of the request.
type desc struct {
	match rlmatch.Match
	cost  int64 // its hits_addend; 0 with peek
	peek  bool
	refs  []ref     // one per limit of the match, in order
	vs    []verdict // its limits as decided (plan.judge)
}

// ref is one limit of a descriptor and the hit that counts it (a blocked
// limit's, requests_per_unit 0, too: enforce denies it).
type ref struct {
	limit *rlmatch.Limit
	hit   int
}

// linearHits is the number of hits up to which build finds a hit among
// those before it by a scan rather than a map.
const linearHits = 8

// find returns the index of the hit id, or -1.
func (p *plan) find(id hitID) int {
	if p.index != nil {
		if j, ok := p.index[id]; ok {
			return j
		}
		return -1
	}
	for j := range p.hits {
		if h := &p.hits[j]; h.Peek == id.peek && h.Key == id.key && h.Rule == id.rule {
			return j
		}
	}
	return -1
}

// build builds the hits of a request's matched descriptors; with
// shadow, every limit (a limit override's too) is in shadow mode, and
// with quota in quota mode (see modes). With countOver, the hits count
// even past their limits (Options.CountOverLimit): Overdraw hits, and
// peeks that a key at its limit exactly passes. A cost that the rule in
// force could never admit, or a blocked limit, is over it, as upstream
// answers, and not an error (Envoy lets a request through on an error by
// default, and a hits_addend may come from the request): enforce denies
// it without asking the store (enforce.DenyOversize).
func (p *plan) build(req *rlsv3.RateLimitRequest, entries [][]rlmatch.Entry, ms []rlmatch.Match, shadow, quota, countOver bool) error {
	base := int64(max(req.GetHitsAddend(), 1))
	p.descs = slices.Grow(p.descs[:0], len(ms))[:len(ms)]
	for i, m := range ms {
		if lo := req.GetDescriptors()[i].GetLimit(); lo != nil {
			var err error
			if m, err = override(req.GetDomain(), entries[i], lo, m); err != nil {
				return err
			}
		}
		m = modes(m, shadow, quota)
		d := desc{match: m, cost: base}
		if ha := req.GetDescriptors()[i].GetHitsAddend(); ha != nil {
			// Beyond int64, it is beyond every capacity all the same.
			d.cost = int64(min(ha.GetValue(), math.MaxInt64))
			d.peek = d.cost == 0
		}
		start := len(p.refs)
		for _, l := range m.Limits {
			if m.Outcome != rlmatch.Limited {
				break
			}
			// Distinct rules never share a hit: two per-request
			// overrides of one descriptor count apart.
			id := hitID{rule: l.Rule, key: m.Key, peek: d.peek}
			j := p.find(id)
			if j < 0 {
				j = len(p.hits)
				mode := m.FailureMode
				if l.ShadowMode {
					mode = enforce.FailOpen // a shadow limit never denies
				}
				p.hits = append(p.hits, enforce.Hit{Hit: floodgate.Hit{Rule: l.Rule, Key: m.Key, Overdraw: countOver},
					Shadow: l.ShadowMode, Policy: l.Label, Failure: mode, Peek: d.peek})
				p.shown = append(p.shown, false)
				switch {
				case p.index != nil:
					p.index[id] = j
				case len(p.hits) > linearHits:
					p.index = make(map[hitID]int, 2*len(p.hits))
					for k := range p.hits {
						h := &p.hits[k]
						p.index[hitID{rule: h.Rule, key: h.Key, peek: h.Peek}] = k
					}
				}
			}
			h := &p.hits[j]
			h.Cost += min(d.cost, math.MaxInt64-h.Cost) // at most MaxInt64: beyond every capacity
			r := ref{limit: l, hit: j}
			p.refs = append(p.refs, r)
		}
		d.refs = p.refs[start:len(p.refs):len(p.refs)]
		p.descs[i] = d
	}
	// p.refs may have moved as it grew: each descriptor's refs are a
	// slice of its final array.
	k := 0
	for i := range p.descs {
		n := len(p.descs[i].refs)
		p.descs[i].refs = p.refs[k : k+n : k+n]
		k += n
	}
	return nil
}

type hitID struct {
	rule floodgate.Rule
	key  string
	peek bool
}

// settle takes the gate's verdict on the plan's hits: each hit's, and
// whether the request is over the limit. The store's failure answers as
// the gate's outcome says: over the limit (failed closed), Unavailable
// (the error failure_mode: Envoy decides), or within (failed open).
func (p *plan) settle(res enforce.Result, err error) error {
	switch {
	case errors.Is(err, floodgate.ErrInvalidHit) || errors.Is(err, floodgate.ErrInvalidRule):
		return status.Errorf(codes.InvalidArgument, "rls: %v", err)
	case err != nil:
		return status.FromContextError(err).Err()
	}
	p.each = res.Each
	switch res.Outcome {
	case enforce.Errored:
		// No store error text: it may name keys.
		return status.Error(codes.Unavailable, "rls: the rate-limit store cannot decide")
	case enforce.FailedClosed:
		p.failClosed, p.failRetry = true, res.FailRetryAfter()
	}
	p.over = !res.Allowed()
	return nil
}
