// Command rlscompat sends one scripted sequence of ShouldRateLimit calls
// to floodgate's service and to envoyproxy/ratelimit, both reading the
// same configuration directory and both on a fresh Redis, and compares
// their answers field by field: the overall code, each descriptor's
// code, limit_remaining, current_limit (name, requests_per_unit, unit,
// unit_multiplier) and duration_until_reset, and the response headers
// (scripts/compat.sh runs it once with both services at their default,
// no headers, and once with LIMIT_RESPONSE_HEADERS_ENABLED).
//
//	rlscompat -floodgate 127.0.0.1:18081 -envoy 127.0.0.1:18091 -redis 127.0.0.1:6397
//
// A difference is either deliberate, listed in the allowlist with its
// reason, and expected at the very steps that show it, or a failure. A
// step that should show a listed difference and does not is a failure
// too, so the list cannot go stale. The exit status is 0 when every
// answer is the same or an expected difference, 1 otherwise.
//
// The sequence must run inside one second so that the README's
// per-second limits count in one window in both services: rlscompat
// starts it just after a second begins and, when it crossed into the
// next second anyway, flushes Redis and runs it again.
//
// With -xds, both services take the configuration over xDS from
// bench/cmd/xdsconfig (COMPAT_XDS=1 scripts/compat.sh), and the run is
// checked against xdsAllowlist instead: that mode's differences.
//
// scripts/compat.sh builds both services and runs this.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

func main() {
	ok, err := mainErr(os.Args[1:], os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rlscompat:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

func mainErr(args []string, out io.Writer) (bool, error) {
	fs := flag.NewFlagSet("rlscompat", flag.ContinueOnError)
	fgAddr := fs.String("floodgate", "", "floodgate's gRPC address (host:port)")
	envoyAddr := fs.String("envoy", "", "envoyproxy/ratelimit's gRPC address (host:port)")
	redisAddr := fs.String("redis", "", "the throwaway redis-server both use (host:port); it is flushed before each attempt")
	attempts := fs.Int("attempts", 5, "attempts at running the sequence inside one second")
	xds := fs.Bool("xds", false, "both services take the configuration over xDS (scripts/compat.sh with COMPAT_XDS=1): check the differences of that mode")
	wait := fs.Duration("wait", 30*time.Second, "how long to wait for both services to have a configuration loaded")
	if err := fs.Parse(args); err != nil {
		return false, err
	}
	if *fgAddr == "" || *envoyAddr == "" || *redisAddr == "" {
		return false, fmt.Errorf("-floodgate, -envoy and -redis are required")
	}
	ctx := context.Background()
	fg, err := dial(*fgAddr)
	if err != nil {
		return false, err
	}
	defer fg.Close()
	en, err := dial(*envoyAddr)
	if err != nil {
		return false, err
	}
	defer en.Close()
	rdb := redis.NewClient(&redis.Options{Addr: *redisAddr})
	defer rdb.Close()

	list, mode := allowlist, "the configuration from files"
	if *xds {
		list, mode = xdsAllowlist, "the configuration over xDS"
	}
	fmt.Fprintf(out, "Deliberate differences (the allowlist, %s):\n", mode)
	for _, a := range list {
		fmt.Fprintf(out, "  %-24s %s\n", a.id, a.reason)
	}
	fmt.Fprintln(out)

	steps := script()
	fgc, enc := pb.NewRateLimitServiceClient(fg), pb.NewRateLimitServiceClient(en)
	if err := waitLoaded(ctx, *wait, fgc, enc); err != nil {
		return false, err
	}
	for attempt := 1; ; attempt++ {
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			return false, fmt.Errorf("flush redis: %w", err)
		}
		waitForSecond()
		start := time.Now()
		results := make([][2]answer, len(steps))
		for i, s := range steps {
			results[i][0] = call(ctx, fgc, s)
			results[i][1] = call(ctx, enc, s)
		}
		end := time.Now()
		if end.Unix() != start.Unix() {
			fmt.Fprintf(out, "attempt %d took %v and crossed a second: again\n", attempt, end.Sub(start).Round(time.Millisecond))
			if attempt < *attempts {
				continue
			}
			return false, fmt.Errorf("the sequence did not fit in one second in %d attempts", attempt)
		}
		fmt.Fprintf(out, "%d steps sent to both in %v (attempt %d)\n\n", len(steps), end.Sub(start).Round(time.Millisecond), attempt)
		return report(out, list, *xds, steps, results), nil
	}
}

// probe is a step both services answer with a current_limit once their
// configuration is loaded: a service configured over xDS may serve
// before its first configuration arrives. What it counts is flushed
// before the sequence.
var probe = step{domain: "mongo_cps", descs: []desc{d("database", "default")}}

// waitLoaded waits until both services answer probe with its limit.
func waitLoaded(ctx context.Context, wait time.Duration, clients ...pb.RateLimitServiceClient) error {
	deadline := time.Now().Add(wait)
	for _, c := range clients {
		for {
			a := call(ctx, c, probe)
			if a.err == "" && len(a.statuses) == 1 && a.statuses[0].limit != "-" {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("no configuration loaded after %v: the probe (%s) answered %v", wait, probe.domain, a)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

func dial(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// waitForSecond sleeps until just after a second begins, and out of the
// last two seconds of a minute, so that no minute, hour or day window
// turns over during the sequence either.
func waitForSecond() {
	for {
		now := time.Now()
		next := now.Truncate(time.Second).Add(time.Second + 2*time.Millisecond)
		time.Sleep(next.Sub(now))
		if next.Second() < 58 {
			return
		}
	}
}

// An answer is what one service said to one step, in the compared
// fields only.
type answer struct {
	err      string // the gRPC status code, when the call failed
	overall  pb.RateLimitResponse_Code
	statuses []status1
	headers  string // response_headers_to_add, "key: value" joined by "; "
}

type status1 struct {
	code      pb.RateLimitResponse_Code
	remaining uint32
	limit     string // name requests_per_unit/unit×multiplier, or "-" when absent
	reset     string // duration_until_reset, or "-" when absent
}

func call(ctx context.Context, c pb.RateLimitServiceClient, s step) answer {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, s.request())
	if err != nil {
		return answer{err: status.Code(err).String()}
	}
	a := answer{overall: resp.GetOverallCode()}
	for _, st := range resp.GetStatuses() {
		reset := "-"
		if d := st.GetDurationUntilReset(); d != nil {
			reset = d.AsDuration().String()
		}
		a.statuses = append(a.statuses, status1{
			code:      st.GetCode(),
			remaining: st.GetLimitRemaining(),
			limit:     limitString(st.GetCurrentLimit()),
			reset:     reset,
		})
	}
	var hs []string
	for _, h := range resp.GetResponseHeadersToAdd() {
		hs = append(hs, h.GetKey()+": "+h.GetValue())
	}
	a.headers = strings.Join(hs, "; ")
	return a
}

func limitString(l *pb.RateLimitResponse_RateLimit) string {
	if l == nil {
		return "-"
	}
	s := fmt.Sprintf("%d/%s", l.GetRequestsPerUnit(), l.GetUnit())
	if m := l.GetUnitMultiplier().GetValue(); m > 1 {
		s = fmt.Sprintf("%d/%d %s", l.GetRequestsPerUnit(), m, l.GetUnit())
	}
	if l.GetName() != "" {
		s = l.GetName() + ":" + s
	}
	return s
}

func (a answer) String() string {
	if a.err != "" {
		return "error " + a.err
	}
	var b strings.Builder
	b.WriteString(short(a.overall))
	b.WriteString(" [")
	for i, s := range a.statuses {
		if i > 0 {
			b.WriteString(", ")
		}
		rem := fmt.Sprint(s.remaining)
		if s.remaining == 1<<32-1 {
			rem = "max"
		}
		fmt.Fprintf(&b, "%s %s %s", short(s.code), rem, s.limit)
	}
	b.WriteString("]")
	return b.String()
}

func short(c pb.RateLimitResponse_Code) string {
	switch c {
	case pb.RateLimitResponse_OK:
		return "OK"
	case pb.RateLimitResponse_OVER_LIMIT:
		return "OVER"
	}
	return c.String()
}

// diff lists the fields in which two answers differ.
func diff(fg, en answer) []string {
	var out []string
	if fg.err != en.err {
		return []string{"error"}
	}
	if fg.overall != en.overall {
		out = append(out, "overall_code")
	}
	if len(fg.statuses) != len(en.statuses) {
		return append(out, "statuses")
	}
	for i := range fg.statuses {
		f, e := fg.statuses[i], en.statuses[i]
		if f.code != e.code {
			out = append(out, fmt.Sprintf("[%d].code", i))
		}
		if f.remaining != e.remaining {
			out = append(out, fmt.Sprintf("[%d].limit_remaining", i))
		}
		if f.limit != e.limit {
			out = append(out, fmt.Sprintf("[%d].current_limit", i))
		}
		if f.reset != e.reset {
			out = append(out, fmt.Sprintf("[%d].duration_until_reset(%s/%s)", i, f.reset, e.reset))
		}
	}
	if fg.headers != en.headers {
		out = append(out, fmt.Sprintf("headers(%q/%q)", fg.headers, en.headers))
	}
	return out
}

// report prints each step's answers and verdict against list (the
// allowlist of the mode: xds or files), and the summary; it reports
// whether the run passed.
func report(out io.Writer, list []allowed, xds bool, steps []step, results [][2]answer) bool {
	byID := map[string]allowed{}
	for _, a := range list {
		byID[a.id] = a
	}
	same, expected, bad := 0, 0, 0
	shown := map[string]int{}
	fmt.Fprintf(out, "%-3s %-10s %-32s %-44s %-44s %s\n", "#", "domain", "step", "floodgate", "envoyproxy/ratelimit", "verdict")
	for i, s := range steps {
		fg, en := results[i][0], results[i][1]
		fields := diff(fg, en)
		allow, want := s.expect(xds)
		var verdict string
		switch {
		case allow != "" && byID[allow].agree:
			// A difference from the other mode, the same in both services.
			switch {
			case len(fields) != 0:
				bad++
				verdict = "FAIL: differs (" + strings.Join(fields, " ") + ")"
			case fg.String() != want:
				bad++
				verdict = "FAIL: expected both to answer " + want + " (" + allow + ")"
			default:
				expected++
				shown[allow]++
				verdict = "same in both, unlike the file mode: allowed, " + allow
			}
		case len(fields) == 0 && allow == "":
			same++
			verdict = "same"
		case len(fields) == 0:
			bad++
			verdict = "FAIL: expected difference " + allow + " did not show"
		case allow != "":
			expected++
			shown[allow]++
			verdict = "differs (" + strings.Join(fields, " ") + "): allowed, " + allow
		default:
			bad++
			verdict = "FAIL: differs (" + strings.Join(fields, " ") + ")"
		}
		fmt.Fprintf(out, "%-3d %-10s %-32s %-44s %-44s %s\n", i+1, trim(s.domain, 10), trim(s.name, 32), fg, en, verdict)
	}
	fmt.Fprintf(out, "\n%d steps: %d the same, %d deliberate differences", len(steps), same, expected)
	for _, a := range list {
		if shown[a.id] > 0 {
			fmt.Fprintf(out, " (%s %d)", a.id, shown[a.id])
		}
	}
	fmt.Fprintf(out, ", %d failures", bad)
	if xds {
		fmt.Fprint(out, " (configuration over xDS)")
	}
	fmt.Fprintln(out)
	if bad > 0 {
		fmt.Fprintln(out, "FAIL: the services answer differently beyond the allowlist")
		return false
	}
	fmt.Fprintln(out, "PASS")
	return true
}

func trim(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}
