package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate"
)

// Redis's refusals of what one key holds, in the forms the drivers and
// servers give them, become a *StateError that names the rule and not
// the key; every other error is left to count as the store's.
func TestStateErrorClassifiesReplies(t *testing.T) {
	s := &Store{prefix: "fg:"}
	alice, bob := "fg:{login:user=alice}:w:1m0s", "fg:{pix:user=bob}:t:1m0s"
	const sha = "a7bed89dfe613b586271b3c8d611e8fb24c652ed"
	for _, tc := range []struct {
		name      string
		err       error
		keys      []string
		state     bool
		rule, key string
		text      string // what follows "redisstore: store unavailable: corrupt state: "
	}{
		{"Redis 7 malformed", errors.New("user_script:324: redisstore: sliding window " + alice + ": malformed state script: " + sha + ", on @user_script:324."),
			[]string{bob, alice}, true, "login", alice, `rule "login" (sliding-window): malformed state`},
		{"Redis 6 malformed", errors.New("ERR Error running script (call to f_" + sha + "): @user_script:522: user_script:522: redisstore: token bucket " + bob + ": malformed state"),
			[]string{alice, bob}, true, "pix", bob, `rule "pix" (token-bucket): malformed state`},
		{"another script error naming a key", errors.New("user_script:9: redisstore: " + bob + ": epoch out of range, see " + alice),
			[]string{alice, bob}, true, "pix", bob, `rule "pix" (token-bucket): epoch out of range, see <key>`},
		{"WRONGTYPE, one key", errors.New("WRONGTYPE Operation against a key holding the wrong kind of value script: " + sha + ", on @user_script:135."),
			[]string{alice}, true, "login", alice, `rule "login" (sliding-window): the key holds a value of another type`},
		{"WRONGTYPE, keys of two rules", errors.New("WRONGTYPE Operation against a key holding the wrong kind of value"),
			[]string{alice, bob}, true, "", "", "a key of the check: the key holds a value of another type"},
		{"WRONGTYPE, two keys of one rule", errors.New("WRONGTYPE Operation against a key holding the wrong kind of value"),
			[]string{alice, "fg:{login:user=carol}:w:1m0s"}, true, "login", "", `rule "login": the key holds a value of another type`},
		{"malformed, key not named", errors.New("<string>:324: malformed state"),
			[]string{alice, bob}, true, "", "", "a key of the check: malformed state"},

		{"Lua runtime error", errors.New("user_script:10: attempt to compare nil with number script: " + sha + ", on @user_script:10."), []string{alice}, false, "", "", ""},
		{"OOM", errors.New("OOM command not allowed when used memory > 'maxmemory'. script: " + sha + ", on @user_script:40."), []string{alice}, false, "", "", ""},
		{"BUSY", errors.New("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSCRIPT."), []string{alice}, false, "", "", ""},
		{"READONLY", errors.New("READONLY You can't write against a read only replica. script: " + sha), []string{alice}, false, "", "", ""},
		{"malformed reply", fmt.Errorf("%w: value 3: not an integer", errMalformed), []string{alice}, false, "", "", ""},
		{"connection", errors.New("dial tcp 127.0.0.1:6379: connect: connection refused"), []string{alice}, false, "", "", ""},
		{"deadline", context.DeadlineExceeded, []string{alice}, false, "", "", ""},
		{"cross slot", sameSlot([]string{alice, bob}), []string{alice, bob}, false, "", "", ""},
		{"already the store's", fmt.Errorf("redisstore: connect: %w: %s", floodgate.ErrStoreUnavailable, alice), []string{alice}, false, "", "", ""},
	} {
		se := s.stateError(tc.err, tc.keys)
		if (se != nil) != tc.state {
			t.Errorf("%s: StateError %v, want one: %v", tc.name, se, tc.state)
			continue
		}
		if se == nil {
			continue
		}
		if se.Rule != tc.rule || se.Key != tc.key {
			t.Errorf("%s: Rule %q, Key %q; want %q, %q", tc.name, se.Rule, se.Key, tc.rule, tc.key)
		}
		if want := "redisstore: store unavailable: corrupt state: " + tc.text; se.Error() != want {
			t.Errorf("%s: %q, want %q", tc.name, se, want)
		}
		var err error = se
		if !errors.Is(err, floodgate.ErrCorruptState) || !errors.Is(err, floodgate.ErrStoreUnavailable) {
			t.Errorf("%s: %v does not wrap ErrCorruptState and ErrStoreUnavailable", tc.name, err)
		}
		for _, secret := range []string{"fg:", "user=", sha} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%s: %q names %q", tc.name, err, secret)
			}
		}
	}
}

// A check whose keys fall in different Cluster slots is reported by slot,
// not by key.
func TestCrossSlotErrorNamesNoKey(t *testing.T) {
	err := sameSlot([]string{"fg:{login:user=alice}:w:1m0s", "fg:{pix:user=bob}:t:1m0s"})
	if !errors.Is(err, errCrossSlot) {
		t.Fatalf("%v, want errCrossSlot", err)
	}
	if strings.Contains(err.Error(), "user=") || strings.Contains(err.Error(), "fg:") {
		t.Fatalf("%q names a key", err)
	}
}
