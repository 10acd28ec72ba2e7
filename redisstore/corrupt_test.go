package redisstore

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/breakerstore"
	"github.com/redis/rueidis"
)

// One key whose state Redis holds malformed, or of another type, fails the
// checks of that key and of no other: well past a breaker's threshold of
// such failures the breaker in front of the store is still closed, and
// another key is decided with its exact figures. The errors name neither
// the key nor the store's prefix, since their text may reach clients
// (RLS /json bodies, gRPC statuses).
func TestCorruptStateFailsOnlyItsKey(t *testing.T) {
	const failures = 3
	for _, alg := range algorithms {
		for _, corrupt := range []struct {
			name  string
			write func(c rueidis.Client, key string) rueidis.Completed
		}{
			{"garbage", func(c rueidis.Client, key string) rueidis.Completed {
				return c.B().Set().Key(key).Value("garbage").Build()
			}},
			{"wrong type", func(c rueidis.Client, key string) rueidis.Completed {
				return c.B().Rpush().Key(key).Element("x").Build()
			}},
		} {
			t.Run(alg.String()+"/"+corrupt.name, func(t *testing.T) {
				s := newStore(t)
				bs, err := breakerstore.New(s, breakerstore.Options{Failures: failures, Cooldown: time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				l, err := floodgate.New(bs, floodgate.Options{})
				if err != nil {
					t.Fatal(err)
				}
				rule := mustRule(t, "r", 10, time.Minute, alg)
				c := rawClient(t)
				if err := c.Do(ctx(t), corrupt.write(c, stateKey(s, rule, "user=alice"))).Error(); err != nil {
					t.Fatal(err)
				}
				leaks := func(what string, err error) {
					t.Helper()
					if err == nil {
						t.Fatalf("%s on the corrupt key: no error", what)
					}
					if !errors.Is(err, floodgate.ErrStoreUnavailable) || !errors.Is(err, floodgate.ErrCorruptState) {
						t.Errorf("%s on the corrupt key: %v; want an error wrapping ErrCorruptState and ErrStoreUnavailable", what, err)
					}
					for _, secret := range []string{"user=alice", s.prefix, "alice"} {
						if strings.Contains(err.Error(), secret) {
							t.Errorf("%s on the corrupt key: %q names %q; its text may reach clients", what, err, secret)
						}
					}
				}
				for range 4 * failures {
					_, err := l.Allow(ctx(t), rule, "user=alice")
					leaks("Allow", err)
				}
				_, err = l.Peek(ctx(t), floodgate.Hit{Rule: rule, Key: "user=alice"})
				leaks("Peek", err)
				_, err = l.Check(ctx(t), floodgate.Hit{Rule: rule, Key: "user=carol"}, floodgate.Hit{Rule: rule, Key: "user=alice"})
				leaks("Check of two keys", err)
				if got := bs.State(); got != breakerstore.Closed {
					t.Fatalf("breaker %v after %d failures of one corrupt key, want closed: the store answered", got, 4*failures)
				}

				d, err := l.Allow(ctx(t), rule, "user=bob")
				if err != nil {
					t.Fatalf("another key: %v", err)
				}
				if !d.Allowed || d.Policy != "r" || d.Limit != 10 || d.Remaining != 9 || d.RetryAfter != 0 {
					t.Fatalf("another key: %+v; want allowed, limit 10, remaining 9, no retry", d)
				}
				// The time until the quota is whole again: exact where it
				// does not depend on where now falls in a window.
				switch alg {
				case floodgate.SlidingWindow:
					if d.ResetAfter != time.Minute {
						t.Errorf("another key: ResetAfter %v, want 1m0s", d.ResetAfter)
					}
				case floodgate.TokenBucket:
					if d.ResetAfter != 6*time.Second {
						t.Errorf("another key: ResetAfter %v, want 6s (one interval)", d.ResetAfter)
					}
				case floodgate.FixedWindow:
					if d.ResetAfter <= 0 || d.ResetAfter > time.Minute {
						t.Errorf("another key: ResetAfter %v, want within the window", d.ResetAfter)
					}
				case floodgate.SlidingWindowCounter:
					if d.ResetAfter <= time.Minute || d.ResetAfter > 2*time.Minute {
						t.Errorf("another key: ResetAfter %v, want within the window after this one", d.ResetAfter)
					}
				}
				if got := bs.State(); got != breakerstore.Closed {
					t.Fatalf("breaker %v, want closed", got)
				}

			})
		}
	}
}
