package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/internal/bounds"
)

func constant(k string) httplimit.KeyFunc { return func(*http.Request) string { return k } }

// FuzzJoin checks that Join and First never give two different
// combinations the same key.
func FuzzJoin(f *testing.F) {
	f.Add("a", "bc", "ab", "c")
	f.Add("1:a", "b", "1", "a1:b")
	f.Add("", "x", "x", "")
	f.Fuzz(func(t *testing.T, a, b, c, d string) {
		req := httptest.NewRequest("GET", "/", nil)
		k1 := httplimit.Join(constant(a), constant(b))(req)
		k2 := httplimit.Join(constant(c), constant(d))(req)
		if k1 != "" && k1 == k2 && (a != c || b != d) {
			t.Fatalf("Join(%q, %q) and Join(%q, %q) share the key %q", a, b, c, d, k1)
		}
		if (k1 == "") != (a == "" || b == "") {
			t.Fatalf("Join(%q, %q) = %q: empty exactly when a part is", a, b, k1)
		}
		f1 := httplimit.First(constant(""), constant(a))(req)
		f2 := httplimit.First(constant(c), constant(""))(req)
		if f1 != "" && f1 == f2 {
			t.Fatalf("First: the second function's %q and the first's %q share the key %q", a, c, f1)
		}
	})
}

// A key longer than bounds.KeyLen is replaced by its digest rather
// than failing the decision.
func TestLongKeysAreDigested(t *testing.T) {
	e := newEnv(t, envOptions{})
	long := strings.Repeat("k", bounds.KeyLen+1)
	h := e.handler(t, httplimit.Route{Failure: enforce.FailClosed, Limits: []httplimit.Limit{{Rule: rule(t, "r", 1, time.Minute), Key: constant(long)}}})
	if rec := do(h, "192.0.2.1:1"); rec.Code != 200 {
		t.Fatalf("a %d-byte key: %d", len(long), rec.Code)
	}
	if rec := do(h, "192.0.2.1:1"); rec.Code != 429 || rec.Header().Get("RateLimit") == "" {
		t.Fatalf("the same long key again: %d %v, want a 429 from the store", rec.Code, rec.Header())
	}
}
