package httplimit_test

import (
	"net/http/httptest"
	"testing"

	"github.com/floodgate-rl/floodgate/httplimit"
)

// Join and First keep their own copy of the key functions: a caller that
// reuses its slice does not change the keys of a route built before.
func TestKeyFuncsOwnTheirSlice(t *testing.T) {
	fs := []httplimit.KeyFunc{httplimit.Header("X-A"), httplimit.Header("X-B")}
	join, first := httplimit.Join(fs...), httplimit.First(fs...)
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-A", "a")
	r.Header.Set("X-B", "b")
	r.Header.Set("X-C", "c")
	wantJoin, wantFirst := join(r), first(r)
	fs[0], fs[1] = httplimit.Header("X-C"), httplimit.Header("X-C")
	if got := join(r); got != wantJoin {
		t.Errorf("Join after the caller rewrote its slice: %q, want %q", got, wantJoin)
	}
	if got := first(r); got != wantFirst {
		t.Errorf("First after the caller rewrote its slice: %q, want %q", got, wantFirst)
	}
}
