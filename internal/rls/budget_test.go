package rls_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate-rl/floodgate/internal/rls"
	"github.com/floodgate-rl/floodgate/memstore"
)

const budgetConfig = `
domain: budget
descriptors:
  - key: v
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1000}
`

// largeReq is a request of 5 descriptors of 4 KB values: 20 KiB.
func largeReq() *rlsv3.RateLimitRequest {
	var ds []*commonv3.RateLimitDescriptor
	for i := range 5 {
		ds = append(ds, desc(fmt.Sprintf("v=%d-%s", i, strings.Repeat("x", 4000))))
	}
	return req("budget", ds...)
}

// heavyReq is a request of 3 descriptors of 60 entries "k=": under a
// KiB encoded, about 19 KiB decoded.
func heavyReq() *rlsv3.RateLimitRequest {
	var ds []*commonv3.RateLimitDescriptor
	for range 3 {
		ds = append(ds, desc(slicesRepeat("k=", 60)...))
	}
	return req("budget", ds...)
}

func slicesRepeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// A large request (one that decodes to 16 KiB or more: by its bytes, or
// by its entries) waits for the budget of large requests while it is
// taken, and is refused when it waited too long: ResourceExhausted over
// gRPC, 429 with Retry-After on /json, never waiting for its turn without
// a deadline, and /json bodies decoded inside the same bound. Small requests are decided meanwhile.
// Once the budget is free, the same requests are decided, and every one
// gives back what it took of it.
func TestLargeRequestsWaitForTheBudget(t *testing.T) {
	svc := start(t, setup{yaml: budgetConfig, store: memstore.New(memstore.Options{})})
	if size := proto.Size(heavyReq()); size >= 1<<10 {
		t.Fatalf("heavyReq is %d bytes, want under a KiB", size)
	}
	release := svc.srv.TakeBudget(rls.LargeBudget)
	for _, tc := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
	}{{"20 KiB", largeReq()}, {"180 entries", heavyReq()}} {
		_, err := svc.client.ShouldRateLimit(context.Background(), tc.req)
		if st := status.Convert(err); st.Code() != codes.ResourceExhausted || st.Message() != "rls: large requests (16 KiB or more) are waiting to be decoded: try again" {
			t.Errorf("gRPC, %s, budget taken: %v, want ResourceExhausted", tc.name, err)
		}
		code, header, body := postProto(t, svc.url, tc.req)
		if code != http.StatusTooManyRequests || header.Get("Retry-After") != "1" || body != "rls: large requests (16 KiB or more) are waiting to be decoded: try again\n" {
			t.Errorf("/json, %s, budget taken: %d (Retry-After %q) %q, want 429 with Retry-After 1", tc.name, code, header.Get("Retry-After"), body)
		}
	}
	if got := counter(t, svc.reg, "floodgate_rls_requests_total", map[string]string{"code": "resource_exhausted"}); got != 4 {
		t.Errorf("requests counted resource_exhausted: %v, want 4", got)
	}
	small := req("budget", desc("k=small"))
	expect(t, svc.call(t, small), ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{999})
	if code, _, body := postProto(t, svc.url, small); code != http.StatusOK {
		t.Errorf("/json, small, budget taken: %d %q, want 200", code, body)
	}
	release()
	for _, r := range []*rlsv3.RateLimitRequest{largeReq(), heavyReq()} {
		if resp := svc.call(t, r); resp.GetOverallCode() != ok {
			t.Errorf("gRPC, budget free: %v, want OK", resp.GetOverallCode())
		}
		if code, _, body := postProto(t, svc.url, r); code != http.StatusOK {
			t.Errorf("/json, budget free: %d %q, want 200", code, body)
		}
	}
	waitBudgetFree(t, svc.srv)
}

// Every way a large gRPC call ends gives back what it took of the budget
// of large requests, and its place among the streams in flight: decided,
// invalid once decoded, of an unknown domain, cancelled by its client
// while it waits, two messages on a unary call (each decoded into the
// same request). A leak would refuse every large request, or every call,
// for good.
func TestEveryCallGivesBackItsBudget(t *testing.T) {
	svc := start(t, setup{yaml: budgetConfig, store: memstore.New(memstore.Options{})})
	svc.call(t, largeReq())
	invalid := largeReq()
	invalid.Descriptors[0].Entries[0].Key = ""
	if _, err := svc.client.ShouldRateLimit(context.Background(), invalid); status.Code(err) != codes.InvalidArgument {
		t.Errorf("empty key: %v, want InvalidArgument", err)
	}
	unknown := largeReq()
	unknown.Domain = "nowhere"
	svc.call(t, unknown)
	release := svc.srv.TakeBudget(rls.LargeBudget)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	_, err := svc.client.ShouldRateLimit(ctx, largeReq())
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("cancelled while waiting: %v, want DeadlineExceeded", err)
	}
	release()
	encoded, err := proto.Marshal(largeReq())
	if err != nil {
		t.Fatal(err)
	}
	stream, err := svc.conn.NewStream(context.Background(), &grpc.StreamDesc{ClientStreams: true},
		rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, grpc.ForceCodec(encodedCodec(encoded)))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := stream.SendMsg(&rlsv3.RateLimitRequest{}); err != nil { // encodedCodec sends encoded
			t.Fatal(err)
		}
	}
	stream.CloseSend()
	if err := stream.RecvMsg(new(rlsv3.RateLimitResponse)); status.Code(err) != codes.Internal {
		t.Errorf("two messages on a unary call: %v, want Internal (cardinality violation)", err)
	}
	waitBudgetFree(t, svc.srv)
	waitStreams(t, svc.srv, 0)
}

// The gRPC streams in flight are bounded over every connection: past
// MaxStreamsInFlight less the StreamReserve, a connection's stream is
// refused at once with ResourceExhausted, while another connection, under
// its share of the reserve, is still answered; every place is given back
// when the streams end. Health Watch streams stay open, so they hold
// their places (a cap per connection alone would leave the number of
// connections unbounded).
func TestStreamsInFlightAreBounded(t *testing.T) {
	svc := start(t, setup{yaml: budgetConfig, store: memstore.New(memstore.Options{})})
	const watchers = rls.MaxStreamsInFlight + 88
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hc := healthpb.NewHealthClient(svc.conn)
	results := make(chan error, watchers)
	for range watchers {
		go func() {
			w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
			if err == nil {
				_, err = w.Recv()
			}
			results <- err
		}()
	}
	admitted, refused := 0, 0
	for range watchers {
		err := <-results
		switch {
		case err == nil:
			admitted++
		case status.Code(err) == codes.ResourceExhausted && status.Convert(err).Message() == fmt.Sprintf("rls: too many calls in flight (at most %d; the last %d are kept for connections with few calls)", rls.MaxStreamsInFlight, rls.StreamReserve):
			refused++
		default:
			t.Errorf("watch: %v", err)
		}
	}
	if want := rls.MaxStreamsInFlight - rls.StreamReserve; admitted != want || refused != watchers-want {
		t.Errorf("%d watches admitted and %d refused, want %d and %d", admitted, refused, want, watchers-want)
	}
	other, err := grpc.NewClient(svc.conn.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := rlsv3.NewRateLimitServiceClient(other).ShouldRateLimit(context.Background(), req("budget", desc("k=other"))); err != nil {
		t.Errorf("another connection's call: %v, want it admitted into the reserve", err)
	}
	if _, err := svc.client.ShouldRateLimit(context.Background(), req("budget", desc("k=same"))); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("the watching connection's call: %v, want ResourceExhausted", err)
	}
	cancel()
	waitStreams(t, svc.srv, 0)
}

// postProto posts r to url's /json and returns the status, headers and
// body.
func postProto(t *testing.T, url string, r *rlsv3.RateLimitRequest) (int, http.Header, string) {
	t.Helper()
	b, err := protojson.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.Post(url+"/json", "application/json", strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, string(body)
}

// waitBudgetFree waits until the whole budget of large requests is free:
// a call gives it back at its end, which may follow its answer.
func waitBudgetFree(t *testing.T, srv *rls.Server) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !srv.BudgetFree(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the budget of large requests is still taken 5 s after the calls ended")
		}
	}
}

// waitStreams waits until n gRPC streams are in flight.
func waitStreams(t *testing.T, srv *rls.Server, n int64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); srv.StreamsInFlight() != n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d streams in flight 5 s after the calls ended, want %d", srv.StreamsInFlight(), n)
		}
	}
}

// A gRPC call whose request does not arrive is cancelled after the
// request timeout, and gives its place among the streams in flight back:
// else a caller could hold the places with calls that never send. A
// call whose request arrived is not: a health Watch stream stays open
// past it.
func TestAnUnsentRequestIsCancelled(t *testing.T) {
	svc := start(t, setup{yaml: budgetConfig, store: memstore.New(memstore.Options{})})
	const timeout = 100 * time.Millisecond
	svc.srv.SetRequestTimeout(timeout)
	callCtx, callCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer callCancel()
	stream, err := svc.conn.NewStream(callCtx, &grpc.StreamDesc{ClientStreams: true},
		rlsv3.RateLimitService_ShouldRateLimit_FullMethodName)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := healthpb.NewHealthClient(svc.conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := stream.RecvMsg(new(rlsv3.RateLimitResponse)); status.Code(err) != codes.Canceled {
		t.Errorf("a call that sent no request: %v, want Canceled", err)
	}
	if waited := time.Since(began); waited < timeout/2 {
		t.Errorf("cancelled after %v, before the %v timeout", waited, timeout)
	}
	time.Sleep(2 * timeout)
	waitStreams(t, svc.srv, 1) // the Watch
	svc.call(t, req("budget", desc("k=after")))
	cancel()
	waitStreams(t, svc.srv, 0)
}

// /json reads a body of up to 1 MiB, with its length or chunked: a body
// of exactly 1 MiB is decided, one byte more is 413, and a body of more
// JSON objects than 256 descriptors of 64 entries have is refused before
// it is decoded (400).
func TestJSONBodyBounds(t *testing.T) {
	svc := start(t, setup{yaml: budgetConfig, store: memstore.New(memstore.Options{})})
	b, err := protojson.Marshal(largeReq())
	if err != nil {
		t.Fatal(err)
	}
	exact := string(b) + strings.Repeat(" ", rls.MaxMessageSize-len(b))
	objects := `{"domain":"budget","descriptors":[` + strings.Repeat(`{},`, 20000) + `{}]}`
	for _, c := range []struct {
		name, body string
		want       int
		text       string
	}{
		{"1 MiB", exact, http.StatusOK, ""},
		{"1 MiB and a byte", exact + " ", http.StatusRequestEntityTooLarge, "rls: the request is over 1048576 bytes\n"},
		{"small", `{"domain":"budget","descriptors":[{"entries":[{"key":"k","value":"s"}]}]}`, http.StatusOK, ""},
		{"20,002 objects", objects, http.StatusBadRequest, "rls: the request has 20002 JSON objects, at most 16897 allowed (256 descriptors of 64 entries)\n"},
	} {
		for _, chunked := range []bool{false, true} {
			var body io.Reader = strings.NewReader(c.body)
			if chunked {
				body = struct{ io.Reader }{body} // no length: sent chunked
			}
			res, err := http.Post(svc.url+"/json", "application/json", body)
			if err != nil {
				t.Fatal(err)
			}
			text, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != c.want || (c.text != "" && string(text) != c.text) {
				t.Errorf("%s (chunked %v): %d %q, want %d %q", c.name, chunked, res.StatusCode, text, c.want, c.text)
			}
		}
	}
	waitBudgetFree(t, svc.srv)
}
