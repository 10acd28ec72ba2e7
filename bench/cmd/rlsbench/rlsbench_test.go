package main

import (
	"context"
	"os"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

func TestParseStat(t *testing.T) {
	tests := []struct {
		name string
		stat string
		want time.Duration
		bad  bool
	}{
		{"plain", "42 (floodgate) S 1 42 42 0 -1 4194560 1 0 0 0 250 37 0 0 20 0 9 0 100 0 0", 2870 * time.Millisecond, false},
		{"a name with spaces and parentheses", "7 (a (b) c) R 1 7 7 0 -1 0 0 0 0 0 3 4 0 0 20 0 1 0 1 0 0", 70 * time.Millisecond, false},
		{"no name", "42 floodgate S 1", 0, true},
		{"too short", "42 (x) S 1 2 3", 0, true},
		{"not a number", "42 (x) S 1 42 42 0 -1 0 0 0 0 0 x 4 0", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStat(tt.stat)
			if (err != nil) != tt.bad || got != tt.want {
				t.Fatalf("parseStat = %v, %v; want %v, error %v", got, err, tt.want, tt.bad)
			}
		})
	}
}

func TestOwnProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	end := time.Now().Add(30 * time.Millisecond)
	for time.Now().Before(end) { // spend some CPU
	}
	c, err := cpuTime(os.Getpid())
	if err != nil || c <= 0 {
		t.Fatalf("cpuTime of this process = %v, %v; want > 0", c, err)
	}
	r, err := rss(os.Getpid())
	if err != nil || r < 1<<20 {
		t.Fatalf("rss of this process = %d, %v; want at least 1 MiB", r, err)
	}
}

func TestQuantile(t *testing.T) {
	var tl tally
	for i := 100; i >= 1; i-- {
		tl.lats = append(tl.lats, time.Duration(i)*time.Millisecond)
	}
	if got := tl.quantile(0.5); got != 51*time.Millisecond {
		t.Errorf("p50 = %v, want 51ms", got)
	}
	if got := tl.quantile(0.99); got != 100*time.Millisecond {
		t.Errorf("p99 = %v, want 100ms", got)
	}
	if got := (&tally{}).quantile(0.99); got != 0 {
		t.Errorf("p99 of nothing = %v, want 0", got)
	}
}

// TestWorkloads guards the claim of the benchmark: 10,000 distinct
// values, one hot one for the attack, three distinct descriptors.
func TestWorkloads(t *testing.T) {
	ws := workloads(10000)
	if len(ws) != 3 {
		t.Fatalf("%d workloads, want 3", len(ws))
	}
	for _, w := range ws {
		seen := map[string]bool{}
		for _, r := range w.reqs {
			if len(r.Descriptors) != w.decisions {
				t.Fatalf("%s: a request of %d descriptors, want %d", w.name, len(r.Descriptors), w.decisions)
			}
			for _, d := range r.Descriptors {
				seen[d.Entries[0].Key+"="+d.Entries[0].Value] = true
			}
		}
		want := map[string]int{"allowed": 10000, "attack": 1, "3 descriptors": 30000}[w.name]
		if len(seen) != want {
			t.Errorf("%s: %d distinct descriptors, want %d", w.name, len(seen), want)
		}
	}
}

func TestNullServer(t *testing.T) {
	req := workloads(10)[2].reqs[0]
	resp, err := nullServer{}.ShouldRateLimit(context.Background(), req)
	if err != nil || resp.GetOverallCode() != pb.RateLimitResponse_OK || len(resp.GetStatuses()) != 3 {
		t.Fatalf("null answered %v, %v; want OK with 3 statuses", resp, err)
	}
	for _, s := range resp.GetStatuses() {
		if s.GetCode() != pb.RateLimitResponse_OK {
			t.Fatalf("a status %v, want OK", s)
		}
	}
}
