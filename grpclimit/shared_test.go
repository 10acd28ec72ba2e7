package grpclimit_test

import (
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/grpclimit"
)

// Options that New refuses leave a shared Enforcer as they found it, as a
// refused httplimit route does: the corrected Options, with the same rule
// name at other parameters, are then accepted.
func TestRefusedOptionsClaimNoRuleOnASharedEnforcer(t *testing.T) {
	e := newEnv(t, envOptions{})
	ip := grpclimit.ClientIP(nil)
	refused := grpclimit.Options{Enforcer: e.enf, Methods: map[string]grpclimit.Method{
		emptyCall: {Limits: []grpclimit.Limit{{Rule: rule(t, "shared-a", 10, time.Minute), Key: ip}}},
		unaryCall: {Limits: []grpclimit.Limit{{Rule: rule(t, "shared-b", 10, time.Minute)}}}, // no Key
	}}
	if _, err := grpclimit.New(refused); err == nil {
		t.Fatal("New accepted a limit with no Key")
	}
	clash := grpclimit.Options{Enforcer: e.enf, Methods: map[string]grpclimit.Method{
		emptyCall: {Limits: []grpclimit.Limit{{Rule: rule(t, "shared-c", 10, time.Minute), Key: ip}}},
		unaryCall: {Limits: []grpclimit.Limit{{Rule: rule(t, "shared-c", 30, time.Minute), Key: ip}}},
	}}
	if _, err := grpclimit.New(clash); err == nil {
		t.Fatal("New accepted two methods that give one rule name two rules")
	}
	fixed := grpclimit.Options{Enforcer: e.enf, Methods: map[string]grpclimit.Method{
		emptyCall: {Limits: []grpclimit.Limit{{Rule: rule(t, "shared-a", 20, time.Minute), Key: ip}}},
		unaryCall: {Limits: []grpclimit.Limit{{Rule: rule(t, "shared-c", 40, time.Minute), Key: ip}}},
	}}
	if _, err := grpclimit.New(fixed); err != nil {
		t.Fatalf("New after a refused Options: %v; want the refused Options to have claimed nothing", err)
	}
}
