package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/uuid"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"go.opentelemetry.io/contrib/propagators/b3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	noopmetric "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// tracingConfig is envoyproxy/ratelimit's tracing, from its TRACING_*
// variables with its defaults. The exporter reads the standard
// OTEL_EXPORTER_OTLP_* variables (endpoint, headers, timeout,
// certificates, compression) from the process's environment itself, as
// upstream's does, and the batch span processor its OTEL_BSP_* ones. The
// zero value is tracing off.
type tracingConfig struct {
	Enabled           bool    // TRACING_ENABLED: default false
	ServiceName       string  // TRACING_SERVICE_NAME: default RateLimit
	ServiceNamespace  string  // TRACING_SERVICE_NAMESPACE: default none
	ServiceInstanceID string  // TRACING_SERVICE_INSTANCE_ID: default a random UUID at each start
	Protocol          string  // TRACING_EXPORTER_PROTOCOL: http (OTLP/HTTP protobuf, the default) or grpc
	SamplingRate      float64 // TRACING_SAMPLING_RATE: the share of traces started here that are sampled; default 1
}

// parseTracing reads the TRACING_* variables, reporting each bad one to
// bad. As upstream, TRACING_ENABLED and TRACING_SAMPLING_RATE must parse
// whether or not tracing is on, and the protocol is checked only when it
// is; with tracing off the result is the zero tracingConfig.
func parseTracing(getenv func(string) string, bad func(name, format string, a ...any)) tracingConfig {
	enabled := envBool(getenv, bad, "TRACING_ENABLED")
	rate := 1.0
	if v := getenv("TRACING_SAMPLING_RATE"); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(r) {
			bad("TRACING_SAMPLING_RATE", "%q is not a number from 0 to 1", v)
		}
		rate = r
	}
	if !enabled {
		return tracingConfig{}
	}
	c := tracingConfig{Enabled: true, ServiceName: getenv("TRACING_SERVICE_NAME"), ServiceNamespace: getenv("TRACING_SERVICE_NAMESPACE"),
		ServiceInstanceID: getenv("TRACING_SERVICE_INSTANCE_ID"), Protocol: strings.ToLower(getenv("TRACING_EXPORTER_PROTOCOL")), SamplingRate: rate}
	if c.ServiceName == "" {
		c.ServiceName = "RateLimit"
	}
	switch c.Protocol {
	case "":
		c.Protocol = "http"
	case "http", "grpc":
	default:
		bad("TRACING_EXPORTER_PROTOCOL", "%q is not http or grpc", getenv("TRACING_EXPORTER_PROTOCOL"))
	}
	return c
}

// tracing exports the service's spans over OTLP:
//
//   - gRPC: the server span of each call (otelgrpc's, named after the
//     method; health checks are not traced), which continues a trace whose
//     context the caller sent in W3C traceparent or B3 headers;
//   - "ShouldRateLimit Execution", upstream's name, for each decision, over
//     gRPC (a child of the server span) or POST /json (continuing the
//     headers' trace), with the domain, the number of descriptors and the
//     overall code, never the descriptors' values;
//   - "Store Take", "Store Peek", "Store Refund", "Store Renew" and
//     "Store Reset", each call of the decision to its store, a child of
//     the decision's span, with the store (redis or memory), the number of
//     hits and, for Take and Peek, of those denied.
//
// A nil *tracing is tracing off: it adds nothing to the servers and the
// store, so a decision costs nothing more.
type tracing struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

// startTracing starts the exporter and the tracer provider that c asks
// for, or returns nil when tracing is off. Nothing is dialled here: a
// collector that is down loses spans, never the start.
func startTracing(ctx context.Context, c tracingConfig, logger *slog.Logger) (*tracing, error) {
	if !c.Enabled {
		return nil, nil
	}
	var client otlptrace.Client
	if c.Protocol == "grpc" {
		client = otlptracegrpc.NewClient()
	} else {
		client = otlptracehttp.NewClient()
	}
	exp, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("%w: tracing: the OTLP exporter: %w", errConfig, err)
	}
	id := c.ServiceInstanceID
	if id == "" {
		id = uuid.NewString()
	}
	attrs := []attribute.KeyValue{semconv.ServiceName(c.ServiceName), semconv.ServiceInstanceID(id)}
	if c.ServiceNamespace != "" {
		attrs = append(attrs, semconv.ServiceNamespace(c.ServiceNamespace))
	}
	tp := sdktrace.NewTracerProvider(
		// A trace whose caller sampled it is sampled, one it did not is
		// not, and one that starts here is sampled at the rate, as
		// upstream: 1 or more always, 0 or less never.
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.SamplingRate))),
		sdktrace.WithBatcher(exportLogger{exp, logger}),
		sdktrace.WithResource(resource.NewWithAttributes(semconv.SchemaURL, attrs...)),
	)
	logger.Info("tracing on", "protocol", c.Protocol, "service_name", c.ServiceName, "service_namespace", c.ServiceNamespace,
		"service_instance_id", id, "sampling_rate", c.SamplingRate)
	return newTracing(tp), nil
}

// newTracing returns the tracing of tp, with upstream's propagators: W3C
// trace context, B3 (single or multiple headers) and W3C baggage.
func newTracing(tp *sdktrace.TracerProvider) *tracing {
	return &tracing{
		tp:     tp,
		tracer: tp.Tracer("github.com/floodgate-rl/floodgate/cmd/floodgate"),
		prop:   propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, b3.New(), propagation.Baggage{}),
	}
}

// shutdown exports the spans not yet sent, within 5s (upstream's bound),
// once the servers have stopped: every call's spans have ended.
func (t *tracing) shutdown(logger *slog.Logger) {
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.tp.Shutdown(ctx); err != nil {
		logger.Warn("tracing: the last spans were not all exported", "err", err)
	}
}

// exportLogger logs the exporter's failures to the service's logger (one
// line per failed batch, every 5s at most by default) rather than to
// OpenTelemetry's global error handler.
type exportLogger struct {
	sdktrace.SpanExporter
	logger *slog.Logger
}

func (e exportLogger) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if err := e.SpanExporter.ExportSpans(ctx, spans); err != nil {
		e.logger.Warn("tracing: spans not exported", "spans", len(spans), "err", err)
	}
	return nil
}

// serverOptions are the gRPC server's: otelgrpc's stats handler (the
// server span, the caller's trace context) and the decision's span.
func (t *tracing) serverOptions() []grpc.ServerOption {
	if t == nil {
		return nil
	}
	return []grpc.ServerOption{
		grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(t.tp), otelgrpc.WithPropagators(t.prop),
			otelgrpc.WithMeterProvider(noopmetric.NewMeterProvider()), otelgrpc.WithFilter(filters.Not(filters.HealthCheck())))),
		grpc.ChainUnaryInterceptor(t.unary),
	}
}

const decisionSpan = "ShouldRateLimit Execution" // envoyproxy/ratelimit's name

func (t *tracing) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	r, ok := req.(*rlsv3.RateLimitRequest)
	if !ok || info.FullMethod != rlsv3.RateLimitService_ShouldRateLimit_FullMethodName {
		return handler(ctx, req)
	}
	if !trace.SpanFromContext(ctx).IsRecording() {
		return handler(ctx, req) // the server span was not sampled: neither are its children
	}
	ctx, span := t.tracer.Start(ctx, decisionSpan)
	defer span.End()
	span.SetAttributes(attribute.String("domain", r.GetDomain()), attribute.Int("descriptors", len(r.GetDescriptors())))
	resp, err := handler(ctx, req)
	if err != nil {
		span.SetStatus(codes.Error, status.Code(err).String())
	} else if res, ok := resp.(*rlsv3.RateLimitResponse); ok {
		span.SetAttributes(attribute.String("overall_code", res.GetOverallCode().String()))
	}
	return resp, err
}

// handler traces POST /json on h: the decision's span, continuing the
// trace of the request's headers. It reads the request (1 MiB at most,
// the service's bound) to name its domain and count its descriptors, and
// hands h the same bytes.
func (t *tracing) handler(h http.Handler) http.Handler {
	if t == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/json" {
			h.ServeHTTP(w, r)
			return
		}
		ctx := t.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := t.tracer.Start(ctx, decisionSpan, trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		if !span.IsRecording() {
			h.ServeHTTP(w, r.WithContext(ctx))
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20+1))
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
		var req rlsv3.RateLimitRequest
		if err == nil && protojson.Unmarshal(body, &req) == nil {
			span.SetAttributes(attribute.String("domain", req.GetDomain()), attribute.Int("descriptors", len(req.GetDescriptors())))
		}
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(sw, r.WithContext(ctx))
		span.SetAttributes(attribute.Int("http.response.status_code", sw.code))
		switch sw.code {
		case http.StatusOK:
			span.SetAttributes(attribute.String("overall_code", rlsv3.RateLimitResponse_OK.String()))
		case http.StatusTooManyRequests:
			span.SetAttributes(attribute.String("overall_code", rlsv3.RateLimitResponse_OVER_LIMIT.String()))
		default:
			span.SetStatus(codes.Error, http.StatusText(sw.code))
		}
	})
}

// statusWriter remembers the status written.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// store returns s with a span around each call, or s itself when tracing
// is off. A store that keeps its state in memory stays a
// floodgate.LocalStore: the Limiter gives its calls no time budget.
func (t *tracing) store(s floodgate.Store) floodgate.Store {
	if t == nil {
		return s
	}
	kind := "other"
	switch s.(type) {
	case *redisstore.Store:
		kind = "redis"
	case *memstore.Store:
		kind = "memory"
	}
	ts := tracedStore{s: s, tracer: t.tracer, kind: attribute.String("store", kind)}
	if l, ok := s.(floodgate.LocalStore); ok {
		return tracedLocalStore{ts, l}
	}
	return ts
}

// tracedStore is a store whose calls are spans.
type tracedStore struct {
	s      floodgate.Store
	tracer trace.Tracer
	kind   attribute.KeyValue
}

var (
	_ floodgate.Store      = tracedStore{}
	_ floodgate.LocalStore = tracedLocalStore{}
)

// start starts the span of a call, a child of ctx's. A call outside a
// sampled span (one of a trace not sampled, or a lease's renewal in the
// background) makes none, and allocates nothing: it gets ctx's own
// span, which is not recording, and whose End does nothing.
func (t tracedStore) start(ctx context.Context, name string, hits int) (context.Context, trace.Span) {
	if parent := trace.SpanFromContext(ctx); !parent.IsRecording() {
		return ctx, parent
	}
	ctx, span := t.tracer.Start(ctx, name)
	span.SetAttributes(t.kind, attribute.Int("hits", hits))
	return ctx, span
}

// end ends span with err's status and, if denied is not negative, the
// number of hits denied.
func end(span trace.Span, denied int, err error) {
	if span.IsRecording() {
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		} else if denied >= 0 {
			span.SetAttributes(attribute.Int("denied", denied))
		}
	}
	span.End()
}

func countDenied(results []floodgate.Result) int {
	n := 0
	for _, r := range results {
		if !r.Allowed {
			n++
		}
	}
	return n
}

func (t tracedStore) Take(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	ctx, span := t.start(ctx, "Store Take", len(hits))
	res, err := t.s.Take(ctx, hits)
	end(span, countDenied(res), err)
	return res, err
}

func (t tracedStore) Peek(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	ctx, span := t.start(ctx, "Store Peek", len(hits))
	res, err := t.s.Peek(ctx, hits)
	end(span, countDenied(res), err)
	return res, err
}

func (t tracedStore) Refund(ctx context.Context, receipts []floodgate.Receipt) error {
	ctx, span := t.start(ctx, "Store Refund", len(receipts))
	err := t.s.Refund(ctx, receipts)
	end(span, -1, err)
	return err
}

func (t tracedStore) Reset(ctx context.Context, rule floodgate.Rule, key string) error {
	ctx, span := t.start(ctx, "Store Reset", 1)
	err := t.s.Reset(ctx, rule, key)
	end(span, -1, err)
	return err
}

func (t tracedStore) Renew(ctx context.Context, receipts []floodgate.Receipt) ([]floodgate.Stamp, error) {
	ctx, span := t.start(ctx, "Store Renew", len(receipts))
	stamps, err := t.s.Renew(ctx, receipts)
	end(span, -1, err)
	return stamps, err
}

// tracedLocalStore is a tracedStore of a floodgate.LocalStore.
type tracedLocalStore struct {
	tracedStore
	l floodgate.LocalStore
}

func (t tracedLocalStore) TakeOne(ctx context.Context, h floodgate.Hit) (floodgate.Result, error) {
	ctx, span := t.start(ctx, "Store Take", 1)
	res, err := t.l.TakeOne(ctx, h)
	denied := 0
	if !res.Allowed {
		denied = 1
	}
	end(span, denied, err)
	return res, err
}
