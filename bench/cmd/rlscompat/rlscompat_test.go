package main

import (
	"slices"
	"strings"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

var (
	ok   = pb.RateLimitResponse_OK
	over = pb.RateLimitResponse_OVER_LIMIT
)

func ans(overall pb.RateLimitResponse_Code, st ...status1) answer {
	return answer{overall: overall, statuses: st}
}

func TestDiff(t *testing.T) {
	base := ans(ok, status1{ok, 4, "5/DAY", "-"}, status1{ok, 96, "100/DAY", "-"})
	tests := []struct {
		name string
		a    answer
		want []string
	}{
		{"the same", ans(ok, status1{ok, 4, "5/DAY", "-"}, status1{ok, 96, "100/DAY", "-"}), nil},
		{"remaining", ans(ok, status1{ok, 4, "5/DAY", "-"}, status1{ok, 95, "100/DAY", "-"}), []string{"[1].limit_remaining"}},
		{"codes", ans(over, status1{over, 4, "5/DAY", "-"}, status1{ok, 96, "100/DAY", "-"}), []string{"overall_code", "[0].code"}},
		{"current_limit", ans(ok, status1{ok, 4, "5/HOUR", "-"}, status1{ok, 96, "100/DAY", "-"}), []string{"[0].current_limit"}},
		{"duration_until_reset", ans(ok, status1{ok, 4, "5/DAY", "1s"}, status1{ok, 96, "100/DAY", "-"}), []string{"[0].duration_until_reset(1s/-)"}},
		{"headers", answer{overall: ok, statuses: base.statuses, headers: "RateLimit-Limit: 5"}, []string{`headers("RateLimit-Limit: 5"/"")`}},
		{"statuses", ans(ok, status1{ok, 4, "5/DAY", "-"}), []string{"statuses"}},
		{"an error", answer{err: "Unavailable"}, []string{"error"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := diff(tt.a, base); !slices.Equal(got, tt.want) {
				t.Fatalf("diff = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestReport(t *testing.T) {
	same := [2]answer{ans(ok, status1{ok, 1, "2/MINUTE", "-"}), ans(ok, status1{ok, 1, "2/MINUTE", "-"})}
	differ := [2]answer{ans(ok, status1{ok, 1, "2/MINUTE", "-"}), ans(ok, status1{ok, 0, "2/MINUTE", "-"})}
	tests := []struct {
		name    string
		allow   string
		got     [2]answer
		pass    bool
		message string
	}{
		{"the same", "", same, true, "PASS"},
		{"a difference not listed", "", differ, false, "FAIL: differs ([0].limit_remaining)"},
		{"a listed difference", "pairs", differ, true, "allowed, pairs"},
		{"a listed difference that did not show", "pairs", same, false, "expected difference pairs did not show"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			pass := report(&b, allowlist, false, []step{{name: "s", domain: "d", allow: tt.allow}}, [][2]answer{tt.got})
			if pass != tt.pass || !strings.Contains(b.String(), tt.message) {
				t.Fatalf("report passed %v, want %v; output:\n%s\nwant it to say %q", pass, tt.pass, b.String(), tt.message)
			}
		})
	}
}

// TestReportAgree checks an entry both services show alike (the xDS
// mode's share-threshold): the same answer passes only when it is the
// step's xdsWant.
func TestReportAgree(t *testing.T) {
	a := ans(ok, status1{ok, 5, "10/HOUR", "-"})
	b := ans(ok, status1{ok, 0, "10/HOUR", "-"})
	s := []step{{name: "s", domain: "d", xdsAllow: "share-threshold", xdsWant: "OK [OK 5 10/HOUR]"}}
	tests := []struct {
		name    string
		got     [2]answer
		pass    bool
		message string
	}{
		{"the wanted answer in both", [2]answer{a, a}, true, "allowed, share-threshold"},
		{"another answer in both", [2]answer{b, b}, false, "expected both to answer OK [OK 5 10/HOUR]"},
		{"different answers", [2]answer{a, b}, false, "FAIL: differs ([0].limit_remaining)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			pass := report(&out, xdsAllowlist, true, s, [][2]answer{tt.got})
			if pass != tt.pass || !strings.Contains(out.String(), tt.message) {
				t.Fatalf("report passed %v, want %v; output:\n%s\nwant it to say %q", pass, tt.pass, out.String(), tt.message)
			}
		})
	}
}

// TestScript checks the sequence against both allowlists: every step
// names a listed difference or none, in each mode, every listed
// difference is shown by a step, an entry both
// services show alike comes with the answer they must give, and the
// requests carry what the steps say.
func TestScript(t *testing.T) {
	for _, mode := range []struct {
		name string
		list []allowed
		xds  bool
	}{{"files", allowlist, false}, {"xDS", xdsAllowlist, true}} {
		listed := map[string]allowed{}
		for _, a := range mode.list {
			listed[a.id] = a
		}
		used := map[string]bool{}
		for _, s := range script() {
			allow, want := s.expect(mode.xds)
			a, ok := listed[allow]
			if allow != "" && !ok {
				t.Errorf("%s: step %q names %q, which the allowlist does not list", mode.name, s.name, allow)
			}
			if a.agree != (want != "") {
				t.Errorf("%s: step %q names %q with the answer %q: an answer goes with an entry both show alike, and only there", mode.name, s.name, allow, want)
			}
			used[allow] = true
		}
		for _, a := range mode.list {
			if !used[a.id] {
				t.Errorf("%s: no step shows %q", mode.name, a.id)
			}
		}
	}
	r := step{domain: "d", hits: 3, descs: []desc{dh(0, "a", "b", "c", "d"), d("e", "f")}}.request()
	if r.GetHitsAddend() != 3 || len(r.GetDescriptors()) != 2 || len(r.GetDescriptors()[0].GetEntries()) != 2 {
		t.Fatalf("request %v", r)
	}
	if h := r.GetDescriptors()[0].GetHitsAddend(); h == nil || h.GetValue() != 0 {
		t.Errorf("descriptor 0 hits_addend %v, want a set 0", h)
	}
	if h := r.GetDescriptors()[1].GetHitsAddend(); h != nil {
		t.Errorf("descriptor 1 hits_addend %v, want unset", h)
	}
}
