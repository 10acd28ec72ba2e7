package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/uuid"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/faultstore"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/rls"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/rlconfig"
)

// otlpReceiver is an OTLP collector in the test process: the
// TraceService over gRPC and POST /v1/traces (protobuf) over HTTP. It
// keeps every span it receives.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	grpcEndpoint, httpEndpoint string // for OTEL_EXPORTER_OTLP_ENDPOINT

	mu       sync.Mutex
	requests int            // export requests received; guarded by mu
	spans    []receivedSpan // guarded by mu
}

// receivedSpan is a span as exported, with its resource.
type receivedSpan struct {
	trace, id, parent  string // hex
	name, kind, status string
	attrs, resource    map[string]string
}

func startReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(gs, r)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		var in collectortrace.ExportTraceServiceRequest
		if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" || err != nil {
			t.Errorf("OTLP/HTTP: %s %s (%s), %v", req.Method, req.URL.Path, req.Header.Get("Content-Type"), err)
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		if err := proto.Unmarshal(body, &in); err != nil {
			t.Errorf("OTLP/HTTP: %v", err)
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		r.Export(req.Context(), &in)
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(hs.Close)
	r.grpcEndpoint, r.httpEndpoint = "http://"+ln.Addr().String(), hs.URL
	return r
}

func (r *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	for _, rs := range req.GetResourceSpans() {
		res := attrMap(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, receivedSpan{
					trace: hex.EncodeToString(s.GetTraceId()), id: hex.EncodeToString(s.GetSpanId()), parent: hex.EncodeToString(s.GetParentSpanId()),
					name: s.GetName(), kind: strings.TrimPrefix(s.GetKind().String(), "SPAN_KIND_"),
					status: statusString(s.GetStatus()), attrs: attrMap(s.GetAttributes()), resource: res,
				})
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// statusString is a span's status code, with its description in
// parentheses if it has one: "UNSET", "ERROR(InvalidArgument)".
func statusString(st *tracepb.Status) string {
	code := strings.TrimPrefix(st.GetCode().String(), "STATUS_CODE_")
	if st.GetMessage() != "" {
		code += "(" + st.GetMessage() + ")"
	}
	return code
}

func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = strconv.FormatInt(v.IntValue, 10)
		default:
			m[kv.GetKey()] = fmt.Sprint(kv.GetValue())
		}
	}
	return m
}

func (r *otlpReceiver) received() (int, []receivedSpan) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests, slices.Clone(r.spans)
}

// traces describes the spans received, one trace per key (its trace ID),
// each span as "name kind status parent=NAME attrs" in sorted order:
// its parent named by the span it is received with, "remote:ID" for a
// span of the caller's, or "root". The otelgrpc server span's attributes
// are the library's, left out but for rpc.method.
func traces(spans []receivedSpan) map[string][]string {
	byID := map[string]receivedSpan{}
	for _, s := range spans {
		byID[s.trace+s.id] = s
	}
	out := map[string][]string{}
	for _, s := range spans {
		parent := "root"
		if p, ok := byID[s.trace+s.parent]; ok {
			parent = p.name
		} else if s.parent != "" {
			parent = "remote:" + s.parent
		}
		var attrs []string
		for k, v := range s.attrs {
			if s.kind == "SERVER" && strings.Contains(s.name, "/") && k != "rpc.method" {
				continue
			}
			attrs = append(attrs, k+"="+v)
		}
		slices.Sort(attrs)
		out[s.trace] = append(out[s.trace], fmt.Sprintf("%s %s %s parent=%s %s", s.name, s.kind, s.status, parent, strings.Join(attrs, ",")))
	}
	for _, v := range out {
		slices.Sort(v)
	}
	return out
}

func writeConfig(t *testing.T, conf string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "svc.yaml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// traceConf has a user limit of 1 an hour and a path limit of 100.
const traceConf = "domain: svc\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1}\n" +
	"  - key: path\n    rate_limit: {unit: hour, requests_per_unit: 100}\n"

func rlsRequest(entries ...string) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: "svc"}
	for _, e := range entries {
		k, v, _ := strings.Cut(e, "=")
		req.Descriptors = append(req.Descriptors, &commonv3.RateLimitDescriptor{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: k, Value: v}}})
	}
	return req
}

// stopServe stops r and waits for its exit status, 0.
func stopServe(t *testing.T, r *running) {
	t.Helper()
	r.cancel()
	select {
	case code := <-r.done:
		r.done <- code // for startServe's cleanup
		if code != 0 {
			t.Fatalf("serve exited %d:\n%s", code, r.logs.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop")
	}
}

// TestTracingExportsSpans runs the service with TRACING_ENABLED=true
// against an OTLP receiver, over both of upstream's protocols (gRPC on
// memstore, HTTP, the default, on a real redis-server), and checks every
// span of three calls: a gRPC call continuing the caller's W3C trace, one
// starting its own trace and denied, and POST /json continuing a B3
// trace. Each has its decision's span under the server's and the store
// call's under the decision's, with the domain, descriptor count, overall
// code, store and hits; the resource names the service. No span is
// exported before the shutdown (OTEL_BSP_SCHEDULE_DELAY, which the batch
// reads, is a minute), so the spans' arrival shows that the shutdown
// flushes them; health checks make none.
func TestTracingExportsSpans(t *testing.T) {
	for _, tc := range []struct{ protocol, store string }{{"grpc", "memory"}, {"", "redis"}} {
		t.Run(tc.store, func(t *testing.T) {
			rcv := startReceiver(t)
			vars := map[string]string{
				"CONFIG_DIR": writeConfig(t, traceConf), "TRACING_ENABLED": "true", "TRACING_SERVICE_NAME": "edge-rls",
				"TRACING_SERVICE_NAMESPACE": "bank", "TRACING_SERVICE_INSTANCE_ID": "pod-7",
			}
			endpoint := rcv.httpEndpoint
			if tc.protocol == "grpc" {
				vars["TRACING_EXPORTER_PROTOCOL"], endpoint = "grpc", rcv.grpcEndpoint
			}
			if tc.store == "redis" {
				vars["REDIS_URL"] = redistest.Start(t).Addr()
			}
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
			t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "60000") // ms: nothing is sent before the shutdown but by its flush
			r := startServe(t, vars)
			conn, err := grpc.NewClient(r.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			c := rlsv3.NewRateLimitServiceClient(conn)

			const w3cTrace, w3cParent = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
			ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-"+w3cTrace+"-"+w3cParent+"-01")
			if resp, err := c.ShouldRateLimit(ctx, rlsRequest("user=u", "path=/a")); err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				t.Fatalf("first call: %v, %v", resp, err)
			}
			if resp, err := c.ShouldRateLimit(context.Background(), rlsRequest("user=u", "path=/a")); err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("second call: %v, %v", resp, err)
			}
			const badTrace, badParent = "5bd66ef5095369c7b0d1f8f4bd33716a", "c532cb4098ac3dd2"
			ctx = metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-"+badTrace+"-"+badParent+"-01")
			if _, err := c.ShouldRateLimit(ctx, rlsRequest()); status.Code(err) != codes.InvalidArgument {
				t.Fatalf("a call without descriptors: %v, want InvalidArgument", err)
			}
			const b3Trace, b3Parent = "463ac35c9f6413ad48485a3953bb6124", "a2fb4a1d1a96d312"
			req, _ := http.NewRequest(http.MethodPost, "http://"+r.http+"/json", strings.NewReader(`{"domain":"svc","descriptors":[{"entries":[{"key":"user","value":"w"}]}]}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-B3-TraceId", b3Trace)
			req.Header.Set("X-B3-SpanId", b3Parent)
			req.Header.Set("X-B3-Sampled", "1")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != 200 {
				t.Fatalf("/json: %d", res.StatusCode)
			}
			if _, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
				t.Fatal(err)
			}
			if n, _ := rcv.received(); n != 0 {
				t.Errorf("%d exports before the shutdown; want none (the batch waits 60s), or the flush at shutdown is not shown", n)
			}
			stopServe(t, r)

			_, spans := rcv.received()
			for _, s := range spans {
				if want := map[string]string{"service.name": "edge-rls", "service.namespace": "bank", "service.instance.id": "pod-7"}; !mapsEqual(s.resource, want) {
					t.Errorf("span %s: resource %v, want %v", s.name, s.resource, want)
				}
			}
			got := traces(spans)
			grpcSpan := "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit SERVER UNSET"
			method := "rpc.method=envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
			want := map[string][]string{
				w3cTrace: {
					grpcSpan + " parent=remote:" + w3cParent + " " + method,
					"ShouldRateLimit Execution INTERNAL UNSET parent=envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit descriptors=2,domain=svc,overall_code=OK",
					"Store Take INTERNAL UNSET parent=ShouldRateLimit Execution denied=0,hits=2,store=" + tc.store,
				},
				badTrace: {
					grpcSpan + " parent=remote:" + badParent + " " + method,
					"ShouldRateLimit Execution INTERNAL ERROR(InvalidArgument) parent=envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit descriptors=0,domain=svc",
				},
				b3Trace: {
					"ShouldRateLimit Execution SERVER UNSET parent=remote:" + b3Parent + " descriptors=1,domain=svc,http.response.status_code=200,overall_code=OK",
					"Store Take INTERNAL UNSET parent=ShouldRateLimit Execution denied=0,hits=1,store=" + tc.store,
				},
			}
			for id := range got {
				if id != w3cTrace && id != b3Trace && id != badTrace {
					want[id] = []string{ // the second call's own trace
						grpcSpan + " parent=root " + method,
						"ShouldRateLimit Execution INTERNAL UNSET parent=envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit descriptors=2,domain=svc,overall_code=OVER_LIMIT",
						"Store Take INTERNAL UNSET parent=ShouldRateLimit Execution denied=1,hits=2,store=" + tc.store,
					}
				}
			}
			if len(got) != 4 {
				t.Errorf("%d traces, want 4: %q", len(got), got)
			}
			for id, w := range want {
				if slices.Sort(w); !slices.Equal(got[id], w) {
					t.Errorf("trace %s:\n got  %q\n want %q", id, got[id], w)
				}
			}
		})
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestTracingSampling: TRACING_SAMPLING_RATE=0 samples no trace that
// starts here, and, as upstream's parent-based sampler, follows the
// caller's decision for a trace it continues: a sampled W3C parent is
// exported, an unsampled one is not.
func TestTracingSampling(t *testing.T) {
	rcv := startReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.grpcEndpoint)
	r := startServe(t, map[string]string{"CONFIG_DIR": writeConfig(t, traceConf), "TRACING_ENABLED": "true",
		"TRACING_EXPORTER_PROTOCOL": "grpc", "TRACING_SAMPLING_RATE": "0"})
	c := r.client(t)
	const sampled, unsampled = "11112222333344445555666677778888", "99990000aaaabbbbccccddddeeeeffff"
	for i, tp := range []string{"", "00-" + unsampled + "-1234567890abcdef-00", "00-" + sampled + "-1234567890abcdef-01", ""} {
		ctx := context.Background()
		if tp != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", tp)
		}
		if _, err := c.ShouldRateLimit(ctx, rlsRequest("path=/p"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	if code, _ := postJSON(t, "http://"+r.http+"/json", `{"domain":"svc","descriptors":[{"entries":[{"key":"path","value":"/j"}]}]}`); code != 200 {
		t.Fatalf("/json: %d", code)
	}
	stopServe(t, r)
	_, spans := rcv.received()
	got := traces(spans)
	if len(got) != 1 || len(got[sampled]) != 3 {
		t.Errorf("traces %q; want only the sampled caller's, of 3 spans", got)
	}
	// Upstream's defaults name the resource: RateLimit, no namespace, and
	// a random UUID for the instance.
	for _, s := range spans {
		id, err := uuid.Parse(s.resource["service.instance.id"])
		if s.resource["service.name"] != "RateLimit" || len(s.resource) != 2 || err != nil || id.Version() != 4 {
			t.Errorf("span %s: resource %v; want service.name RateLimit and a random UUID as service.instance.id", s.name, s.resource)
		}
	}
}

// TestTracingCollectorDown: a collector that cannot be reached costs
// the spans, logged, and nothing else: the service starts, decides and
// stops with status 0.
func TestTracingCollectorDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close() // nothing listens there now
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+closed)
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "300") // milliseconds: each export gives up within it
	r := startServe(t, map[string]string{"CONFIG_DIR": writeConfig(t, traceConf), "TRACING_ENABLED": "true"})
	if resp, err := r.client(t).ShouldRateLimit(context.Background(), rlsRequest("user=u")); err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("%v, %v", resp, err)
	}
	stopServe(t, r)
	if !strings.Contains(r.logs.String(), "tracing: spans not exported") || !strings.Contains(r.logs.String(), closed) {
		t.Errorf("no warning naming the unreachable collector:\n%s", r.logs.String())
	}
}

// TestTracingOff: without TRACING_ENABLED the service sends no span, even
// with an OTLP endpoint in its environment, and adds nothing to its
// servers and its store.
func TestTracingOff(t *testing.T) {
	rcv := startReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.httpEndpoint)
	r := startServe(t, map[string]string{"CONFIG_DIR": writeConfig(t, traceConf), "TRACING_SERVICE_NAME": "x", "TRACING_EXPORTER_PROTOCOL": "http"})
	if _, err := r.client(t).ShouldRateLimit(context.Background(), rlsRequest("user=u")); err != nil {
		t.Fatal(err)
	}
	if code, _ := postJSON(t, "http://"+r.http+"/json", `{"domain":"svc","descriptors":[{"entries":[{"key":"path","value":"/j"}]}]}`); code != 200 {
		t.Fatalf("/json: %d", code)
	}
	stopServe(t, r)
	if n, spans := rcv.received(); n != 0 || len(spans) != 0 {
		t.Errorf("tracing off: %d exports of %d spans, want none", n, len(spans))
	}
	if strings.Contains(r.logs.String(), "tracing on") {
		t.Errorf("tracing off logs it is on:\n%s", r.logs.String())
	}

	// Off, the service's store, servers and handler are its own.
	tr, err := startTracing(context.Background(), tracingConfig{}, nil)
	if tr != nil || err != nil {
		t.Fatalf("startTracing off: %v, %v", tr, err)
	}
	mem := memstore.New(memstore.Options{})
	defer mem.Close()
	mux := http.NewServeMux()
	if tr.store(mem) != floodgate.Store(mem) || tr.serverOptions() != nil || tr.handler(mux) != http.Handler(mux) {
		t.Error("tracing off wraps the store, the gRPC server or the HTTP handler")
	}
	tr.shutdown(nil)
}

// TestLibrariesImportNoTracing: OpenTelemetry is the service's alone.
// The library packages, the core, stores, enforce and transports, import
// none of it, so an application that embeds floodgate does not pull it.
func TestLibrariesImportNoTracing(t *testing.T) {
	pkgs := []string{".", "./enforce", "./internal/rls", "./httplimit", "./grpclimit", "./memstore", "./redisstore", "./breakerstore", "./rlconfig", "./overrides", "./clientip"}
	cmd := exec.Command("go", append([]string{"list", "-deps", "-f", "{{.ImportPath}}"}, pkgs...)...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "go.opentelemetry.io/") {
			t.Errorf("a library package imports %s; tracing belongs to cmd/floodgate", dep)
		}
	}
}

// TestTracingConfiguration reads upstream's TRACING_* variables with its
// defaults; a bad value is listed with the others, and the protocol is
// checked only with tracing on, as upstream checks it.
func TestTracingConfiguration(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want tracingConfig
		errs []string
	}{
		{"unset", map[string]string{}, tracingConfig{}, nil},
		{"off, whatever the rest says", map[string]string{"TRACING_ENABLED": "false", "TRACING_EXPORTER_PROTOCOL": "udp", "TRACING_SERVICE_NAME": "x"}, tracingConfig{}, nil},
		{"on, upstream's defaults", map[string]string{"TRACING_ENABLED": "true"},
			tracingConfig{Enabled: true, ServiceName: "RateLimit", Protocol: "http", SamplingRate: 1}, nil},
		{"on, every setting", map[string]string{"TRACING_ENABLED": "1", "TRACING_EXPORTER_PROTOCOL": "gRPC", "TRACING_SERVICE_NAME": "rl",
			"TRACING_SERVICE_NAMESPACE": "edge", "TRACING_SERVICE_INSTANCE_ID": "pod-3", "TRACING_SAMPLING_RATE": "0.25"},
			tracingConfig{Enabled: true, ServiceName: "rl", ServiceNamespace: "edge", ServiceInstanceID: "pod-3", Protocol: "grpc", SamplingRate: 0.25}, nil},
		{"bad values", map[string]string{"TRACING_ENABLED": "yes", "TRACING_SAMPLING_RATE": "half"}, tracingConfig{},
			[]string{`TRACING_ENABLED: "yes" is not true or false`, `TRACING_SAMPLING_RATE: "half" is not a number from 0 to 1`}},
		{"a bad protocol", map[string]string{"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "udp", "TRACING_SAMPLING_RATE": "NaN"},
			tracingConfig{Enabled: true, ServiceName: "RateLimit", Protocol: "udp", SamplingRate: 1},
			[]string{`TRACING_SAMPLING_RATE: "NaN" is not a number from 0 to 1`, `TRACING_EXPORTER_PROTOCOL: "udp" is not http or grpc`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var errs []string
			got := parseTracing(env(tc.env), func(name, format string, a ...any) {
				errs = append(errs, fmt.Sprintf("%s: "+format, append([]any{name}, a...)...))
			})
			if tc.errs == nil && got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			if !slices.Equal(errs, tc.errs) {
				t.Errorf("errors %q, want %q", errs, tc.errs)
			}
		})
	}
	// In the service's configuration, listed with every other problem.
	_, err := parseServe(nil, env(map[string]string{"CONFIG_DIR": "x", "TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "zipkin", "LOG_LEVEL": "loud"}))
	if !errors.Is(err, errConfig) || !strings.Contains(err.Error(), `TRACING_EXPORTER_PROTOCOL: "zipkin" is not http or grpc`) || !strings.Contains(err.Error(), "LOG_LEVEL") {
		t.Errorf("parseServe: %v", err)
	}
}

// TestTracedStore: each call of the traced store is one span, a child of
// the caller's, with the store, the hits and those denied (or the error
// as its status), and returns what the store returns; a memstore stays a
// floodgate.LocalStore, so the Limiter still gives it no time budget, and
// its TakeOne is traced too.
func TestTracedStore(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer tp.Shutdown(context.Background())
	tr := newTracing(tp)
	mem := memstore.New(memstore.Options{})
	defer mem.Close()
	st := tr.store(mem)
	local, ok := st.(floodgate.LocalStore)
	if !ok {
		t.Fatal("the traced memstore is not a floodgate.LocalStore")
	}
	if _, ok := tr.store(faultstore.New(mem)).(floodgate.LocalStore); ok {
		t.Error("a traced store that is not local claims to be")
	}
	rule, err := floodgate.NewRule("r", 1, time.Hour, floodgate.FixedWindow)
	if err != nil {
		t.Fatal(err)
	}
	lease, err := floodgate.NewRule("c", 1, time.Minute, floodgate.Concurrency)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Peek(context.Background(), []floodgate.Hit{{Rule: rule, Key: "x", Cost: 1}}); err != nil {
		t.Fatal(err) // outside a span: no span
	}
	ctx, parent := tp.Tracer("test").Start(context.Background(), "caller")
	hits := []floodgate.Hit{{Rule: rule, Key: "a", Cost: 1}, {Rule: rule, Key: "b", Cost: 1}} // a store takes costs of 1 or more
	taken, err := st.Take(ctx, hits)
	if err != nil || len(taken) != 2 || !taken[0].Allowed || !taken[1].Allowed {
		t.Fatalf("Take: %v, %v", taken, err)
	}
	if peeked, err := st.Peek(ctx, hits[:1]); err != nil || len(peeked) != 1 || peeked[0].Allowed {
		t.Fatalf("Peek: %v, %v", peeked, err)
	}
	if one, err := local.TakeOne(ctx, hits[1]); err != nil || one.Allowed {
		t.Fatalf("TakeOne: %v, %v", one, err)
	}
	if err := st.Refund(ctx, []floodgate.Receipt{{Hit: hits[0], Stamp: taken[0].Stamp}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Reset(ctx, rule, "b"); err != nil {
		t.Fatal(err)
	}
	held, err := st.Take(ctx, []floodgate.Hit{{Rule: lease, Key: "l", Cost: 1}})
	if err != nil || !held[0].Allowed {
		t.Fatalf("Take of a lease: %v, %v", held, err)
	}
	if stamps, err := st.Renew(ctx, []floodgate.Receipt{{Hit: floodgate.Hit{Rule: lease, Key: "l", Cost: 1}, Stamp: held[0].Stamp}}); err != nil || len(stamps) != 1 || stamps[0].Epoch != held[0].Stamp.Epoch {
		t.Fatalf("Renew: %v, %v", stamps, err)
	}
	fs := faultstore.New(mem)
	fs.Set(faultstore.Fail)
	if _, err := tr.store(fs).Take(ctx, hits); !errors.Is(err, faultstore.ErrInjected) {
		t.Fatalf("a failing store's Take: %v", err)
	}
	parent.End()

	var got []string
	for _, s := range sr.Ended() {
		if s.Name() == "caller" {
			continue
		}
		var attrs []string
		for _, kv := range s.Attributes() {
			attrs = append(attrs, string(kv.Key)+"="+kv.Value.Emit())
		}
		if s.Parent().SpanID() != parent.SpanContext().SpanID() {
			attrs = append(attrs, "NOT A CHILD OF THE CALLER")
		}
		got = append(got, fmt.Sprintf("%s %s %q %s", s.Name(), s.Status().Code, s.Status().Description, strings.Join(attrs, ",")))
	}
	want := []string{
		`Store Take Unset "" store=memory,hits=2,denied=0`,
		`Store Peek Unset "" store=memory,hits=1,denied=1`,
		`Store Take Unset "" store=memory,hits=1,denied=1`,
		`Store Refund Unset "" store=memory,hits=1`,
		`Store Reset Unset "" store=memory,hits=1`,
		`Store Take Unset "" store=memory,hits=1,denied=0`,
		`Store Renew Unset "" store=memory,hits=1`,
		`Store Take Error "faultstore: injected failure" store=other,hits=2`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("spans:\n got  %q\n want %q", got, want)
	}
}

// BenchmarkTracing measures one decision over gRPC on loopback, as Envoy
// calls (ShouldRateLimit on memstore, one descriptor of 10,000 values),
// with tracing off (nothing added), and on at TRACING_SAMPLING_RATE 0
// (otelgrpc's server span, not sampled) and 1 (its three spans recorded
// and batched to an exporter that drops them).
func BenchmarkTracing(b *testing.B) {
	cfg, err := rlconfig.Parse(map[string][]byte{"b.yaml": []byte("domain: b\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1000000}\n")}, rlconfig.Options{})
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]*rlsv3.RateLimitRequest, 10_000)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "b", Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u" + strconv.Itoa(i)}}}}}
	}
	for _, mode := range []string{"off", "rate0", "rate1"} {
		b.Run(mode, func(b *testing.B) {
			var tr *tracing
			if mode != "off" {
				rate := 1.0
				if mode == "rate0" {
					rate = 0
				}
				tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(rate))),
					sdktrace.WithBatcher(tracetest.NewNoopExporter()))
				defer tp.Shutdown(context.Background())
				tr = newTracing(tp)
			}
			mem := memstore.New(memstore.Options{})
			defer mem.Close()
			lim, err := floodgate.New(tr.store(mem), floodgate.Options{})
			if err != nil {
				b.Fatal(err)
			}
			enf, err := enforce.New(enforce.Options{Limiter: lim, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			defer enf.Close()
			srv, err := rls.New(rls.Options{Enforcer: enf, Config: cfg})
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Close()
			gs := grpc.NewServer(append(srv.GRPCServerOptions(), tr.serverOptions()...)...)
			srv.Register(gs)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			go gs.Serve(ln)
			defer gs.Stop()
			conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			c := rlsv3.NewRateLimitServiceClient(conn)
			ctx := context.Background()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				resp, err := c.ShouldRateLimit(ctx, reqs[i%len(reqs)])
				if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
					b.Fatalf("%v, %v", resp, err)
				}
			}
		})
	}
}
