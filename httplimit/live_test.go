package httplimit_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/rlconfig"
)

// A limit under live limits (the Routes's overrides) follows the configuration file: per key
// values, a reload that raises the limit keeps the count, an invalid file
// keeps the old limits, and the fields report the rule in force.
func TestLiveLimitsFollowTheFile(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "limits.yaml"), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	file := func(every, vip int) string {
		return strings.NewReplacer("EVERY", strconv.Itoa(every), "VIP", strconv.Itoa(vip)).Replace(`
domain: bank
descriptors:
  - key: pix
    rate_limit: {unit: minute, requests_per_unit: EVERY}
  - key: pix
    value: vip
    rate_limit: {unit: minute, requests_per_unit: VIP}
`)
	}
	write(file(3, 5))
	w, err := rlconfig.Watch(dir, rlconfig.WatchOptions{Debounce: time.Hour}) // reloads by hand only
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	e := newEnv(t, envOptions{overrides: rlconfig.NewRules("bank", w.Config)})
	h := e.handler(t, httplimit.Route{Limits: []httplimit.Limit{{
		Rule: rule(t, "pix", 2, time.Minute), Key: httplimit.Header("Account")}}})
	admitted := func(account string, n int) (ok int, last answer) {
		for range n {
			rec := do(h, "192.0.2.1:1", "Account", account)
			if rec.Code == 200 {
				ok++
			}
			last = answer{rec.Code, rec.Header().Get("RateLimit-Policy"), rec.Header().Get("RateLimit")}
		}
		return ok, last
	}
	if got, last := admitted("alice", 5); got != 3 || last.policy != `"pix";q=3;w=60` || last.quota != `"pix";r=0;t=60` {
		t.Errorf("alice under 3/min from the file: %d admitted, last %+v", got, last)
	}
	if got, last := admitted("vip", 7); got != 5 || last.policy != `"pix";q=5;w=60` {
		t.Errorf("vip under its own 5/min: %d admitted, last %+v", got, last)
	}
	write(file(4, 5)) // raised: alice's 3 still count
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	if got, _ := admitted("alice", 3); got != 1 {
		t.Errorf("after raising to 4: %d more for alice, want 1", got)
	}
	write("domain: bank\ndescriptors:\n  - key: pix\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	if err := w.Reload(); err == nil {
		t.Fatal("an invalid file was accepted")
	}
	if got, last := admitted("bob", 5); got != 4 || last.policy != `"pix";q=4;w=60` {
		t.Errorf("after an invalid file: %d admitted for bob with %+v, want the old 4/min", got, last)
	}
	write("domain: other\n")
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	if got, last := admitted("carol", 3); got != 2 || last.policy != `"pix";q=2;w=60` {
		t.Errorf("with no rule in the file: %d admitted for carol with %+v, want the route's own 2/min", got, last)
	}
}

// answer is what a response said.
type answer struct {
	code          int
	policy, quota string
}
