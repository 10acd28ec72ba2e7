package rls

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/rlconfig"
)

// ShouldRateLimit decides one request: every descriptor's limits are
// checked together and recorded only if every one is within its limit.
// It answers InvalidArgument for a request it cannot decide (see the
// package documentation), Unavailable when the store failed and a
// descriptor's failure_mode is error, and the context's code when ctx
// ends first.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp, err := s.shouldRateLimit(ctx, req)
	code := "ok"
	switch {
	case err != nil:
		code = toSnake(status.Code(err).String())
	case resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT:
		code = "over_limit"
	}
	s.metrics.requests.WithLabelValues(code).Inc()
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
	entries, err := requestEntries(req)
	if err != nil {
		return nil, err
	}
	ms := s.Config().MatchAll(req.GetDomain(), entries)
	if ms[0].Outcome == rlconfig.UnknownDomain {
		s.metrics.unknownDomain.Inc()
		return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: okStatuses(len(ms))}, nil
	}
	p, err := newPlan(req, entries, ms)
	if err != nil {
		return nil, err
	}
	g, err := s.gate(req.GetDomain())
	if err != nil {
		return nil, status.Errorf(codes.Internal, "rls: %v", err)
	}
	if err := p.decide(ctx, g, s.enf.Limiter()); err != nil {
		return nil, err
	}
	p.count(s.metrics, req.GetDomain())
	return p.response(), nil
}

// requestEntries checks the request's shape and returns its descriptors'
// entries.
func requestEntries(req *rlsv3.RateLimitRequest) ([][]rlconfig.Entry, error) {
	switch {
	case req.GetDomain() == "":
		return nil, invalid("domain is empty")
	case len(req.GetDescriptors()) == 0:
		return nil, invalid("no descriptors")
	case len(req.GetDescriptors()) > MaxDescriptors:
		return nil, invalid("%d descriptors, at most %d allowed", len(req.GetDescriptors()), MaxDescriptors)
	}
	out := make([][]rlconfig.Entry, len(req.GetDescriptors()))
	for i, d := range req.GetDescriptors() {
		switch {
		case len(d.GetEntries()) == 0:
			return nil, invalid("descriptor %d has no entries", i)
		case len(d.GetEntries()) > MaxEntries:
			return nil, invalid("descriptor %d has %d entries, at most %d allowed", i, len(d.GetEntries()), MaxEntries)
		case d.GetIsNegativeHits():
			return nil, invalid("descriptor %d: is_negative_hits is not supported", i)
		}
		es := make([]rlconfig.Entry, len(d.GetEntries()))
		for j, e := range d.GetEntries() {
			if e.GetKey() == "" {
				return nil, invalid("descriptor %d, entry %d: key is empty", i, j)
			}
			es[j] = rlconfig.Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
		out[i] = es
	}
	return out, nil
}

func okStatuses(n int) []*rlsv3.RateLimitResponse_DescriptorStatus {
	st := make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)
	for i := range st {
		st[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	}
	return st
}

// plan is one request, matched: its descriptors, the distinct hits they
// make, and, once decided, each hit's decision.
type plan struct {
	descs []desc
	hits  []planned

	over       bool          // the answer is OVER_LIMIT
	failClosed bool          // over because the store failed and a descriptor's failure_mode is closed
	failRetry  time.Duration // that failure's wait, for Retry-After
}

// desc is one descriptor of the request.
type desc struct {
	match rlconfig.Match
	cost  int64 // its hits_addend; 0 with peek
	peek  bool
	refs  []ref // one per limit of the match, in order
}

// ref is one limit of a descriptor and the hit that counts it; hit is -1
// for a blocked limit (requests_per_unit 0), which is never counted.
type ref struct {
	limit *rlconfig.Limit
	hit   int
}

// planned is one distinct hit: descriptors that make the same hit (the
// same rule and key) share it, their costs summed.
type planned struct {
	hit  enforce.Hit
	peek bool
	mode rlconfig.FailureMode
	dec  floodgate.Decision
	have bool // dec is set
}

// newPlan builds the hits of a request's matched descriptors, refusing
// a cost that no limit could admit.
func newPlan(req *rlsv3.RateLimitRequest, entries [][]rlconfig.Entry, ms []rlconfig.Match) (*plan, error) {
	base := int64(max(req.GetHitsAddend(), 1))
	p := &plan{descs: make([]desc, len(ms))}
	index := map[hitID]int{}
	for i, m := range ms {
		if lo := req.GetDescriptors()[i].GetLimit(); lo != nil {
			var err error
			if m, err = override(req.GetDomain(), entries[i], lo, m); err != nil {
				return nil, err
			}
		}
		d := desc{match: m, cost: base}
		if ha := req.GetDescriptors()[i].GetHitsAddend(); ha != nil {
			if ha.GetValue() > math.MaxInt64 {
				return nil, invalid("descriptor %d: hits_addend %d is too large", i, ha.GetValue())
			}
			d.cost = int64(ha.GetValue())
			d.peek = d.cost == 0
		}
		if m.Outcome == rlconfig.Limited && len(m.Key) > floodgate.MaxKeyLen {
			return nil, invalid("descriptor %d: its values are %d bytes long, at most %d allowed", i, len(m.Key), floodgate.MaxKeyLen)
		}
		for _, l := range m.Limits {
			if m.Outcome != rlconfig.Limited {
				break
			}
			r := ref{limit: l, hit: -1}
			if !l.Blocked() {
				id := hitID{rule: l.Rule.Name, key: m.Key, peek: d.peek}
				j, ok := index[id]
				if !ok {
					j = len(p.hits)
					index[id] = j
					p.hits = append(p.hits, planned{
						hit:  enforce.Hit{Hit: floodgate.Hit{Rule: l.Rule, Key: m.Key}, Shadow: l.ShadowMode, Failure: enforceMode(m.FailureMode, l.ShadowMode)},
						peek: d.peek,
						mode: m.FailureMode,
					})
				}
				h := &p.hits[j].hit
				if h.Cost > math.MaxInt64-d.cost {
					return nil, invalid("descriptor %d: hits_addend %d is too large", i, d.cost)
				}
				h.Cost += d.cost
				r.hit = j
			}
			d.refs = append(d.refs, r)
		}
		p.descs[i] = d
	}
	var errs []error
	for _, h := range p.hits {
		c := max(h.hit.Cost, 1) // a peek asks about one more hit
		switch r := h.hit.Rule; {
		case c > r.Capacity():
			errs = append(errs, fmt.Errorf("hits_addend %d exceeds the capacity %d of limit %s", c, r.Capacity(), r.Name))
		case r.Algorithm == floodgate.SlidingWindow && c > floodgate.MaxSlidingCost:
			errs = append(errs, fmt.Errorf("hits_addend %d is above %d, the most a sliding_window limit (%s) takes at once", c, floodgate.MaxSlidingCost, r.Name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, invalid("%v", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	return p, nil
}

type hitID struct {
	rule, key string
	peek      bool
}

// enforceMode maps a descriptor's failure_mode onto the Enforcer's. error
// becomes closed there, and the plan turns a closed failure into a gRPC
// error where no descriptor asked for closed (see decide). A shadow limit
// never denies, so it fails open.
func enforceMode(m rlconfig.FailureMode, shadow bool) enforce.FailureMode {
	switch {
	case shadow:
		return enforce.FailOpen
	case m == rlconfig.FailOpen:
		return enforce.FailOpen
	case m == rlconfig.FailLocal:
		return enforce.FailLocal
	default:
		return enforce.FailClosed
	}
}
