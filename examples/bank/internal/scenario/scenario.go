// Package scenario plays the seed's bank scenario against a fleet of bank
// replicas behind a forwarding proxy, prints a table per scenario and
// checks every outcome. The demo runs it in-process; an end-to-end test
// runs it against bankapi processes and a real redis-server.
package scenario

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate/examples/bank/internal/bank"
)

// EdgeHeader carries the simulated client address from the scenario's
// client to the fleet's proxy, which plays the internet edge: it writes
// X-Forwarded-For from it and drops whatever the client sent.
const EdgeHeader = "X-Demo-Client-IP"

// Fleet is the system the scenarios run against: bank replicas with the
// default limits and failure modes, built-in demo users, one shared Redis,
// and a proxy in front that is their only trusted proxy.
type Fleet interface {
	// URL is the proxy's base URL.
	URL() string
	// StopRedis takes the shared store away; RestartRedis brings it back
	// at the same address. CanStopRedis reports whether the fleet can.
	CanStopRedis() bool
	StopRedis() error
	RestartRedis() error
	// Logs returns what the replicas logged since the last call.
	Logs() string
}

// Run plays every scenario against f, printing to w. It returns an error
// if a scenario could not run or if any outcome differs from what the
// scenario promises.
func Run(ctx context.Context, f Fleet, w io.Writer) error {
	out := newReport(w)
	s := &scenarios{f: f, c: &client{base: f.URL(), http: &http.Client{Timeout: 10 * time.Second}}, out: out, docs: bank.DemoDocuments(bank.DemoUsers)}
	steps := []func() error{s.pixBurst, s.office, s.oneIPManyAccounts, s.botnet}
	if f.CanStopRedis() {
		steps = append(steps, s.outage)
	}
	for _, step := range steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := step(); err != nil {
			return err
		}
	}
	if err := boundary(ctx, out); err != nil {
		return err
	}
	out.flush()
	if len(out.failures) > 0 {
		return fmt.Errorf("%d outcomes differ from the scenario", len(out.failures))
	}
	fmt.Fprintln(w, "\nall scenarios behaved as promised")
	return nil
}

// Proxy returns the fleet's forwarding proxy: it sends requests to the
// backends in turn, writes X-Forwarded-For from EdgeHeader (dropping what
// the client sent), and names the replica that answered in the response's
// X-Demo-Replica field.
func Proxy(backends []*url.URL) http.Handler {
	var next atomic.Uint64
	return &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			i := int(next.Add(1)-1) % len(backends)
			r.SetURL(backends[i])
			r.Out.Header.Set("X-Forwarded-For", r.In.Header.Get(EdgeHeader))
			r.Out.Header.Del(EdgeHeader)
			r.Out.Header.Set("X-Demo-Replica", strconv.Itoa(i+1))
		},
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Set("X-Demo-Replica", resp.Request.Header.Get("X-Demo-Replica"))
			return nil
		},
	}
}
