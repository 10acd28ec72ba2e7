package main

import (
	"strings"
	"testing"
)

// Asking for help is not bad input: the usage goes to stdout and the exit
// status is 0, for the command and for each subcommand, as with Go's own
// flag.ExitOnError. The top-level help does not start the service.
func TestHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the usage printed
	}{
		{[]string{"-h"}, "floodgate peek|reset -rule"},
		{[]string{"--help"}, "floodgate [serve] [-config-dir DIR]"},
		{[]string{"help"}, "floodgate blocked -rule"},
		{[]string{"peek", "-h"}, "floodgate peek|reset -rule"},
		{[]string{"reset", "-help"}, "floodgate peek|reset -rule"},
		{[]string{"blocked", "-h"}, "floodgate blocked -rule"},
		{[]string{"override", "set", "-h"}, "floodgate override set -rule NAME -limit"},
		{[]string{"override", "ls", "--help"}, "floodgate override ls [-config DIR -domain DOMAIN]"},
	} {
		code, out, errs := cli(t, "", tc.args...)
		if code != 0 || !strings.Contains(out, tc.want) || errs != "" {
			t.Errorf("floodgate %s: exit %d, out %q, errors %q; want exit 0 and the usage (%q) on stdout", strings.Join(tc.args, " "), code, out, errs, tc.want)
		}
	}
	if code, _, errs := cli(t, "", "peek", "-bogus"); code != 2 || !strings.Contains(errs, "-bogus") {
		t.Errorf("an unknown flag: exit %d, errors %q; want exit 2 naming it", code, errs)
	}
}
