package rls

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// Handler serves the service over HTTP, as envoyproxy/ratelimit does:
//
//   - POST /json: a RateLimitRequest in proto3 JSON, sent with
//     Content-Type application/json (parameters such as charset
//     allowed); the RateLimitResponse in proto3 JSON, with status 200
//     (OK) or 429 (OVER_LIMIT) and the response_headers_to_add as HTTP
//     headers. A request that cannot be decided answers 415 (another
//     Content-Type, or none), 400 (bad JSON, or what gRPC answers
//     InvalidArgument), 413 (a body over maxMessageSize),
//     429 with Retry-After (a large body that waited largeWait for
//     largeBudget, where gRPC answers ResourceExhausted),
//     503 (the store failed and failure_mode is error), 504 (the
//     request's context ended first) or 500, with the reason as text.
//   - GET /healthcheck: 200 "OK" while serving, 503 once Close began.
//   - GET /metrics: the Gatherer's metrics (Prometheus text format).
//
// The configuration in force (domains, limits, file names) is not on it:
// [Server.DebugHandler] serves it, for a listener of its own.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /json", s.serveJSON)
	mux.HandleFunc("GET /healthcheck", s.serveHealth)
	s.metricsRoute(mux)
	return mux
}

// DebugHandler serves /healthcheck, /metrics and GET /rlconfig, the
// configuration in force, one limit a line: for a listener of their own
// (DEBUG_ADDR), as envoyproxy/ratelimit serves its configuration on its
// debug port.
func (s *Server) DebugHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthcheck", s.serveHealth)
	mux.HandleFunc("GET /rlconfig", s.serveConfig)
	s.metricsRoute(mux)
	return mux
}

func (s *Server) metricsRoute(mux *http.ServeMux) {
	if s.gather != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.gather, promhttp.HandlerOpts{}))
	}
}

func (s *Server) serveHealth(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if s.closing.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "shutting down\n")
		return
	}
	io.WriteString(w, "OK\n")
}

func (s *Server) serveConfig(w http.ResponseWriter, _ *http.Request) {
	cfg := s.Config()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "# domains: %s\n# files: %s\n", strings.Join(cfg.Domains(), ", "), strings.Join(cfg.Files(), ", "))
	if sk := cfg.Skipped(); len(sk) > 0 {
		fmt.Fprintf(w, "# not read (not *.yaml or *.yml, or a subdirectory): %s\n", strings.Join(sk, ", "))
	}
	io.WriteString(w, cfg.String())
}

func (s *Server) serveJSON(w http.ResponseWriter, r *http.Request) {
	// Only application/json: a web page can make a browser send
	// text/plain, a form or multipart to any address without asking
	// (no CORS preflight), but not application/json. Checked before the
	// body is read.
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		s.metrics.requests.WithLabelValues("invalid_argument").Inc()
		http.Error(w, "rls: the request's Content-Type must be application/json", http.StatusUnsupportedMediaType)
		return
	}
	body, release, ok := s.readBody(w, r)
	if !ok {
		return
	}
	defer release()
	var req rlsv3.RateLimitRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		s.metrics.requests.WithLabelValues("invalid_argument").Inc()
		http.Error(w, "rls: the request is not a RateLimitRequest in proto3 JSON: "+err.Error(), http.StatusBadRequest)
		return
	}
	resp, err := s.ShouldRateLimit(r.Context(), &req)
	if err != nil {
		code := http.StatusInternalServerError
		switch status.Code(err) {
		case codes.InvalidArgument:
			code = http.StatusBadRequest
		case codes.Unavailable:
			code = http.StatusServiceUnavailable
		case codes.Canceled, codes.DeadlineExceeded:
			code = http.StatusGatewayTimeout
		}
		http.Error(w, status.Convert(err).Message(), code)
		return
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		http.Error(w, "rls: encoding the response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	for _, hv := range resp.GetResponseHeadersToAdd() {
		h.Add(hv.GetKey(), hv.GetValue())
	}
	h.Set("Content-Type", "application/json")
	if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	w.Write(out)
}

// readBody reads r's body, of maxMessageSize bytes at most, or answers
// (413 over it, 429 with Retry-After when largeBudget is busy, 400 when
// reading fails or the body has more JSON objects than a request can
// have) and returns false. A large body, of largeRequest bytes or more,
// is read, decoded and decided within the whole of the Server's
// largeBudget (the budget of gRPC's large messages too): what protojson
// makes of it is not known before it is decoded. A smaller one is read
// first, then decoded within the budget if what it can decode to is
// largeRequest or more (jsonWeight). It waits largeWait for the budget
// at most; release gives it back.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) (body []byte, release func(), ok bool) {
	failed := func(err error) (body []byte, release func(), ok bool) {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) || r.ContentLength > maxMessageSize {
			s.metrics.requests.WithLabelValues("invalid_argument").Inc()
			http.Error(w, fmt.Sprintf("rls: the request is over %d bytes", maxMessageSize), http.StatusRequestEntityTooLarge)
		} else {
			http.Error(w, "rls: reading the request: "+err.Error(), http.StatusBadRequest)
		}
		return nil, nil, false
	}
	acquire := func(n int64) bool {
		ctx, cancel := context.WithTimeout(r.Context(), largeWait)
		defer cancel()
		if err := s.decoding.sem.Acquire(ctx, n); err != nil {
			s.metrics.requests.WithLabelValues("resource_exhausted").Inc()
			w.Header().Set("Retry-After", "1")
			http.Error(w, "rls: large requests (16 KiB or more) are waiting to be decoded: try again", http.StatusTooManyRequests)
			return false
		}
		return true
	}
	if r.ContentLength > maxMessageSize {
		return failed(nil)
	}
	rd := http.MaxBytesReader(w, r.Body, maxMessageSize)
	size := r.ContentLength
	if size < largeRequest {
		// Small, or of unknown length (chunked): its first largeRequest
		// bytes before any wait.
		head, err := io.ReadAll(io.LimitReader(rd, largeRequest))
		if err != nil {
			return failed(err)
		}
		if len(head) < largeRequest {
			if n := jsonWeight(head); n >= largeRequest {
				if !acquire(n) {
					return nil, nil, false
				}
				return head, func() { s.decoding.sem.Release(n) }, true
			}
			return head, func() {}, true
		}
		body, size = head, maxMessageSize
	}
	if !acquire(largeBudget) {
		return nil, nil, false
	}
	release = func() { s.decoding.sem.Release(largeBudget) }
	buf := make([]byte, size)
	n := copy(buf, body)
	k, err := io.ReadFull(rd, buf[n:])
	n += k
	if errors.Is(err, io.ErrUnexpectedEOF) && r.ContentLength < 0 {
		err = nil // a chunked body shorter than 1 MiB
	} else if err == nil {
		// Full: a byte more is past maxMessageSize (MaxBytesReader's
		// error), or there is none.
		var more []byte
		if more, err = io.ReadAll(io.LimitReader(rd, 1)); err == nil && len(more) > 0 {
			err = &http.MaxBytesError{Limit: maxMessageSize}
		}
	}
	if err != nil {
		release()
		return failed(err)
	}
	if objects := bytes.Count(buf[:n], []byte("{")); objects > maxJSONObjects {
		release()
		s.metrics.requests.WithLabelValues("invalid_argument").Inc()
		http.Error(w, fmt.Sprintf("rls: the request has %d JSON objects, at most %d allowed (%d descriptors of %d entries)", objects, maxJSONObjects, maxDescriptors, maxEntries), http.StatusBadRequest)
		return nil, nil, false
	}
	return buf[:n], release, true
}

// maxJSONObjects is the most JSON objects ("{") a /json body can have:
// the request, and each of maxDescriptors descriptors with maxEntries
// entries and a limit. A "{" in a string counts as one too.
const maxJSONObjects = 1 + maxDescriptors*(maxEntries+2)

// jsonWeight is what the /json body b can decode to at most, of
// largeBudget: its strings, and decodedEntry bytes for each of its
// objects ("{").
func jsonWeight(b []byte) int64 {
	return min(largeBudget, int64(len(b))+int64(bytes.Count(b, []byte("{")))*decodedEntry)
}
