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
	base := ans(ok, status1{ok, 4, "5/DAY"}, status1{ok, 96, "100/DAY"})
	tests := []struct {
		name string
		a    answer
		want []string
	}{
		{"the same", ans(ok, status1{ok, 4, "5/DAY"}, status1{ok, 96, "100/DAY"}), nil},
		{"remaining", ans(ok, status1{ok, 4, "5/DAY"}, status1{ok, 95, "100/DAY"}), []string{"[1].limit_remaining"}},
		{"codes", ans(over, status1{over, 4, "5/DAY"}, status1{ok, 96, "100/DAY"}), []string{"overall_code", "[0].code"}},
		{"current_limit", ans(ok, status1{ok, 4, "5/HOUR"}, status1{ok, 96, "100/DAY"}), []string{"[0].current_limit"}},
		{"statuses", ans(ok, status1{ok, 4, "5/DAY"}), []string{"statuses"}},
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
	same := [2]answer{ans(ok, status1{ok, 1, "2/MINUTE"}), ans(ok, status1{ok, 1, "2/MINUTE"})}
	differ := [2]answer{ans(ok, status1{ok, 1, "2/MINUTE"}), ans(ok, status1{ok, 0, "2/MINUTE"})}
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
			pass := report(&b, []step{{name: "s", domain: "d", allow: tt.allow}}, [][2]answer{tt.got})
			if pass != tt.pass || !strings.Contains(b.String(), tt.message) {
				t.Fatalf("report passed %v, want %v; output:\n%s\nwant it to say %q", pass, tt.pass, b.String(), tt.message)
			}
		})
	}
}

// TestScript checks the sequence against the allowlist: every step names
// a listed difference or none, every listed difference but "not compared"
// is shown by a step, and the requests carry what the steps say.
func TestScript(t *testing.T) {
	listed := map[string]bool{}
	for _, a := range allowlist {
		listed[a.id] = true
	}
	used := map[string]bool{}
	for _, s := range script() {
		if s.allow != "" && !listed[s.allow] {
			t.Errorf("step %q names %q, which the allowlist does not list", s.name, s.allow)
		}
		used[s.allow] = true
	}
	for _, a := range allowlist {
		if !used[a.id] && a.id != "not compared" {
			t.Errorf("no step shows %q", a.id)
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
