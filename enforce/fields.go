package enforce

import (
	"strconv"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/floodgate-rl/floodgate"
)

// The answer's rate-limit fields, as draft-ietf-httpapi-ratelimit-headers-11
// defines them (Structured Field Lists, RFC 9651): HTTP headers, gRPC
// metadata and Envoy's response_headers_to_add all carry the same values.

// Seconds rounds d up to whole seconds; a negative d is 0.
func Seconds(d time.Duration) int64 {
	return int64((max(d, 0) + time.Second - 1) / time.Second)
}

// RetryAfter is the Retry-After value for d: whole seconds, rounded up,
// at least 1 (RFC 9110 §10.2.3 has no fractions, and 0 would invite an
// immediate retry).
func RetryAfter(d time.Duration) string { return strconv.FormatInt(max(1, Seconds(d)), 10) }

// sfMax is the largest Integer a structured field can carry (RFC 9651).
const sfMax = 999_999_999_999_999

func sfInt(n int64) int64 { return min(max(n, 0), sfMax) }

// PolicyMember serializes the RateLimit-Policy list member of rule r:
// "pix";q=10;w=60. The window is in whole seconds, rounded up, at least 1.
// Members of several rules are joined by ", " (RFC 9651 §4.1.1).
func PolicyMember(r floodgate.Rule) (string, error) {
	it := httpsfv.NewItem(r.Name)
	it.Params.Add("q", sfInt(r.Limit))
	it.Params.Add("w", max(1, Seconds(r.Window)))
	return httpsfv.Marshal(httpsfv.List{it})
}

// QuotaField serializes the RateLimit field of ds, one list member per
// decision: "pix";r=7;t=42, joined by ", ". r is the requests left and t
// the seconds, rounded up, until the quota is whole again. It is written
// by hand because it runs on every request: a policy name is 1-64 bytes of
// [A-Za-z0-9_.-] (floodgate.Rule.Validate), which an sf-string carries as
// it is, and r and t are clamped to the sf-integer range; the tests parse
// every field back with httpsfv.
func QuotaField(ds []floodgate.Decision) string {
	b := make([]byte, 0, 32*len(ds))
	for i, e := range ds {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, '"')
		b = append(b, e.Policy...)
		b = append(b, `";r=`...)
		b = strconv.AppendInt(b, sfInt(e.Remaining), 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, sfInt(Seconds(e.ResetAfter)), 10)
	}
	return string(b)
}

// Each returns the per-hit decisions of d, in the order of its hits: d.Each,
// or d itself for a decision on one hit.
func Each(d floodgate.Decision) []floodgate.Decision {
	if d.Each != nil {
		return d.Each
	}
	return []floodgate.Decision{d}
}
