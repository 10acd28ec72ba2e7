package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/bounds"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// override set picks the sliding-window log when -algorithm is not given,
// as the shorthands (floodgate.PerMinute...) do, and like them refuses to
// pick it for a limit above bounds.DefaultLog, whose log would
// cost kilobytes to megabytes per key in Redis (6 bytes a request: 600 KB
// at 100000/1h): it names the O(1) algorithms. Given explicitly, any
// algorithm takes any limit.
func TestOverrideSetRefusesACostlyDefault(t *testing.T) {
	url := "redis://" + redistest.Addr(t)
	prefix := "ovralg" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	big := strconv.Itoa(bounds.DefaultLog+1) + "/1h"
	for _, tc := range []struct {
		args []string
		code int
		want string // in stdout (0) or stderr (2)
	}{
		{[]string{"-limit", big}, 2, "token-bucket"},
		{[]string{"-limit", "100000/1h"}, 2, "-algorithm sliding-window"},
		{[]string{"-limit", strconv.Itoa(bounds.DefaultLog) + "/1h"}, 0, "sliding-window"},
		{[]string{"-limit", big, "-algorithm", "token-bucket"}, 0, "token-bucket"},
		{[]string{"-limit", big, "-algorithm", "sliding-window"}, 0, "sliding-window"},
	} {
		args := append([]string{"override", "set", "-rule", "api", "-prefix", prefix}, tc.args...)
		code, out, errs := cli(t, url, append(args, "cust-42")...)
		got := out
		if tc.code != 0 {
			got = errs
		}
		if code != tc.code || !strings.Contains(got, tc.want) {
			t.Errorf("%v = %d %q %q; want %d and %q", tc.args, code, out, errs, tc.code, tc.want)
		}
	}
}
