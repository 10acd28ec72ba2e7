package rlqs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/rlconfig"
)

// faultyLedger fails every Grant while down is set (a store outage),
// after waiting for its context when hang is set too (a frozen store).
type faultyLedger struct {
	Ledger
	down, hang atomic.Bool
}

func (f *faultyLedger) Grant(ctx context.Context, req GrantRequest) (Grant, error) {
	if f.down.Load() {
		if f.hang.Load() {
			<-ctx.Done()
		}
		return Grant{}, fmt.Errorf("faulty: %w", floodgate.ErrStoreUnavailable)
	}
	return f.Ledger.Grant(ctx, req)
}

// TestFrozenStoreManyBuckets: with a store that hangs, a stream of 200
// buckets gets every bucket's failure-mode assignment before the shares
// expire: a round waits for the store once, not once per bucket.
func TestFrozenStoreManyBuckets(t *testing.T) {
	const ttl, refresh, n = 600 * time.Millisecond, 100 * time.Millisecond, 200
	yaml := "domain: edge\ndescriptors:\n  - key: user\n    failure_mode: closed\n    rate_limit: {unit: second, requests_per_unit: 100}\n"
	fl := &faultyLedger{Ledger: NewMemLedger(nil)}
	fl.hang.Store(true)
	cc := startRLQS(t, yaml, Options{Ledger: fl, TTL: ttl, Refresh: refresh, Grace: 50 * time.Millisecond, StoreTimeout: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, ch := openStream(t, ctx, cc)
	var us []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage
	for i := range n {
		us = append(us, usage(map[string]string{"user": fmt.Sprint(i)}, 1, 0, 0))
	}
	if err := st.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: us}); err != nil {
		t.Fatal(err)
	}
	expiry := func(r received) time.Time {
		return r.at.Add(r.a.GetQuotaAssignmentAction().GetAssignmentTimeToLive().AsDuration())
	}
	shared := map[string]time.Time{} // when each bucket's share expires at the client
	for r := range ch {
		if tokensOf(r.a) > 0 {
			shared[r.a.GetBucketId().GetBucket()["user"]] = expiry(r)
		}
		if len(shared) == n {
			break
		}
	}
	fl.down.Store(true)
	denied := map[string]time.Duration{} // how long before its share's expiry each DENY_ALL came
	timeout := time.After(3 * ttl)
	for len(denied) < n {
		select {
		case r := <-ch:
			u := r.a.GetBucketId().GetBucket()["user"]
			if r.a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL {
				if _, ok := denied[u]; !ok {
					denied[u] = shared[u].Sub(r.at)
				}
			} else if tokensOf(r.a) > 0 {
				shared[u] = expiry(r)
			}
		case <-timeout:
			t.Fatalf("%d of %d buckets got their failure mode's assignment within %v", len(denied), n, 3*ttl)
		}
	}
	for u, left := range denied {
		if left <= 0 {
			t.Errorf("user %s: DENY_ALL %v after its share expired", u, -left)
		}
	}
}

// startRLQS serves yaml's configuration with opts on a loopback listener
// and returns a client connection.
func startRLQS(t *testing.T, yaml string, opts Options) *grpc.ClientConn {
	t.Helper()
	cfg, err := rlconfig.Parse(map[string][]byte{"edge.yaml": []byte(yaml)}, rlconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opts.Config = func() *rlconfig.Config { return cfg }
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, srv)
}

// serve serves srv on a loopback listener until t ends and returns a
// client connection to it.
func serve(t *testing.T, srv *Server) *grpc.ClientConn {
	t.Helper()
	gs := grpc.NewServer()
	srv.Register(gs)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func usage(bucket map[string]string, allowed, denied uint64, elapsed time.Duration) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	return &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqsv3.BucketId{Bucket: bucket},
		NumRequestsAllowed: allowed, NumRequestsDenied: denied, TimeElapsed: durationpb.New(elapsed)}
}

// received is one action and when it arrived.
type received struct {
	a  *rlqsv3.RateLimitQuotaResponse_BucketAction
	at time.Time
}

// openStream opens a stream and returns a channel of the actions received.
func openStream(t *testing.T, ctx context.Context, cc *grpc.ClientConn) (rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient, <-chan received) {
	t.Helper()
	st, err := rlqsv3.NewRateLimitQuotaServiceClient(cc).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan received, 1024)
	go func() {
		defer close(ch)
		for {
			resp, err := st.Recv()
			if err != nil {
				return
			}
			for _, a := range resp.GetBucketAction() {
				ch <- received{a, time.Now()}
			}
		}
	}()
	return st, ch
}

// tokensOf returns an action's tokens per fill, or -1 when it is not a
// token bucket.
func tokensOf(a *rlqsv3.RateLimitQuotaResponse_BucketAction) int64 {
	tb := a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
	if tb == nil {
		return -1
	}
	return int64(tb.GetTokensPerFill().GetValue())
}

// TestStoreOutageFailureModes: while the ledger fails, the assignment in
// force is kept until shortly before its TTL runs out, and then the
// limit's failure_mode decides what is assigned: closed deny-all, open
// allow-all (each with a TTL), local the whole limit as this replica's
// only stream of the bucket, error nothing. Once the ledger answers, the
// share comes back.
func TestStoreOutageFailureModes(t *testing.T) {
	const ttl, refresh, storeTimeout = 600 * time.Millisecond, 100 * time.Millisecond, 50 * time.Millisecond
	api := map[string]string{"route": "api"}
	for _, mode := range []string{"closed", "open", "local", "error"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			yaml := "domain: edge\ndescriptors:\n  - key: route\n    value: api\n    failure_mode: " + mode + "\n    rate_limit: {unit: second, requests_per_unit: 100}\n"
			fl := &faultyLedger{Ledger: NewMemLedger(nil)}
			reg := prometheus.NewRegistry()
			cc := startRLQS(t, yaml, Options{Ledger: fl, TTL: ttl, Refresh: refresh, Grace: 50 * time.Millisecond, StoreTimeout: storeTimeout, Registerer: reg})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			st, ch := openStream(t, ctx, cc)
			// A measured demand of 10/s: a share of 10 (footprint 14).
			if err := st.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(api, 1, 0, 0)}}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
			if err := st.Send(&rlqsv3.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(api, 10, 0, time.Second)}}); err != nil {
				t.Fatal(err)
			}
			var last received
			for r := range ch {
				if tokensOf(r.a) == 10 {
					last = r
					break
				}
			}
			fl.down.Store(true)
			downAt := time.Now()
			var kept int
			var got *received
			deadline := time.After(ttl + 4*refresh)
		wait:
			for {
				select {
				case r := <-ch:
					if tokensOf(r.a) == 10 && r.at.Before(downAt.Add(refresh)) {
						last = r // sent as the ledger went down
						continue
					}
					if tokensOf(r.a) == 10 {
						kept++
						continue
					}
					got = &r
					break wait
				case <-deadline:
					break wait
				}
			}
			if kept > 0 {
				t.Errorf("a share was renewed %d times while the ledger failed", kept)
			}
			if mode == "error" {
				if got != nil {
					t.Fatalf("failure_mode error must send nothing and leave Envoy's expired_assignment_behavior to decide, got %v", got.a)
				}
			} else {
				if got == nil {
					t.Fatalf("no assignment of failure_mode %s before the share's TTL ran out", mode)
				}
				// Kept until shortly before its TTL: not replaced while more than
				// two ledger calls and two and a half rounds of it were left, and
				// before it expired.
				if left := ttl - got.at.Sub(last.at); left > 2*storeTimeout+2*refresh+refresh/2 || left <= 0 {
					t.Errorf("the failure mode's assignment came %v after the share, %v before its TTL ran out; want within 2 ledger calls and 2.5 rounds of it", got.at.Sub(last.at), left)
				}
				qa := got.a.GetQuotaAssignmentAction()
				switch want := map[string]typev3.RateLimitStrategy_BlanketRule{"closed": typev3.RateLimitStrategy_DENY_ALL, "open": typev3.RateLimitStrategy_ALLOW_ALL}; mode {
				case "closed", "open":
					if qa.GetRateLimitStrategy().GetBlanketRule() != want[mode] || qa.GetAssignmentTimeToLive().AsDuration() != ttl {
						t.Errorf("%s: %v, want %v for %v", mode, qa, want[mode], ttl)
					}
				case "local":
					// The whole limit of 100 for this replica's one stream: a share of 96.
					if n := tokensOf(got.a); n != 96 || qa.GetAssignmentTimeToLive().AsDuration() != ttl {
						t.Errorf("local: %v, want 96 tokens per second for %v", qa, ttl)
					}
				}
			}
			if n := testutil.ToFloat64(prometheusCounter(t, reg, "floodgate_rlqs_store_errors_total")); n < 1 {
				t.Errorf("store errors counted %v, want at least 1", n)
			}
			fl.down.Store(false)
			for r := range ch {
				if tokensOf(r.a) == 10 {
					return // the share is back
				}
			}
			t.Error("the stream ended before the share came back")
		})
	}
}

// prometheusCounter returns the collector of name from reg.
func prometheusCounter(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			v := mf.GetMetric()[0].GetCounter().GetValue()
			c := prometheus.NewCounter(prometheus.CounterOpts{Name: name})
			c.Add(v)
			return c
		}
	}
	t.Fatalf("no metric %s", name)
	return nil
}

// TestHostileStream: a stream that reports thousands of buckets and
// absurd counts is bounded (1,024 buckets tracked, the rest refused and
// counted; a demand claims the limit at most), and another stream of the
// same bucket still gets its max-min fair share.
func TestHostileStream(t *testing.T) {
	const capacity = 100
	yaml := fmt.Sprintf("domain: edge\ndescriptors:\n  - key: route\n    value: api\n    rate_limit: {unit: second, requests_per_unit: %d}\n", capacity)
	reg := prometheus.NewRegistry()
	ml := NewMemLedger(nil)
	cc := startRLQS(t, yaml, Options{Ledger: ml, TTL: 300 * time.Millisecond, Refresh: 100 * time.Millisecond, Grace: 100 * time.Millisecond, Registerer: reg})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	api := map[string]string{"route": "api"}

	hostile, hch := openStream(t, ctx, cc)
	var flood []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage
	flood = append(flood, usage(api, 1<<62, 1<<62, time.Nanosecond))
	for i := range 3000 {
		flood = append(flood, usage(map[string]string{"route": "api", "n": fmt.Sprint(i)}, 1, 0, time.Second))
	}
	if err := hostile.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: flood}); err != nil {
		t.Fatal(err)
	}
	// A report of absurd counts after the first: demand past the limit.
	time.Sleep(50 * time.Millisecond)
	if err := hostile.Send(&rlqsv3.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(api, 1<<62, 1<<62, time.Nanosecond)}}); err != nil {
		t.Fatal(err)
	}
	go func() {
		for range hch {
		}
	}()

	normal, nch := openStream(t, ctx, cc)
	send := func(allowed uint64, elapsed time.Duration, domain string) {
		if err := normal.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: domain, BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(api, allowed, 0, elapsed)}}); err != nil {
			t.Fatal(err)
		}
	}
	send(1, 0, "edge")
	time.Sleep(50 * time.Millisecond)
	send(0, 0, "")
	// A demand of 30/s: footprint 34, under the fair level of 50.
	stop := time.Now().Add(3 * time.Second)
	got := int64(-1)
	for time.Now().Before(stop) && got != 30 {
		send(30, time.Second, "")
		timer := time.After(150 * time.Millisecond)
	read:
		for {
			select {
			case r := <-nch:
				if n := tokensOf(r.a); n >= 0 {
					got = n
				}
			case <-timer:
				break read
			}
		}
	}
	if got != 30 {
		t.Errorf("the normal stream's share is %d, want its demand of 30 (max-min fair beside a hostile claim of the whole limit)", got)
	}
	held := ml.Held(ledgerBucketOf(t, yaml))
	if held > capacity {
		t.Errorf("the ledger holds %d of %d", held, capacity)
	}
	refused := testutil.ToFloat64(prometheusCounter(t, reg, "floodgate_rlqs_buckets_refused_total"))
	if refused != 3001-maxBuckets {
		t.Errorf("refused %v buckets, want %d (3,001 reported, %d tracked)", refused, 3001-maxBuckets, maxBuckets)
	}
}

// ledgerBucketOf returns the ledger bucket of {route: api} in yaml.
func ledgerBucketOf(t *testing.T, yaml string) string {
	t.Helper()
	cfg, err := rlconfig.Parse(map[string][]byte{"edge.yaml": []byte(yaml)}, rlconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, es := bucketKey(map[string]string{"route": "api"})
	lim, m := pick(rlmatchConfig(cfg).Match("edge", es))
	if lim == nil {
		t.Fatal(errors.New("no limit"))
	}
	return ledgerBucket(lim, m.Key)
}

// TestAbandonWhenUnconfigured: a bucket whose limit a reload removes gets
// an abandon_action at the next round, once; a bucket never configured
// gets allow-all without TTL.
func TestAbandonWhenUnconfigured(t *testing.T) {
	parse := func(y string) *rlconfig.Config {
		c, err := rlconfig.Parse(map[string][]byte{"edge.yaml": []byte(y)}, rlconfig.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	with := parse("domain: edge\ndescriptors:\n  - key: route\n    value: api\n    rate_limit: {unit: second, requests_per_unit: 100}\n")
	without := parse("domain: edge\ndescriptors:\n  - key: route\n    value: other\n    rate_limit: {unit: second, requests_per_unit: 100}\n")
	var cur atomic.Pointer[rlconfig.Config]
	cur.Store(with)
	srv, err := New(Options{Config: cur.Load, Ledger: NewMemLedger(nil), TTL: 300 * time.Millisecond, Refresh: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	srv.Register(gs)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	defer gs.Stop()
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, ch := openStream(t, ctx, cc)
	if err := st.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		usage(map[string]string{"route": "api"}, 1, 0, 0), usage(map[string]string{"route": "never"}, 1, 0, 0)}}); err != nil {
		t.Fatal(err)
	}
	var sawShare, sawAllow bool
	for r := range ch {
		switch r.a.GetBucketId().GetBucket()["route"] {
		case "api":
			sawShare = sawShare || tokensOf(r.a) > 0
		case "never":
			qa := r.a.GetQuotaAssignmentAction()
			if qa.GetRateLimitStrategy().GetBlanketRule() != typev3.RateLimitStrategy_ALLOW_ALL || qa.GetAssignmentTimeToLive() != nil {
				t.Errorf("an unconfigured bucket: %v, want ALLOW_ALL without TTL", r.a)
			}
			if sawAllow {
				t.Error("an unconfigured bucket's ALLOW_ALL was sent twice")
			}
			sawAllow = true
		}
		if sawShare && sawAllow {
			break
		}
	}
	cur.Store(without)
	abandons := 0
	timeout := time.After(500 * time.Millisecond)
loop:
	for {
		select {
		case r := <-ch:
			if r.a.GetBucketId().GetBucket()["route"] != "api" {
				t.Errorf("after the reload: %v", r.a)
				continue
			}
			if r.a.GetAbandonAction() != nil {
				abandons++
			} else {
				t.Errorf("after the reload removed its limit: %v, want an abandon_action", r.a)
			}
		case <-timeout:
			break loop
		}
	}
	if abandons != 1 {
		t.Errorf("%d abandon_actions, want 1", abandons)
	}
}

// TestClientThatNeverReads: a client that sends reports and never reads
// its assignments is disconnected once a Send has waited the grace
// period, and counted; another stream on the same server is served all
// along.
func TestClientThatNeverReads(t *testing.T) {
	yaml := "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 100}\n"
	reg := prometheus.NewRegistry()
	cc := startRLQS(t, yaml, Options{Ledger: NewMemLedger(nil), TTL: 300 * time.Millisecond, Refresh: 20 * time.Millisecond, Grace: 100 * time.Millisecond, Registerer: reg})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hostile, err := rlqsv3.NewRateLimitQuotaServiceClient(cc).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var us []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage
	for i := range maxBuckets {
		us = append(us, usage(map[string]string{"user": fmt.Sprintf("u%04d-%s", i, "padding-to-make-each-action-longer")}, 1, 0, time.Second))
	}
	if err := hostile.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: us}); err != nil {
		t.Fatal(err)
	}
	normal, nch := openStream(t, ctx, cc)
	if err := normal.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(map[string]string{"user": "alice"}, 1, 0, 0)}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	var served int
	for time.Now().Before(deadline) {
		select {
		case r, ok := <-nch:
			if !ok {
				t.Fatal("the normal stream ended")
			}
			if tokensOf(r.a) > 0 {
				served++
			}
		case <-time.After(time.Second):
			t.Fatal("the normal stream got no assignment for 1s")
		}
		if testutil.ToFloat64(prometheusCounter(t, reg, "floodgate_rlqs_slow_clients_total")) == 1 {
			break
		}
	}
	if n := testutil.ToFloat64(prometheusCounter(t, reg, "floodgate_rlqs_slow_clients_total")); n != 1 {
		t.Fatalf("slow clients counted %v, want 1: the client that never reads was not disconnected", n)
	}
	if served == 0 {
		t.Error("the normal stream was not served while the other one was stuck")
	}
	// The hostile stream was ended by the server.
	if _, err := hostile.Recv(); err == nil {
		for {
			if _, err = hostile.Recv(); err != nil {
				break
			}
		}
	}
}
