package enforce_test

import (
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
)

// A peek reports the keys' figures as they stand: nothing was taken, so
// an allowed peek's Remaining does not count the hits it asked about (a
// hit of cost 0 asks about one), and its worst hit is picked from those
// figures; a denied peek's figures are as they stand too. The RLS
// service's statuses show them as they are.
func TestPeekFiguresAsTheyStand(t *testing.T) {
	v := newEnv(t)
	g := v.gate(t, enforce.Spec{Name: "peek-now"})
	a, b, s := rule("pn-a", 5), rule("pn-b", 10), rule("pn-s", 3)
	ctx := t.Context()
	for _, h := range []enforce.Hit{
		{Hit: floodgate.Hit{Rule: a, Key: "k", Cost: 2}},
		{Hit: floodgate.Hit{Rule: b, Key: "k", Cost: 6}},
		{Hit: floodgate.Hit{Rule: s, Key: "k"}},
	} {
		if res, err := g.Check(ctx, []enforce.Hit{h}); err != nil || !res.Allowed() {
			t.Fatalf("Check %s: %v, %v", h.Rule.Name, res.Outcome, err)
		}
	}
	// Now: a has 3 left, b 4, s 2. After the peeked hits a would have 2
	// and b 1: b would be the worst; as they stand, a is.
	res, err := g.Check(ctx, peeks(
		enforce.Hit{Hit: floodgate.Hit{Rule: b, Key: "k", Cost: 3}},
		enforce.Hit{Hit: floodgate.Hit{Rule: a, Key: "k", Cost: 1}},
		enforce.Hit{Hit: floodgate.Hit{Rule: s, Key: "k"}, Shadow: true},
	))
	if err != nil || res.Outcome != enforce.Allowed {
		t.Fatalf("Peek: %v, %v; want allowed", res.Outcome, err)
	}
	d := res.Decision
	if !d.Allowed || d.Recorded || d.Policy != "pn-a" || d.Limit != 5 || d.Remaining != 3 || d.RetryAfter != 0 {
		t.Errorf("Decision = %+v; want pn-a, allowed, not recorded, limit 5, 3 left", d)
	}
	if len(d.Each) != 2 || d.Each[0].Policy != "pn-b" || d.Each[0].Remaining != 4 || d.Each[1].Policy != "pn-a" || d.Each[1].Remaining != 3 {
		t.Errorf("Each = %+v; want pn-b with 4 left, pn-a with 3", d.Each)
	}
	if len(res.Shadow) != 1 || res.Shadow[0].Policy != "pn-s" || !res.Shadow[0].Allowed || res.Shadow[0].Remaining != 2 {
		t.Errorf("Shadow = %+v; want pn-s allowed with 2 left", res.Shadow)
	}
	// One hit, and a peek that is denied: figures as they stand, and
	// nothing was recorded by the peeks.
	one, err := g.Check(ctx, peeks(enforce.Hit{Hit: floodgate.Hit{Rule: a, Key: "k"}}))
	if err != nil || !one.Decision.Allowed || one.Decision.Each != nil || one.Decision.Remaining != 3 {
		t.Errorf("one-hit Peek = %+v, %v; want allowed with 3 left", one.Decision, err)
	}
	denied, err := g.Check(ctx, peeks(
		enforce.Hit{Hit: floodgate.Hit{Rule: a, Key: "k", Cost: 4}},
		enforce.Hit{Hit: floodgate.Hit{Rule: b, Key: "k"}},
	))
	if err != nil || denied.Outcome != enforce.Denied {
		t.Fatalf("Peek of cost 4: %v, %v; want denied", denied.Outcome, err)
	}
	if e := denied.Decision.Each; len(e) != 2 || e[0].Remaining != 3 || e[0].Allowed || e[1].Remaining != 4 || !e[1].Allowed {
		t.Errorf("denied Each = %+v; want pn-a denied with 3 left, pn-b allowed with 4", e)
	}
	if c, err := g.Check(ctx, []enforce.Hit{{Hit: floodgate.Hit{Rule: a, Key: "k"}}}); err != nil || c.Decision.Remaining != 2 {
		t.Errorf("Check after the peeks: %+v, %v; want 2 left (the peeks took nothing)", c.Decision, err)
	}
}

// peeks returns hits, each a peek.
func peeks(hits ...enforce.Hit) []enforce.Hit {
	for i := range hits {
		hits[i].Peek = true
	}
	return hits
}
