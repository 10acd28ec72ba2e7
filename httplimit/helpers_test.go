package httplimit_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/breakerstore"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/internal/faultstore"
	"github.com/floodgate-rl/floodgate/internal/promtest"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// routes returns a Routes on an Enforcer of opts, closed when t ends.
func routes(t testing.TB, opts enforce.Options) *httplimit.Routes {
	t.Helper()
	en, err := enforce.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { en.Close() })
	hl, err := httplimit.New(httplimit.Options{Enforcer: en})
	if err != nil {
		t.Fatal(err)
	}
	return hl
}

// env is a Routes on a fake-clock memstore behind a fault injector.
type env struct {
	lim   *floodgate.Limiter
	clock *storetest.FakeClock
	fault *faultstore.Store
	enf   *enforce.Enforcer
	hl    *httplimit.Routes
	reg   *prometheus.Registry
	logs  *syncbuf.Buffer
}

type envOptions struct {
	opts    httplimit.Options   // the Enforcer is filled in
	timeout time.Duration       // the decision budget; zero means 20ms
	store   floodgate.Store     // zero means the fake-clock memstore
	bare    bool                // no fault injector: the limiter sees the store itself
	breaker *breakerstore.Store // exported as floodgate_breaker_state by the env's Enforcer
	// overrides gives keys rules of their own: per-key overrides, live limits.
	overrides floodgate.Overrides
}

func newEnv(t testing.TB, eo envOptions) *env {
	t.Helper()
	e := &env{clock: storetest.NewFakeClock(), reg: prometheus.NewRegistry(), logs: new(syncbuf.Buffer)}
	store := eo.store
	if store == nil {
		ms := memstore.New(memstore.Options{Now: e.clock.Now})
		t.Cleanup(func() { ms.Close() })
		store = ms
	}
	e.fault = faultstore.New(store)
	if !eo.bare {
		store = e.fault
	}
	if eo.timeout == 0 {
		eo.timeout = 20 * time.Millisecond
	}
	lim, err := floodgate.New(store, floodgate.Options{Timeout: eo.timeout, Overrides: eo.overrides})
	if err != nil {
		t.Fatal(err)
	}
	e.lim = lim
	eopts := enforce.Options{Limiter: lim, Registerer: e.reg}
	if eo.breaker != nil {
		eopts.Breaker = eo.breaker
	}
	eopts.Logger = slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	if e.enf, err = enforce.New(eopts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.enf.Close() })
	o := eo.opts
	o.Enforcer = e.enf
	if e.hl, err = httplimit.New(o); err != nil {
		t.Fatal(err)
	}
	return e
}

// handler wraps ok in the middleware of route rt.
func (e *env) handler(t testing.TB, rt httplimit.Route) http.Handler {
	t.Helper()
	mw, err := e.hl.Middleware(rt)
	if err != nil {
		t.Fatal(err)
	}
	return mw(ok)
}

// ok answers 200 "ok".
var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })

// do sends a GET from remote ("192.0.2.1:1234") with header pairs.
func do(h http.Handler, remote string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = remote
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func rule(t testing.TB, name string, limit int64, window time.Duration) floodgate.Rule {
	t.Helper()
	r, err := floodgate.NewRule(name, limit, window, floodgate.SlidingWindow)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// metric returns the sum of the values of the metrics called name whose
// labels include labels (counters, gauges, histogram sample counts).
func metric(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	return promtest.Sum(t, reg, name, labels)
}
