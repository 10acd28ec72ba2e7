package enforce

import (
	"testing"
	"time"
)

// After stop (the Enforcer's Close), no summary is timed, but an event
// held inside an interval is still counted in the next line written: the
// gates keep deciding after Close, and their counts must not vanish.
func TestSometimesAfterStopKeepsTheCount(t *testing.T) {
	const interval = time.Minute
	var out lines
	s := &sometimes{interval: interval}
	s.stop()
	t0 := time.Now()
	s.do(t0, out.write)                  // written at once
	s.do(t0.Add(time.Second), out.write) // held: no timer after stop
	s.do(t0.Add(2*time.Second), out.write)
	s.do(t0.Add(interval+time.Second), out.write) // written, with the two held
	if got := out.get(); len(got) != 2 || got[0] != 0 || got[1] != 2 {
		t.Fatalf("lines %v; want [0 2]: the second line counts the two events held since the first", got)
	}
}
