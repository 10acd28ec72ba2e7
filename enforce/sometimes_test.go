package enforce

import (
	"sync"
	"testing"
	"time"
)

// lines records what a sometimes writes.
type lines struct {
	mu   sync.Mutex
	held []int
}

func (l *lines) write(held int) {
	l.mu.Lock()
	l.held = append(l.held, held)
	l.mu.Unlock()
}

func (l *lines) get() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int(nil), l.held...)
}

// TestSometimesWritesAtTheInterval: an event an interval or more after the
// last line is written at once; one inside the interval is held, and the
// events held are written as one line, with their count, when the
// interval ends.
func TestSometimesWritesAtTheInterval(t *testing.T) {
	const interval = 50 * time.Millisecond
	var out lines
	s := &sometimes{interval: interval}
	defer s.stop()
	t0 := time.Now()
	s.do(t0, out.write)
	s.do(t0.Add(interval), out.write) // exactly one interval later
	if got := out.get(); len(got) != 2 || got[0] != 0 || got[1] != 0 {
		t.Fatalf("lines %v; want two written at once, none held", got)
	}
	now := time.Now()
	s.do(now, out.write)
	s.do(now, out.write)
	s.do(now, out.write)
	if got := out.get(); len(got) != 2 {
		t.Fatalf("lines %v; want the events inside the interval held", got)
	}
	for deadline := time.Now().Add(5 * time.Second); len(out.get()) < 3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the held events were never written")
		}
	}
	if got := out.get(); len(got) != 3 || got[2] != 2 {
		t.Fatalf("lines %v; want a third line, written when the interval ended, saying 2 more were held", got)
	}
}

// TestFailureModeString names the modes, and an unknown one by number.
func TestFailureModeString(t *testing.T) {
	for m, want := range map[FailureMode]string{FailLocal: "local", FailClosed: "closed", FailOpen: "open", FailError: "error", 4: "FailureMode(4)", 200: "FailureMode(200)"} {
		if got := m.String(); got != want {
			t.Errorf("FailureMode(%d).String() = %q; want %q", uint8(m), got, want)
		}
	}
}
