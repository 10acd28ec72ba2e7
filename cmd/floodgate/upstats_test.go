package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// statsConfig is the configuration of the statistics tests: a limit of
// 5 per minute on user, a shadow_mode limit of 1 on shadow, and a
// nested limit with detailed_metric, whose statistics key holds the
// request's values (an IPv4 address among them, which upstream's key
// sanitizing rewrites).
const statsConfig = `domain: stats
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: login
    descriptors:
      - key: ip
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 10}
`

// statsDir writes statsConfig into a new directory.
func statsDir(t *testing.T) string {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "stats.yaml"), []byte(statsConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// statsRequests sends the known sequence of the statistics tests and
// returns how many ShouldRateLimit calls it made: 7 for user (5 within,
// the 5th near: above floor(80% of 5), 2 over), 3 for shadow (1 within and near,
// 2 over and shadow), 2 for path=login,ip=192.0.2.1, one for a domain
// that is not configured, one without descriptors (an error) and one
// with a limit override, for user=bob,plan= (1 within).
func statsRequests(t *testing.T, c rlsv3.RateLimitServiceClient) int {
	t.Helper()
	call := func(domain string, entries ...string) {
		t.Helper()
		d := &rlcommon.RateLimitDescriptor{}
		for i := 0; i+1 < len(entries); i += 2 {
			d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: entries[i], Value: entries[i+1]})
		}
		req := &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlcommon.RateLimitDescriptor{d}}
		if len(entries) == 0 {
			req.Descriptors = nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := c.ShouldRateLimit(ctx, req)
		if (err != nil) != (len(entries) == 0) {
			t.Fatalf("%s %q: %v", domain, entries, err)
		}
	}
	n := 0
	for range 7 {
		call("stats", "user", "alice")
		n++
	}
	for range 3 {
		call("stats", "shadow", "x")
		n++
	}
	for range 2 {
		call("stats", "path", "login", "ip", "192.0.2.1")
		n++
	}
	call("nodomain", "user", "alice")
	call("stats")
	// A limit in the request (Envoy's override): upstream counts it under
	// the request's entries, KEY_VALUE.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "stats", Descriptors: []*rlcommon.RateLimitDescriptor{{
		Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "user", Value: "bob"}, {Key: "plan", Value: ""}},
		Limit:   &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_MINUTE},
	}}}); err != nil {
		t.Fatalf("override: %v", err)
	}
	return n + 3
}

// statsdListener collects the lines of the statsd packets (or TCP
// stream) sent to its address.
type statsdListener struct {
	addr  string
	mu    sync.Mutex
	lines []string
	close func()
}

func (l *statsdListener) add(b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if line != "" {
			l.lines = append(l.lines, line)
		}
	}
}

// got returns the lines so far.
func (l *statsdListener) got() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}

func listenUDP(t *testing.T) *statsdListener {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &statsdListener{addr: pc.LocalAddr().String()}
	go func() {
		buf := make([]byte, 65536)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			l.add(buf[:n])
		}
	}()
	t.Cleanup(func() { pc.Close() })
	return l
}

func listenTCP(t *testing.T) *statsdListener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &statsdListener{addr: ln.Addr().String()}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				sc := bufio.NewScanner(conn)
				for sc.Scan() {
					l.add(sc.Bytes())
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return l
}

// waitLines waits until the lines hold every one of want and done
// (nil: nothing more) says they are complete, or 10s; it returns them.
func waitLines(t *testing.T, l *statsdListener, want []string, done func([]string) bool) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := l.got()
		complete := done == nil || done(got)
		for _, w := range want {
			if !slices.Contains(got, w) {
				complete = false
				break
			}
		}
		if complete || time.Now().After(deadline) {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop stops the service and waits for it.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case code := <-r.done:
		r.done <- code // for startServe's cleanup
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop within 15s")
	}
}

// statsTags are the EXTRA_TAGS of the tests, as gostats serializes them
// into statsd names.
const statsTags = ".__env=test.__zone=a"

// wantStatsd are the counters that statsRequests makes, by upstream's
// names (without tags).
var wantStatsd = map[string]uint64{
	"ratelimit.service.rate_limit.stats.user.total_hits":                      7,
	"ratelimit.service.rate_limit.stats.user.within_limit":                    5,
	"ratelimit.service.rate_limit.stats.user.near_limit":                      1,
	"ratelimit.service.rate_limit.stats.user.over_limit":                      2,
	"ratelimit.service.rate_limit.stats.shadow.total_hits":                    3,
	"ratelimit.service.rate_limit.stats.shadow.within_limit":                  1,
	"ratelimit.service.rate_limit.stats.shadow.near_limit":                    1,
	"ratelimit.service.rate_limit.stats.shadow.over_limit":                    2,
	"ratelimit.service.rate_limit.stats.shadow.shadow_mode":                   2,
	"ratelimit.service.rate_limit.stats.path_login.ip_192_0_2_1.total_hits":   2,
	"ratelimit.service.rate_limit.stats.path_login.ip_192_0_2_1.within_limit": 2,
	"ratelimit.service.rate_limit.stats.user_bob.plan.total_hits":             1,
	"ratelimit.service.rate_limit.stats.user_bob.plan.within_limit":           1,
	"ratelimit.service.rate_limit.nodomain.domain_not_found":                  1,
	"ratelimit.service.call.should_rate_limit.service_error":                  1,
	"ratelimit.service.config_load_success":                                   1,
	"ratelimit_server.ShouldRateLimit.total_requests":                         15,
}

// counterLines splits lines into the counters (each line as it is, the
// Go runtime's ratelimit.go.* left out), the timers and the gauges.
func counterLines(lines []string) (counters, timers, gauges []string) {
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "ratelimit.go."):
			gauges = append(gauges, l)
		case strings.Contains(l, "|ms"):
			timers = append(timers, l)
		case strings.Contains(l, "|c"):
			counters = append(counters, l)
		}
	}
	slices.Sort(counters)
	return counters, timers, gauges
}

// TestServeStatsd: with USE_STATSD=true the service sends upstream's
// statsd names, EXTRA_TAGS serialized into them as gostats does, for a
// known sequence of requests: every counter's figure, the Go runtime's
// gauges, and one response_time timer per ShouldRateLimit call. The
// flush interval is an hour: the lines are the last flush's, at
// shutdown, one per counter.
func TestServeStatsd(t *testing.T) {
	l := listenUDP(t)
	host, port, _ := net.SplitHostPort(l.addr)
	r := startServe(t, map[string]string{"CONFIG_DIR": statsDir(t), "USE_STATSD": "true", "STATSD_HOST": host, "STATSD_PORT": port,
		"STATSD_PROTOCOL": "udp", "STATS_FLUSH_INTERVAL": "1h", "EXTRA_TAGS": "zone:a,env:test"})
	calls := statsRequests(t, r.client(t))
	var want []string
	for name, n := range wantStatsd {
		want = append(want, name+statsTags+":"+strconv.FormatUint(n, 10)+"|c")
	}
	slices.Sort(want)
	// The counters wait for the store's flush (the timers go to gostats's
	// sink at once, which sends what it holds every second).
	if counters, _, gauges := counterLines(l.got()); len(counters)+len(gauges) != 0 {
		t.Errorf("counted before the first flush: %q", append(counters, gauges...))
	}
	r.stop(t)
	// The last flush's packets: every counter, a timer per call, the
	// runtime's gauges.
	counters, timers, gauges := counterLines(waitLines(t, l, want, func(lines []string) bool {
		_, timers, gauges := counterLines(lines)
		return len(timers) >= calls && slices.ContainsFunc(gauges, func(g string) bool { return strings.HasPrefix(g, "ratelimit.go.numGoroutine") })
	}))
	if !slices.Equal(counters, want) {
		t.Errorf("counters:\n got %s\nwant %s", strings.Join(counters, "\n     "), strings.Join(want, "\n     "))
	}
	timer := regexp.MustCompile(`^ratelimit_server\.ShouldRateLimit\.response_time` + regexp.QuoteMeta(statsTags) + `:\d+\|ms$`)
	for _, line := range timers {
		if !timer.MatchString(line) {
			t.Errorf("timer line %q", line)
		}
	}
	if len(timers) != calls {
		t.Errorf("%d response_time lines, want one per call: %d", len(timers), calls)
	}
	if !slices.ContainsFunc(gauges, func(g string) bool {
		return strings.HasPrefix(g, "ratelimit.go.numGoroutine"+statsTags+":") && strings.HasSuffix(g, "|g")
	}) {
		t.Errorf("no ratelimit.go.numGoroutine gauge in %q", gauges)
	}
}

// sums adds up each counter's values over lines ("NAME:N|c"), as a
// statsd server does from flush to flush.
func sums(lines []string) map[string]uint64 {
	m := map[string]uint64{}
	for _, l := range lines {
		name, rest, ok := strings.Cut(l, ":")
		v, kind, ok2 := strings.Cut(rest, "|")
		if !ok || !ok2 || kind != "c" || strings.HasPrefix(name, "ratelimit.go.") {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err == nil {
			m[name] += n
		}
	}
	return m
}

// TestServeStatsdDefaults: upstream's statsd sink (gostats's) speaks TCP
// unless STATSD_PROTOCOL says udp, and the service flushes every
// STATS_FLUSH_INTERVAL while it runs: the counters, summed over the
// flushes as statsd sums them, are the figures, with no tag.
func TestServeStatsdDefaults(t *testing.T) {
	l := listenTCP(t)
	host, port, _ := net.SplitHostPort(l.addr)
	r := startServe(t, map[string]string{"CONFIG_DIR": statsDir(t), "USE_STATSD": "true", "STATSD_HOST": host, "STATSD_PORT": port,
		"STATS_FLUSH_INTERVAL": "50ms"})
	statsRequests(t, r.client(t))
	deadline := time.Now().Add(10 * time.Second)
	var got map[string]uint64
	for {
		got = sums(l.got())
		if got["ratelimit_server.ShouldRateLimit.total_requests"] == 15 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // a few more flushes: nothing is counted twice
	got = sums(l.got())
	for name, n := range wantStatsd {
		if got[name] != n {
			t.Errorf("%s: %d, want %d", name, got[name], n)
		}
	}
	if len(got) != len(wantStatsd) {
		t.Errorf("counters %v, want %v", got, wantStatsd)
	}
}

// TestServeDogStatsd: USE_DOG_STATSD=true sends DogStatsD, EXTRA_TAGS as
// its tags (not in the names), and a mogrifier
// (USE_DOG_STATSD_MOGRIFIERS) renames the per-limit statistics and tags
// them with its pattern's groups, as upstream's godogstats does.
func TestServeDogStatsd(t *testing.T) {
	l := listenUDP(t)
	host, port, _ := net.SplitHostPort(l.addr)
	r := startServe(t, map[string]string{"CONFIG_DIR": statsDir(t), "USE_DOG_STATSD": "true", "STATSD_HOST": host, "STATSD_PORT": port,
		"STATS_FLUSH_INTERVAL": "1h", "EXTRA_TAGS": "env:test,zone:a",
		"USE_DOG_STATSD_MOGRIFIERS":       "RL",
		"DOG_STATSD_MOGRIFIER_RL_PATTERN": `^ratelimit\.service\.rate_limit\.([^.]+)\.(.+)\.(total_hits|over_limit|near_limit|within_limit|shadow_mode)$`,
		"DOG_STATSD_MOGRIFIER_RL_NAME":    "ratelimit.service.rate_limit.$3", "DOG_STATSD_MOGRIFIER_RL_TAGS": "domain:$1,descriptor:$2"})
	calls := statsRequests(t, r.client(t))
	mogrified := regexp.MustCompile(`^ratelimit\.service\.rate_limit\.([^.]+)\.(.+)\.(total_hits|over_limit|near_limit|within_limit|shadow_mode)$`)
	var want []string
	for name, n := range wantStatsd {
		tags := "env:test,zone:a"
		if g := mogrified.FindStringSubmatch(name); g != nil {
			name, tags = "ratelimit.service.rate_limit."+g[3], tags+",descriptor:"+g[2]+",domain:"+g[1]
		}
		want = append(want, name+":"+strconv.FormatUint(n, 10)+"|c|#"+tags)
	}
	slices.Sort(want)
	r.stop(t)
	var counters, timers []string
	dogTimers := func(lines []string) bool {
		n := 0
		for _, line := range lines {
			if strings.Contains(line, "|ms") {
				n++
			}
		}
		return n >= calls
	}
	for _, line := range waitLines(t, l, want, dogTimers) {
		switch {
		case strings.HasPrefix(line, "ratelimit.go.") || strings.HasPrefix(line, "datadog."): // the runtime's, the client's telemetry
		case strings.Contains(line, "|ms"):
			timers = append(timers, line)
		default:
			counters = append(counters, line)
		}
	}
	slices.Sort(counters)
	if !slices.Equal(counters, want) {
		t.Errorf("counters:\n got %s\nwant %s", strings.Join(counters, "\n     "), strings.Join(want, "\n     "))
	}
	timer := regexp.MustCompile(`^ratelimit_server\.ShouldRateLimit\.response_time:\d+\.\d+\|ms\|#env:test,zone:a$`)
	for _, line := range timers {
		if !timer.MatchString(line) {
			t.Errorf("timer line %q", line)
		}
	}
	if len(timers) != calls {
		t.Errorf("%d response_time lines, want %d", len(timers), calls)
	}
}

// scrape returns the lines of GET url that start with one of prefixes.
func scrape(t *testing.T, url string, prefixes ...string) []string {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, line := range strings.Split(string(b), "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				lines = append(lines, line)
				break
			}
		}
	}
	slices.Sort(lines) // the exposition orders label sets its own way
	return lines
}

// TestServeMappedPrometheus: with USE_PROMETHEUS=true, /metrics (on
// PROMETHEUS_ADDR) has the series that upstream's default mapping makes
// of its statistics, every figure of the known sequence, beside
// floodgate's own names with the same figures; PROMETHEUS_MAPPER_YAML's
// mapping replaces the default one.
func TestServeMappedPrometheus(t *testing.T) {
	want := []string{ // sorted
		`ratelimit_service_config_load_success 1`,
		`ratelimit_service_rate_limit_near_limit{domain="stats",key1="shadow"} 1`,
		`ratelimit_service_rate_limit_near_limit{domain="stats",key1="user"} 1`,
		`ratelimit_service_rate_limit_nodomain_domain_not_found 1`, // unmapped: the exporter's own escaping
		`ratelimit_service_rate_limit_over_limit{domain="stats",key1="shadow"} 2`,
		`ratelimit_service_rate_limit_over_limit{domain="stats",key1="user"} 2`,
		`ratelimit_service_rate_limit_shadow_mode{domain="stats",key1="shadow"} 2`,
		`ratelimit_service_rate_limit_total_hits{domain="stats",key1="path_login",key2="ip_192_0_2_1"} 2`,
		`ratelimit_service_rate_limit_total_hits{domain="stats",key1="shadow"} 3`,
		`ratelimit_service_rate_limit_total_hits{domain="stats",key1="user"} 7`,
		`ratelimit_service_rate_limit_total_hits{domain="stats",key1="user_bob",key2="plan"} 1`,
		`ratelimit_service_rate_limit_within_limit{domain="stats",key1="path_login",key2="ip_192_0_2_1"} 2`,
		`ratelimit_service_rate_limit_within_limit{domain="stats",key1="shadow"} 1`,
		`ratelimit_service_rate_limit_within_limit{domain="stats",key1="user"} 5`,
		`ratelimit_service_rate_limit_within_limit{domain="stats",key1="user_bob",key2="plan"} 1`,
		`ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"} 15`,
		`ratelimit_service_should_rate_limit_error{err_type="service_error"} 1`,
		`ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} 15`,
	}
	r := startServe(t, map[string]string{"CONFIG_DIR": statsDir(t), "USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": "localhost:0",
		"STATS_FLUSH_INTERVAL": "50ms"})
	statsRequests(t, r.client(t))
	mapped := func(url string) []string {
		var got []string
		for _, line := range scrape(t, url, "ratelimit_service_") {
			if !strings.Contains(line, "_bucket{") && !strings.Contains(line, "_seconds_sum{") {
				got = append(got, line)
			}
		}
		return got
	}
	deadline := time.Now().Add(10 * time.Second)
	var got []string
	for {
		got = mapped("http://" + r.debug + "/metrics")
		if slices.Equal(got, want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !slices.Equal(got, want) {
		t.Errorf("mapped series:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(want, "\n     "))
	}
	// floodgate's own names, beside, agree.
	own := scrape(t, "http://"+r.debug+"/metrics", `floodgate_rls_total_hits_total{`, `floodgate_rls_near_limit_total{`)
	wantOwn := []string{
		`floodgate_rls_near_limit_total{descriptor="",domain="stats",limit="stats.shadow"} 1`,
		`floodgate_rls_near_limit_total{descriptor="",domain="stats",limit="stats.user"} 1`,
		`floodgate_rls_total_hits_total{descriptor="",domain="stats",limit="stats.override"} 1`,
		`floodgate_rls_total_hits_total{descriptor="",domain="stats",limit="stats.shadow"} 3`,
		`floodgate_rls_total_hits_total{descriptor="",domain="stats",limit="stats.user"} 7`,
		`floodgate_rls_total_hits_total{descriptor="stats.path_login.ip_192.0.2.1",domain="stats",limit="stats.path_login.ip"} 2`,
	}
	if !slices.Equal(own, wantOwn) {
		t.Errorf("floodgate's series:\n got %s\nwant %s", strings.Join(own, "\n     "), strings.Join(wantOwn, "\n     "))
	}

	// A mapping of one's own.
	mapping := filepath.Join(t.TempDir(), "mapping.yaml")
	if err := os.WriteFile(mapping, []byte(`mappings:
  - match: "ratelimit.service.rate_limit.*.*.total_hits"
    name: "hits"
    labels: {domain: "$1", descriptor: "$2"}
  - match: "."
    match_type: regex
    action: drop
    name: dropped
`), 0o600); err != nil {
		t.Fatal(err)
	}
	r = startServe(t, map[string]string{"CONFIG_DIR": statsDir(t), "USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": "localhost:0",
		"STATS_FLUSH_INTERVAL": "50ms", "PROMETHEUS_MAPPER_YAML": mapping})
	statsRequests(t, r.client(t))
	want = []string{`hits{descriptor="shadow",domain="stats"} 3`, `hits{descriptor="user",domain="stats"} 7`}
	deadline = time.Now().Add(10 * time.Second)
	for {
		got = scrape(t, "http://"+r.debug+"/metrics", "hits", "ratelimit_")
		if slices.Equal(got, want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !slices.Equal(got, want) {
		t.Errorf("with PROMETHEUS_MAPPER_YAML:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(want, "\n     "))
	}
}

// TestServeStatsdStoreError: a call that the store could not decide
// (Redis down, failure_mode error: Unavailable) counts in upstream's
// should_rate_limit.redis_error, and its hit in total_hits alone.
func TestServeStatsdStoreError(t *testing.T) {
	l := listenUDP(t)
	host, port, _ := net.SplitHostPort(l.addr)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	redisAddr := dead.Addr().String()
	dead.Close() // nothing listens there now
	r := startServe(t, map[string]string{"CONFIG_DIR": statsDir(t), "USE_STATSD": "true", "STATSD_HOST": host, "STATSD_PORT": port,
		"STATSD_PROTOCOL": "udp", "STATS_FLUSH_INTERVAL": "1h", "REDIS_URL": "redis://" + redisAddr, "DECISION_TIMEOUT": "300ms"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = r.client(t).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "stats", Descriptors: []*rlcommon.RateLimitDescriptor{{
		Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}}}}})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("with Redis down: %v, want Unavailable", err)
	}
	r.stop(t)
	want := []string{
		"ratelimit.service.call.should_rate_limit.redis_error:1|c",
		"ratelimit.service.config_load_success:1|c",
		"ratelimit.service.rate_limit.stats.user.total_hits:1|c",
		"ratelimit_server.ShouldRateLimit.total_requests:1|c",
	}
	counters, _, _ := counterLines(waitLines(t, l, want, nil))
	if !slices.Equal(counters, want) {
		t.Errorf("counters:\n got %s\nwant %s", strings.Join(counters, "\n     "), strings.Join(want, "\n     "))
	}
}
