package rlqs

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// envoy plays Envoy's rate_limit_quota filter for one bucket: it sends a
// report at a bucket's first request and every interval, applies its
// no_assignment and expired_assignment behaviours (deny all, as
// docs/SERVICE.md configures them), and enforces each token-bucket
// assignment locally, as Envoy does: tokens refilled continuously at
// tokens_per_fill per fill_interval up to max_tokens, a new (different)
// assignment starting full, an identical one keeping its tokens and
// renewing its TTL.
type envoy struct {
	domain   string
	bucket   map[string]string
	interval time.Duration
	rate     atomic.Int64       // demand, requests per second
	admit    func(at time.Time) // called for each request admitted
	offer    func(at time.Time) // called for each request made

	mu       sync.Mutex
	strategy *typev3.RateLimitStrategy // nil: no assignment
	expiry   time.Time                 // zero: none
	tokens   float64
	refilled time.Time
	allowed  uint64 // since the last report
	denied   uint64
	seen     bool // the bucket exists (a request came)

	admitted atomic.Int64 // in total
}

// allow decides one request at now.
func (e *envoy) allow(now time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	ok := e.decide(now)
	if e.offer != nil {
		e.offer(now)
	}
	if ok {
		e.allowed++
		e.admitted.Add(1)
		if e.admit != nil {
			e.admit(now)
		}
	} else {
		e.denied++
	}
	return ok
}

func (e *envoy) decide(now time.Time) bool {
	if e.strategy == nil {
		return false // no_assignment_behavior: deny all
	}
	if !e.expiry.IsZero() && !now.Before(e.expiry) {
		return false // expired_assignment_behavior: fallback deny all
	}
	switch s := e.strategy.GetStrategy().(type) {
	case *typev3.RateLimitStrategy_BlanketRule_:
		return s.BlanketRule == typev3.RateLimitStrategy_ALLOW_ALL
	case *typev3.RateLimitStrategy_TokenBucket:
		tb := s.TokenBucket
		per := float64(1)
		if tb.GetTokensPerFill() != nil {
			per = float64(tb.GetTokensPerFill().GetValue())
		}
		rate := per / tb.GetFillInterval().AsDuration().Seconds()
		e.tokens = min(float64(tb.GetMaxTokens()), e.tokens+now.Sub(e.refilled).Seconds()*rate)
		e.refilled = now
		if e.tokens >= 1 {
			e.tokens--
			return true
		}
		return false
	}
	return true
}

// apply applies one bucket action received at now.
func (e *envoy) apply(a *rlqsv3.RateLimitQuotaResponse_BucketAction, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if a.GetAbandonAction() != nil {
		e.strategy, e.expiry = nil, time.Time{}
		return
	}
	qa := a.GetQuotaAssignmentAction()
	if !proto.Equal(qa.GetRateLimitStrategy(), e.strategy) {
		e.strategy = qa.GetRateLimitStrategy()
		e.tokens, e.refilled = float64(qa.GetRateLimitStrategy().GetTokenBucket().GetMaxTokens()), now
	}
	e.expiry = time.Time{}
	if ttl := qa.GetAssignmentTimeToLive(); ttl != nil {
		e.expiry = now.Add(ttl.AsDuration())
	}
}

// usage returns the report of the counts since the last one.
func (e *envoy) usage(elapsed time.Duration) *rlqsv3.RateLimitQuotaUsageReports {
	e.mu.Lock()
	defer e.mu.Unlock()
	u := &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqsv3.BucketId{Bucket: e.bucket},
		TimeElapsed: durationpb.New(elapsed), NumRequestsAllowed: e.allowed, NumRequestsDenied: e.denied}
	e.allowed, e.denied = 0, 0
	return &rlqsv3.RateLimitQuotaUsageReports{Domain: e.domain, BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{u}}
}

// run streams to conn and makes requests at e.rate, evenly spaced, until
// ctx ends; then it closes the stream (the Envoy leaves).
func (e *envoy) run(ctx context.Context, conn *grpc.ClientConn) error {
	sctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(sctx)
	if err != nil {
		return err
	}
	var sendMu sync.Mutex
	send := func(r *rlqsv3.RateLimitQuotaUsageReports) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return st.Send(r)
	}
	recvDone := make(chan error, 1)
	go func() {
		for {
			resp, err := st.Recv()
			if err != nil {
				recvDone <- err
				return
			}
			now := time.Now()
			for _, a := range resp.GetBucketAction() {
				e.apply(a, now)
			}
		}
	}()
	step := 2 * time.Millisecond
	tick := time.NewTicker(step)
	defer tick.Stop()
	last, lastReport := time.Now(), time.Now()
	var owed float64
	for {
		select {
		case <-ctx.Done():
			_ = st.CloseSend()
			cancel()
			return nil
		case err := <-recvDone:
			if err == io.EOF {
				return nil
			}
			return err
		case now := <-tick.C:
			// A stall of this process (a loaded machine) loses the requests
			// it could not make, past 20ms of them, rather than sending them
			// in one burst: the clients gave up.
			rate := float64(e.rate.Load())
			owed = min(owed+now.Sub(last).Seconds()*rate, max(2, rate/50))
			last = now
			for ; owed >= 1; owed-- {
				e.allow(now)
				e.mu.Lock()
				first := !e.seen
				e.seen = true
				e.mu.Unlock()
				if first { // Envoy reports a new bucket at once
					if err := send(e.usage(0)); err != nil {
						return err
					}
					lastReport = now
				}
			}
			if now.Sub(lastReport) >= e.interval {
				if err := send(e.usage(now.Sub(lastReport))); err != nil {
					return err
				}
				lastReport = now
			}
		}
	}
}
