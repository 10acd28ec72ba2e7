package ginlimit_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/adapters/ginlimit"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/gin-gonic/gin"
)

// userID is a named integer type, as a database's ids often are.
type userID int64

// accountID is an id type of the kind an ORM gives, with a String method.
type accountID struct{ n int }

func (a accountID) String() string { return "acct-" + strconv.Itoa(a.n) }

// user is a model whose pointer is a fmt.Stringer.
type user struct{ name string }

func (u *user) String() string { return u.name }

// Authentication middlewares often set the user's id as a number (a
// database key) or a type of their own: Principal takes those too, not
// only strings, rather than leaving the per-user limit to limit nobody.
// Each principal gets 1 request a minute; values that read alike share a
// count ("7" and 7), others do not.
func TestPrincipalOfAnyIDType(t *testing.T) {
	for _, tc := range []struct {
		name   string
		id     func(n int) any
		shared any // an id of another type that names the same principal as id(1), or nil
	}{
		{"string", func(n int) any { return strconv.Itoa(n) }, 1},
		{"int", func(n int) any { return n }, "1"},
		{"uint64", func(n int) any { return uint64(n) }, int8(1)},
		{"named integer", func(n int) any { return userID(n) }, "1"},
		{"Stringer", func(n int) any { return accountID{n} }, "acct-1"},
		{"pointer Stringer", func(n int) any { return &user{"u" + strconv.Itoa(n)} }, "u1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gin.SetMode(gin.TestMode)
			hl := routes(t)
			mw, err := hl.Middleware(httplimit.Route{Name: "u", Limits: []httplimit.Limit{{
				Rule: floodgate.Rule{Name: "per-user", Limit: 1, Window: time.Minute}, Key: httplimit.Principal}}})
			if err != nil {
				t.Fatal(err)
			}
			var id any
			r := gin.New()
			r.Use(func(c *gin.Context) { c.Set("user", id); c.Next() }, ginlimit.Principal("user"))
			r.GET("/", ginlimit.Middleware(mw), func(c *gin.Context) { c.Status(http.StatusNoContent) })
			get := func(v any) int {
				id = v
				rec := httptest.NewRecorder()
				r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
				return rec.Code
			}
			for i, step := range []struct {
				id   any
				want int
			}{{tc.id(1), 204}, {tc.id(1), 429}, {tc.id(2), 204}, {tc.shared, 429}} {
				if got := get(step.id); got != step.want {
					t.Fatalf("request %d as %#v: %d, want %d", i, step.id, got, step.want)
				}
			}
			// No principal (a nil *user, a type Principal cannot read): the
			// per-user limit skips the request, and nothing panics.
			for _, v := range []any{(*user)(nil), 1.5, struct{}{}} {
				for range 2 {
					if got := get(v); got != 204 {
						t.Fatalf("request as %#v: %d, want 204 (skipped, no principal)", v, got)
					}
				}
			}
		})
	}
}
