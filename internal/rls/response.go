package rls

import (
	"math"
	"slices"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/fields"
	"github.com/floodgate-rl/floodgate/internal/report"
	"github.com/floodgate-rl/floodgate/internal/rlmatch"
)

// verdict is one limit of a descriptor as decided.
type verdict struct {
	limit  *rlmatch.Limit
	rule   floodgate.Rule // the rule in force: an override's, if its key has one
	hit    int            // its hit in the plan
	dec    floodgate.Decision
	have   bool // dec is set
	shadow bool
}

func (v verdict) denied() bool { return v.have && !v.dec.Allowed }

// judge sets each descriptor's verdicts, once the plan is decided.
func (p *plan) judge() {
	p.vs = slices.Grow(p.vs[:0], len(p.refs))[:len(p.refs)]
	k := 0
	for i := range p.descs {
		d := &p.descs[i]
		d.vs = p.vs[k : k+len(d.refs) : k+len(d.refs)]
		k += len(d.refs)
		p.verdicts(d.refs, d.vs)
	}
}

// verdicts sets vs to the limits of refs as decided.
func (p *plan) verdicts(refs []ref, vs []verdict) {
	for k, r := range refs {
		v := verdict{limit: r.limit, rule: r.limit.Rule, hit: r.hit, shadow: r.limit.ShadowMode}
		if r.hit < len(p.each) {
			e := &p.each[r.hit]
			v.rule, v.dec, v.have = e.Hit.Rule, e.Decision, e.Decision.Policy != ""
		}
		vs[k] = v
	}
}

// answer is the memory of one response but its header values, allocated
// at once: the response, its first descriptor's status and figures, and
// its headers.
type answer struct {
	resp    rlsv3.RateLimitResponse
	statusP [1]*rlsv3.RateLimitResponse_DescriptorStatus
	status  [1]statusMem
	headerP [3]*corev3.HeaderValue
	headers [3]corev3.HeaderValue
}

// statusMem is the memory of one descriptor's status.
type statusMem struct {
	status rlsv3.RateLimitResponse_DescriptorStatus
	limit  rlsv3.RateLimitResponse_RateLimit
	reset  durationpb.Duration
}

// response builds the answer: one status per descriptor in the request's
// order, and the headers that hs asks for.
func (p *plan) response(hs Headers) *rlsv3.RateLimitResponse {
	a := new(answer)
	resp := &a.resp
	resp.OverallCode = rlsv3.RateLimitResponse_OK
	if p.over {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	var mem []statusMem
	resp.Statuses, mem = a.statusP[:], a.status[:]
	if len(p.descs) != 1 {
		resp.Statuses = make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(p.descs))
		mem = make([]statusMem, len(p.descs))
	}
	var sbuf [4]floodgate.Decision
	shown := sbuf[:0]
	for i := range p.descs {
		d := &p.descs[i]
		resp.Statuses[i] = p.status(&mem[i], d, d.vs)
		for _, v := range d.vs {
			if v.shadow || !v.have || p.shown[v.hit] {
				continue
			}
			p.shown[v.hit] = true
			shown = append(shown, v.dec) // the rule in force, under the limit's name
		}
	}
	add := a.headerP[:0]
	if hs.Draft {
		if len(shown) > 0 {
			policy, quota := report.Rules{}.Draft(shown)
			a.headers[0] = corev3.HeaderValue{Key: "RateLimit-Policy", Value: policy}
			a.headers[1] = corev3.HeaderValue{Key: "RateLimit", Value: quota}
			add = append(add, &a.headers[0], &a.headers[1])
		}
		retry := report.Retry(shown)
		if p.failClosed {
			retry = max(retry, p.failRetry)
		}
		if p.over && retry > 0 {
			a.headers[2] = corev3.HeaderValue{Key: "Retry-After", Value: fields.RetryAfter(retry)}
			add = append(add, &a.headers[2])
		}
	}
	if hs.Limit != "" {
		add = append(add, upstreamHeaders(hs, resp.Statuses)...)
	}
	if len(add) > 0 {
		resp.ResponseHeadersToAdd = add
	}
	return resp
}

// upstreamHeaders are the headers that envoyproxy/ratelimit adds under
// LIMIT_RESPONSE_HEADERS_ENABLED, from the statuses as it picks them: the
// last descriptor over its limit, else the one with the least remaining
// (the first of equals). None when no status has a current_limit.
func upstreamHeaders(hs Headers, sts []*rlsv3.RateLimitResponse_DescriptorStatus) []*corev3.HeaderValue {
	var pick *rlsv3.RateLimitResponse_DescriptorStatus
	for _, st := range sts {
		if st.CurrentLimit == nil {
			continue
		}
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT || pick == nil ||
			pick.Code != rlsv3.RateLimitResponse_OVER_LIMIT && st.LimitRemaining < pick.LimitRemaining {
			pick = st
		}
	}
	if pick == nil {
		return nil
	}
	return []*corev3.HeaderValue{
		{Key: hs.Limit, Value: strconv.FormatUint(uint64(pick.CurrentLimit.RequestsPerUnit), 10)},
		{Key: hs.Remaining, Value: strconv.FormatUint(uint64(pick.LimitRemaining), 10)},
		{Key: hs.Reset, Value: strconv.FormatInt(pick.DurationUntilReset.GetSeconds(), 10)},
	}
}

// status is descriptor d's status, in mem: OVER_LIMIT when one of its
// enforced limits denied (or its store failed closed), with the figures
// of its worst limit.
func (p *plan) status(mem *statusMem, d *desc, vs []verdict) *rlsv3.RateLimitResponse_DescriptorStatus {
	st := &mem.status
	st.Code = rlsv3.RateLimitResponse_OK
	if d.match.Outcome == rlmatch.Unlimited {
		// As envoyproxy/ratelimit answers it: no limit, and all of
		// limit_remaining's range left.
		st.LimitRemaining = math.MaxUint32
		return st
	}
	if len(vs) == 0 {
		return st
	}
	pick, failed := -1, false
	for k, v := range vs {
		if v.shadow {
			continue
		}
		closed := p.failClosed && p.hits[v.hit].Failure == enforce.FailClosed
		if v.denied() || closed {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		failed = failed || closed && !v.have
		if pick < 0 || better(v, vs[pick]) {
			pick = k
		}
	}
	if pick < 0 { // only shadow limits: report the worst, never over
		for k, v := range vs {
			if pick < 0 || better(v, vs[pick]) {
				pick = k
			}
		}
	}
	v := &vs[pick]
	switch {
	case v.have:
		st.CurrentLimit = setLimit(&mem.limit, v.limit, v.rule)
		st.LimitRemaining = report.Uint32(report.Remaining(v.dec))
		if v.limit.QuotaMode && v.denied() {
			break // past a quota: no reset, as envoyproxy/ratelimit answers it
		}
		// Whole seconds, rounded up, as envoyproxy/ratelimit answers
		// them: a fixed window's reset then reads the same on both.
		mem.reset = durationpb.Duration{Seconds: report.Reset(v.dec)}
		st.DurationUntilReset = &mem.reset
	case failed:
		// Denied because the store failed: nothing left until the
		// Retry-After, which duration_until_reset repeats in whole
		// seconds (Envoy's X-RateLimit-Reset reads its seconds).
		st.CurrentLimit = setLimit(&mem.limit, v.limit, v.rule)
		mem.reset = durationpb.Duration{Seconds: fields.RetrySeconds(p.failRetry)}
		st.DurationUntilReset = &mem.reset
	}
	// Else no limit was evaluated (the store failed and the request went
	// through): no current_limit, so that Envoy leaves the status out of
	// its x-ratelimit headers rather than read an exhausted quota.
	return st
}

// better reports whether a describes a descriptor better than b: a limit
// with figures over one without, then the worse decision.
func better(a, b verdict) bool {
	if a.have != b.have {
		return a.have
	}
	return a.have && a.dec.Worse(b.dec)
}

// units are the RLS units that a window can be written in, longest
// first; a window that is a whole number of one of them is that unit
// with a unit_multiplier.
var units = []struct {
	unit rlsv3.RateLimitResponse_RateLimit_Unit
	d    time.Duration
}{
	{rlsv3.RateLimitResponse_RateLimit_DAY, 24 * time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_HOUR, time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_MINUTE, time.Minute},
	{rlsv3.RateLimitResponse_RateLimit_SECOND, time.Second},
}

// setLimit sets cl to describe l for a status, under r, the rule in force
// (an override's limit and window, if its key has one): its unit as
// configured, or, for another window, the longest unit that divides the
// window, with unit_multiplier (90s is SECOND times 90, 2h is HOUR times
// 2), or UNKNOWN when no unit divides it (1500ms). It returns cl.
func setLimit(cl *rlsv3.RateLimitResponse_RateLimit, l *rlmatch.Limit, r floodgate.Rule) *rlsv3.RateLimitResponse_RateLimit {
	cl.Name, cl.RequestsPerUnit = l.Name, report.Uint32(r.Limit)
	if l.Unit != rlmatch.UnitUnknown && l.Unit.Window() == r.Window {
		cl.Unit = rlsv3.RateLimitResponse_RateLimit_Unit(l.Unit)
		return cl
	}
	w := r.Window
	for _, u := range units {
		if w >= u.d && w%u.d == 0 && w/u.d <= time.Duration(^uint32(0)) {
			cl.Unit = u.unit
			cl.UnitMultiplier = wrapperspb.UInt32(uint32(w / u.d))
			return cl
		}
	}
	return cl
}

// metadata is the response's dynamic_metadata as envoyproxy/ratelimit
// builds it under RESPONSE_DYNAMIC_METADATA (Options.DynamicMetadata).
func (p *plan) metadata(req *rlsv3.RateLimitRequest) *structpb.Struct {
	descs := make([]*structpb.Value, 0, len(req.GetDescriptors()))
	for _, d := range req.GetDescriptors() {
		entries := make([]*structpb.Value, len(d.GetEntries()))
		for i, e := range d.GetEntries() {
			entries[i] = structpb.NewStringValue(e.GetKey() + "=" + e.GetValue())
		}
		f := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
		if lo := d.GetLimit(); lo != nil {
			f["limit"] = structpb.NewStringValue(lo.String())
		}
		if ha := d.GetHitsAddend(); ha != nil {
			f["hitsAddend"] = structpb.NewNumberValue(float64(ha.GetValue()))
		}
		descs = append(descs, structpb.NewStructValue(&structpb.Struct{Fields: f}))
	}
	fields := map[string]*structpb.Value{
		"domain":      structpb.NewStringValue(req.GetDomain()),
		"descriptors": structpb.NewListValue(&structpb.ListValue{Values: descs}),
	}
	if ha := req.GetHitsAddend(); ha != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(ha))
	}
	var violations []*structpb.Value
	enabled := false
	for i, d := range p.descs {
		over := false
		for _, v := range d.vs {
			enabled = enabled || v.limit.QuotaMode
			over = over || v.limit.QuotaMode && v.denied()
		}
		if over {
			violations = append(violations, structpb.NewNumberValue(float64(i)))
		}
	}
	if len(violations) > 0 {
		fields["quotaModeViolations"] = structpb.NewListValue(&structpb.ListValue{Values: violations})
	}
	fields["quotaModeEnabled"] = structpb.NewBoolValue(enabled)
	return &structpb.Struct{Fields: fields}
}
