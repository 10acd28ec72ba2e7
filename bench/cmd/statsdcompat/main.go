// Command statsdcompat sends floodgate's service and envoyproxy/ratelimit
// one sequence of ShouldRateLimit calls and compares the Prometheus
// series that a prometheus/statsd_exporter, fed each service's statsd
// statistics and upstream's example mapping, makes of them
// (scripts/statsd-compat.sh starts all four). It prints both and exits 1
// when the series upstream's mapping names (ratelimit_service_*) differ
// in name, labels or figure; a histogram's buckets and sum (timings) are
// left out, its count compared. Series of upstream's other statistics
// (its Redis pool's, the Go runtime's) are listed, not compared.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	pbcore "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// A call is one ShouldRateLimit request; entries are key, value, ...
type call struct {
	domain  string
	hits    uint32 // hits_addend; 0 is 1
	entries []string
	perHour uint32 // a limit override, when not 0
}

// sequence is what both services are sent, in order (the limits of
// bench/compat/statsd/config). After a denial, a key is hit only one at a
// time: upstream then counts the hits past the limit, floodgate by
// default not, and both must say the same of each hit.
func sequence() []call {
	var s []call
	add := func(n int, c call) {
		for range n {
			s = append(s, c)
		}
	}
	add(7, call{domain: "stats", entries: []string{"user", "alice"}})                    // 5 within (the 5th near), 2 over
	add(3, call{domain: "stats", entries: []string{"shadow", "x"}})                      // 1 within and near, 2 over in shadow mode
	add(2, call{domain: "stats", entries: []string{"path", "login", "ip", "192.0.2.1"}}) // detailed_metric: the values in the key
	add(3, call{domain: "stats", entries: []string{"route", "checkout"}})                // value_to_metric
	add(1, call{domain: "stats", entries: []string{"database", "users"}})
	add(1, call{domain: "stats", hits: 4, entries: []string{"user", "bob"}})      // 4 within, none near (4 is not above 4)
	add(1, call{domain: "stats", hits: 4, entries: []string{"user", "bob"}})      // over: 3 past the limit, 1 near
	add(1, call{domain: "stats", entries: []string{"user", "carol"}, perHour: 3}) // an override: counted under the request's entries
	add(2, call{domain: "stats", entries: []string{"blocked", "x"}})              // a limit of 0: every hit over
	add(2, call{domain: "stats", entries: []string{"free", "x"}})                 // unlimited
	add(1, call{domain: "nodomain", entries: []string{"user", "alice"}})          // domain_not_found
	add(1, call{domain: "stats"})                                                 // no descriptor: service_error
	return s
}

func (c call) request() *pb.RateLimitRequest {
	r := &pb.RateLimitRequest{Domain: c.domain, HitsAddend: c.hits}
	if len(c.entries) == 0 {
		return r
	}
	d := &pbcore.RateLimitDescriptor{}
	for i := 0; i+1 < len(c.entries); i += 2 {
		d.Entries = append(d.Entries, &pbcore.RateLimitDescriptor_Entry{Key: c.entries[i], Value: c.entries[i+1]})
	}
	if c.perHour != 0 {
		d.Limit = &pbcore.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: c.perHour, Unit: typev3.RateLimitUnit_HOUR}
	}
	r.Descriptors = []*pbcore.RateLimitDescriptor{d}
	return r
}

func main() {
	fs := flag.NewFlagSet("statsdcompat", flag.ExitOnError)
	fgAddr := fs.String("floodgate", "", "floodgate's gRPC address")
	enAddr := fs.String("envoy", "", "envoyproxy/ratelimit's gRPC address")
	fgMetrics := fs.String("floodgate-metrics", "", "the /metrics URL of the statsd_exporter fed by floodgate, or floodgate's own under USE_PROMETHEUS")
	enMetrics := fs.String("envoy-metrics", "", "the /metrics URL of the statsd_exporter fed by envoyproxy/ratelimit")
	wait := fs.Duration("wait", 30*time.Second, "how long to wait for the series")
	fs.Parse(os.Args[1:])
	if *fgAddr == "" || *enAddr == "" || *fgMetrics == "" || *enMetrics == "" {
		fmt.Fprintln(os.Stderr, "statsdcompat: -floodgate, -envoy, -floodgate-metrics and -envoy-metrics are required")
		os.Exit(2)
	}
	ok, err := run(*fgAddr, *enAddr, *fgMetrics, *enMetrics, *wait, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "statsdcompat:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

func run(fgAddr, enAddr, fgMetrics, enMetrics string, wait time.Duration, out io.Writer) (bool, error) {
	deadline := time.Now().Add(wait)
	// Both loaded their configuration once its statistic is flushed.
	for _, u := range []string{fgMetrics, enMetrics} {
		for {
			mapped, _, err := scrape(u)
			if err == nil && slices.Contains(mapped, "ratelimit_service_config_load_success 1") {
				break
			}
			if time.Now().After(deadline) {
				return false, fmt.Errorf("%s has no ratelimit_service_config_load_success 1 after %v (%v)", u, wait, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	calls := sequence()
	for _, addr := range []string{fgAddr, enAddr} {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return false, err
		}
		c := pb.NewRateLimitServiceClient(conn)
		for _, call := range calls {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			c.ShouldRateLimit(ctx, call.request()) // the answers are scripts/compat.sh's business
			cancel()
		}
		conn.Close()
	}
	fmt.Fprintf(out, "%d calls sent to each\n", len(calls))
	// The series settle within a few flushes (1s each).
	var fg, en, fgOther, enOther []string
	stable := 0
	for {
		var err error
		prevFg, prevEn := fg, en
		if fg, fgOther, err = scrape(fgMetrics); err != nil {
			return false, err
		}
		if en, enOther, err = scrape(enMetrics); err != nil {
			return false, err
		}
		if slices.Equal(fg, prevFg) && slices.Equal(en, prevEn) && slices.Contains(en, fmt.Sprintf(`ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} %d`, len(calls))) {
			stable++
		} else {
			stable = 0
		}
		if stable >= 3 && slices.Equal(fg, en) || stable >= 6 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	fmt.Fprintln(out, "\nThe series upstream's mapping makes (ratelimit_service_*), envoyproxy/ratelimit's | floodgate's:")
	all := append(slices.Clone(en), fg...)
	slices.Sort(all)
	all = slices.Compact(all)
	same := true
	for _, s := range all {
		inEn, inFg := slices.Contains(en, s), slices.Contains(fg, s)
		mark := "  both  "
		switch {
		case inEn && !inFg:
			mark, same = "  envoy ", false
		case inFg && !inEn:
			mark, same = "  fg    ", false
		}
		fmt.Fprintln(out, mark, s)
	}
	fmt.Fprintln(out, "\nOther series, not compared (names; envoyproxy/ratelimit's only | floodgate's only):")
	for _, n := range names(enOther) {
		if !slices.Contains(names(fgOther), n) {
			fmt.Fprintln(out, "  envoy ", n)
		}
	}
	for _, n := range names(fgOther) {
		if !slices.Contains(names(enOther), n) {
			fmt.Fprintln(out, "  fg    ", n)
		}
	}
	if same {
		fmt.Fprintf(out, "\nPASS: the same %d series, with the same figures\n", len(en))
	} else {
		fmt.Fprintln(out, "\nFAIL: the series differ")
	}
	return same, nil
}

// scrape returns the ratelimit_service_* series of the exporter at url
// (sorted, without histogram buckets and sums), and its other ratelimit*
// series.
func scrape(url string) (mapped, other []string, err error) {
	res, err := http.Get(url)
	if err != nil {
		return nil, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, nil, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "ratelimit_service_"):
			if !strings.Contains(line, "_bucket{") && !strings.Contains(line, "_sum{") {
				mapped = append(mapped, line)
			}
		case strings.HasPrefix(line, "ratelimit"):
			other = append(other, line)
		}
	}
	slices.Sort(mapped)
	return mapped, other, nil
}

// names are the series' metric names, once each.
func names(series []string) []string {
	var n []string
	for _, s := range series {
		name, _, _ := strings.Cut(s, "{")
		name, _, _ = strings.Cut(name, " ")
		n = append(n, name)
	}
	slices.Sort(n)
	return slices.Compact(n)
}
