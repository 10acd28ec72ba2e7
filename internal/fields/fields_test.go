package fields

import (
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/floodgate-rl/floodgate"
)

// PolicyMember writes what httpsfv would, for every name: by hand for a
// rule's plain name, escaped by httpsfv for any other.
func TestPolicyMemberMatchesHTTPSFV(t *testing.T) {
	for _, r := range []floodgate.Rule{
		{Name: "pix", Limit: 10, Window: time.Minute},
		{Name: "a.b-c_D9", Limit: 1, Window: 1500 * time.Millisecond},
		{Name: "x", Limit: 1 << 62, Window: 1 << 62},
		{Name: "x", Limit: -3, Window: 0},
		{Name: strings.Repeat("n", 64), Limit: 5, Window: time.Hour},
		{Name: strings.Repeat("n", 65), Limit: 5, Window: time.Hour},
		{Name: `quo"te`, Limit: 5, Window: time.Second},
		{Name: "sp ace", Limit: 5, Window: time.Second},
	} {
		it := httpsfv.NewItem(r.Name)
		it.Params.Add("q", min(max(r.Limit, 0), 999_999_999_999_999))
		it.Params.Add("w", min(max(1, Seconds(r.Window)), 999_999_999_999_999))
		want, werr := httpsfv.Marshal(httpsfv.List{it})
		got, err := PolicyMember(r)
		if got != want || (err == nil) != (werr == nil) {
			t.Errorf("PolicyMember(%q, %d, %v) = %q, %v; httpsfv says %q, %v", r.Name, r.Limit, r.Window, got, err, want, werr)
		}
	}
}
