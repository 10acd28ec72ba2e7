package redistest

import (
	"bufio"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) { Main(m) }

func TestAddrIsShared(t *testing.T) {
	a := Addr(t)
	if err := ping(a); err != nil {
		t.Fatalf("PING %s: %v", a, err)
	}
	if b := Addr(t); b != a {
		t.Fatalf("second Addr %s, first %s; the server must be shared", b, a)
	}
}

func TestAddrFromEnv(t *testing.T) {
	t.Setenv(EnvAddr, "192.0.2.1:6379")
	if got := Addr(t); got != "192.0.2.1:6379" {
		t.Fatalf("Addr = %q, want the address from %s", got, EnvAddr)
	}
}

func TestServerLifecycle(t *testing.T) {
	s := Start(t)
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("PING after Start: %v", err)
	}
	if !strings.HasPrefix(s.URL(), "redis://127.0.0.1:") {
		t.Fatalf("URL %q", s.URL())
	}
	s.Kill()
	s.Kill() // killing a killed server is fine
	if err := ping(s.Addr()); err == nil {
		t.Fatal("PING answered after Kill")
	}
	if err := s.Stop(); err == nil {
		t.Fatal("Stop of a killed server succeeded")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := ping(s.Addr()); err == nil {
		t.Fatal("PING answered while stopped")
	}
	if d := time.Since(start); d < 500*time.Millisecond {
		t.Fatalf("a stopped server failed PING after %v; it should hang until the deadline", d)
	}
	if err := s.Cont(); err != nil {
		t.Fatal(err)
	}
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("PING after Cont: %v", err)
	}
	if err := s.Restart(); err != nil { // restart a running server
		t.Fatal(err)
	}
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("PING after a second Restart: %v", err)
	}
}

func TestStartCluster(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ masters, replicas int }{{1, 0}, {3, 1}} {
		t.Run(fmt.Sprintf("%dx%d", tc.masters, tc.replicas), func(t *testing.T) {
			t.Parallel()
			c := StartCluster(t, tc.masters, tc.replicas)
			if n := len(c.Nodes()); n != tc.masters*(1+tc.replicas) {
				t.Fatalf("%d nodes", n)
			}
			addr := c.Nodes()[0].Addr()
			if slot, err := Command(addr, "CLUSTER", "KEYSLOT", "somekey"); err != nil || slot != "11058" {
				t.Fatalf("CLUSTER KEYSLOT: %q, %v", slot, err)
			}
			m, err := c.MasterOf(11058)
			if err != nil {
				t.Fatal(err)
			}
			if reply, err := Command(m.Addr(), "SET", "somekey", "1"); err != nil || reply != "OK" {
				t.Fatalf("SET on the master of the slot: %q, %v", reply, err)
			}
			if _, err := Command(m.Addr(), "MSET", "{a}x", "1", "{b}x", "2"); err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
				t.Fatalf("cross-slot MSET: %v; want CROSSSLOT", err)
			}
			if !strings.HasPrefix(c.URL(), "redis://"+addr) || strings.Count(c.URL(), "addr=") != len(c.Nodes())-1 {
				t.Fatalf("URL %q", c.URL())
			}
		})
	}
}

func TestStartSentinel(t *testing.T) {
	t.Parallel()
	s := StartSentinel(t, 1)
	m, err := s.Master()
	if err != nil || m != s.Servers()[0] {
		t.Fatalf("Master: %v, %v; want the first server", m, err)
	}
	if !strings.Contains(s.URL(), "master_set="+SentinelMasterName) || strings.Count(s.URL(), "addr=") != 2 {
		t.Fatalf("URL %q", s.URL())
	}
	if reply, err := Command(s.Servers()[1].Addr(), "INFO", "replication"); err != nil || !strings.Contains(reply, "role:slave") {
		t.Fatalf("replica: %v", err)
	}
}

// TestStartBinaryIsOptional checks that a missing optional server (such
// as valkey-server) skips, even under CI=true.
func TestStartBinaryIsOptional(t *testing.T) {
	t.Setenv("CI", "true")
	fake := &fakeTB{TB: t}
	inGoroutine(func() { StartBinary(fake, "floodgate-no-such-server") })
	if fake.skipped == "" || fake.failed != "" {
		t.Fatalf("skipped %q, failed %q; want a skip", fake.skipped, fake.failed)
	}
}

// fakeTB records Skip and Fatal and ends the goroutine, as testing.T does.
type fakeTB struct {
	testing.TB
	skipped, failed string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Skip(args ...any) {
	f.skipped = fmt.Sprint(args...)
	runtime.Goexit()
}

func (f *fakeTB) Fatal(args ...any) {
	f.failed = fmt.Sprint(args...)
	runtime.Goexit()
}

func (f *fakeTB) Skipf(format string, args ...any) { f.Skip(fmt.Sprintf(format, args...)) }

func (f *fakeTB) Fatalf(format string, args ...any) { f.Fatal(fmt.Sprintf(format, args...)) }

func inGoroutine(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}

// TestWithoutRedis checks what happens on a machine without redis-server:
// a visible skip, except under CI=true where it is a failure.
func TestWithoutRedis(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv(EnvAddr, "")
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		for name, f := range map[string]func(testing.TB){
			"Addr":          func(tb testing.TB) { Addr(tb) },
			"Start":         func(tb testing.TB) { Start(tb) },
			"StartCluster":  func(tb testing.TB) { StartCluster(tb, 3, 1) },
			"StartSentinel": func(tb testing.TB) { StartSentinel(tb, 1) },
		} {
			fake := &fakeTB{TB: t}
			inGoroutine(func() { f(fake) })
			if ci == "true" {
				if fake.failed == "" || !strings.Contains(fake.failed, "redis-server") {
					t.Errorf("%s with CI=true: failed %q, skipped %q; want a failure", name, fake.failed, fake.skipped)
				}
			} else if fake.skipped == "" || !strings.Contains(fake.skipped, "redis-server is not on PATH") {
				t.Errorf("%s without CI: failed %q, skipped %q; want a skip with the reason", name, fake.failed, fake.skipped)
			}
		}
	}
}

// TestReplyText: every kind of RESP2 reply, as Command returns it.
func TestReplyText(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		err      bool
	}{
		{"+OK\r\n", "OK", false},
		{":42\r\n", "42", false},
		{"$5\r\nhello\r\n", "hello", false},
		{"$-1\r\n", "", false},
		{"*2\r\n$9\r\nmaxmemory\r\n$1\r\n0\r\n", "maxmemory\n0", false},
		{"-ERR no\r\n", "", true},
		{"?\r\n", "", true},
	} {
		v, err := readReply(bufio.NewReader(strings.NewReader(tc.in)))
		got := ""
		if err == nil {
			got, err = text(v)
		}
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("reply %q = %q, %v", tc.in, got, err)
		}
	}
}
