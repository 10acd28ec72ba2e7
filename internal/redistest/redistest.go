// Package redistest gives tests a real Redis to run against.
//
// [Addr] returns the address of a Redis shared by every test of the test
// binary: the one named by the environment variable FLOODGATE_REDIS_ADDR,
// or else a redis-server that the package starts on a free loopback port
// (without persistence) the first time it is asked. [Start] starts a
// dedicated server that a test may kill, restart, stop and continue, to
// play failures. [StartCluster] starts a Redis Cluster (the tests use 3
// masters and 3 replicas, built by redis-cli --cluster create) and
// [StartSentinel] a master and replicas watched by three sentinels, both
// tuned to fail over within seconds; [StartBinary] starts an optional
// compatible server such as valkey-server.
//
// Without redis-server on PATH and without FLOODGATE_REDIS_ADDR, tests
// that need Redis are skipped with the reason, except when the environment
// has CI=true: there they fail, so that CI never passes by skipping.
//
// A test binary that uses Addr should run its tests through [Main], which
// stops the shared server when the tests end:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
//
// Without it, the shared server still dies with the test binary (the
// kernel kills it when the binary exits), but its empty temporary
// directory is left behind.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/syncbuf"
)

// EnvAddr names the environment variable that points the tests at an
// existing Redis ("127.0.0.1:6379"). Tests may write to that Redis's
// database 0 under random key prefixes; they never flush it.
const EnvAddr = "FLOODGATE_REDIS_ADDR"

// startTimeout bounds the wait for a started server to answer PING.
const startTimeout = 10 * time.Second

// shared is the server behind Addr. It is package state, started once per
// test binary, because it must outlive any single test: a server per test
// would cost a process start each, and tests share it safely through
// random key prefixes. Only Main stops it.
var shared struct {
	once sync.Once
	srv  *Server
	err  error
}

// Addr returns the address ("host:port") of the Redis shared by the tests
// of this binary. It skips t (or fails it, under CI=true) when no Redis
// can be had.
func Addr(t testing.TB) string {
	t.Helper()
	if addr := os.Getenv(EnvAddr); addr != "" {
		return addr
	}
	requireBinary(t)
	shared.once.Do(func() {
		dir, err := os.MkdirTemp("", "redistest-")
		if err != nil {
			shared.err = err
			return
		}
		shared.srv, shared.err = start(dir)
		if shared.err != nil {
			os.RemoveAll(dir)
		}
	})
	if shared.err != nil {
		t.Fatalf("redistest: starting the shared redis-server: %v", shared.err)
	}
	return shared.srv.Addr()
}

// Main runs the tests of m, stops the shared server if one was started,
// and exits with the tests' exit code. Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if shared.srv != nil {
		shared.srv.Kill()
		os.RemoveAll(shared.srv.dir)
	}
	os.Exit(code)
}

// requireBinary skips t, or fails it under CI=true, when redis-server is
// not on PATH.
func requireBinary(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err == nil {
		return
	}
	const why = "redistest: redis-server is not on PATH and " + EnvAddr + " is not set; install redis-server (Debian: apt-get install redis-server) to run the Redis tests"
	if os.Getenv("CI") == "true" {
		t.Fatal(why + " (CI=true: Redis tests must run)")
	}
	t.Skip(why)
}

// Server is a redis-server process run for a test, listening on a
// loopback port, with persistence off. Its methods are safe for
// concurrent use.
type Server struct {
	addr  string
	dir   string
	bin   string   // the server binary; "" means redis-server
	conf  string   // a configuration file, passed first; "" for none
	extra []string // more arguments

	mu   sync.Mutex
	proc *os.Process     // guarded by mu; nil while killed
	done chan struct{}   // guarded by mu; closed when proc has exited
	out  *syncbuf.Buffer // the server's output, for failure messages
}

// Start starts a dedicated redis-server for t, which t's cleanup kills.
// Unlike Addr it needs redis-server on PATH even when FLOODGATE_REDIS_ADDR
// is set, since the test controls the process.
func Start(t testing.TB) *Server {
	t.Helper()
	requireBinary(t)
	s, err := start(t.TempDir())
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(s.Kill)
	return s
}

// StartBinary starts a dedicated server for t from another binary that
// speaks the Redis protocol and takes redis-server's flags, such as
// "valkey-server"; t's cleanup kills it. Such a binary is optional: when it
// is not on PATH, t is skipped with the reason, even under CI=true.
func StartBinary(t testing.TB, bin string) *Server {
	t.Helper()
	if _, err := exec.LookPath(bin); err != nil {
		t.Skipf("redistest: %s is not on PATH; install it to run these tests (optional, also in CI)", bin)
	}
	s, err := startServer(&Server{dir: t.TempDir(), bin: bin})
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(s.Kill)
	return s
}

// start runs a server in dir on a free port, retrying with another port if
// one is taken between choosing and binding it.
func start(dir string, extra ...string) (*Server, error) {
	return startServer(&Server{dir: dir, extra: extra})
}

// startServer launches proto (its addr unset) on a free port, retrying
// with another port if one is taken between choosing and binding it. A
// configuration file, if any, is written by the caller before each
// attempt through setup.
func startServer(proto *Server, setup ...func(s *Server) error) (*Server, error) {
	var err error
	for range 3 {
		var port int
		if port, err = freePort(); err != nil {
			return nil, err
		}
		s := &Server{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: proto.dir, bin: proto.bin, conf: proto.conf, extra: proto.extra}
		for _, f := range setup {
			if err = f(s); err != nil {
				return nil, err
			}
		}
		if err = s.launch(); err == nil {
			return s, nil
		}
	}
	return nil, err
}

// Addr returns the server's address, "127.0.0.1:port". It stays the same
// across Restart.
func (s *Server) Addr() string { return s.addr }

// URL returns "redis://" followed by Addr.
func (s *Server) URL() string { return "redis://" + s.addr }

// Kill kills the server with SIGKILL and waits for it to exit. Killing a
// killed server does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	_ = s.proc.Kill() // SIGKILL works on a stopped process too
	<-s.done
	s.proc, s.done = nil, nil
}

// Restart starts the server again on the same address, killing it first
// if it runs. The data is gone: persistence is off.
func (s *Server) Restart() error {
	s.Kill()
	return s.launch()
}

// Stop freezes the server with SIGSTOP: connections stay open and
// commands go unanswered, as with a hung or partitioned Redis.
func (s *Server) Stop() error { return s.signal(syscall.SIGSTOP) }

// Cont resumes a server frozen by Stop with SIGCONT.
func (s *Server) Cont() error { return s.signal(syscall.SIGCONT) }

// Output returns what the server has written to stdout and stderr.
func (s *Server) Output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.out == nil {
		return ""
	}
	return s.out.String()
}

func (s *Server) signal(sig os.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return fmt.Errorf("redistest: %v to %s: the server is not running", sig, s.addr)
	}
	return s.proc.Signal(sig)
}

// launch starts the process and waits until it answers PING.
func (s *Server) launch() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return fmt.Errorf("redistest: %s is already running", s.addr)
	}
	_, port, _ := net.SplitHostPort(s.addr)
	var args []string
	if s.conf != "" {
		args = append(args, s.conf)
	}
	args = append(args,
		"--port", port, "--bind", "127.0.0.1", "--dir", s.dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		"--loglevel", "warning", "--logfile", "",
	)
	args = append(args, s.extra...)
	bin := s.bin
	if bin == "" {
		bin = "redis-server"
	}
	out := &syncbuf.Buffer{}
	started := make(chan error, 1)
	done := make(chan struct{})
	var proc *os.Process
	// The goroutine that starts the process keeps its OS thread for the
	// process's whole life: Pdeathsig fires when the creating thread
	// exits, not the process, and the Go runtime may retire an unlocked
	// thread at any time.
	go func() {
		runtime.LockOSThread()
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = out, out
		// The kernel kills the server if the test binary dies first.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			started <- err
			close(done)
			return
		}
		proc = cmd.Process
		started <- nil
		_ = cmd.Wait()
		close(done)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("redistest: starting %s: %w", bin, err)
	}
	s.proc, s.done, s.out = proc, done, out
	deadline := time.Now().Add(startTimeout)
	for {
		err := ping(s.addr)
		if err == nil {
			return nil
		}
		select {
		case <-done:
			s.proc, s.done = nil, nil
			return fmt.Errorf("redistest: %s on %s exited: %s", bin, s.addr, strings.TrimSpace(out.String()))
		default:
		}
		if time.Now().After(deadline) {
			_ = proc.Kill()
			<-done
			s.proc, s.done = nil, nil
			return fmt.Errorf("redistest: %s on %s did not answer within %v: %w; output: %s", bin, s.addr, startTimeout, err, strings.TrimSpace(out.String()))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ping sends PING and expects PONG.
func ping(addr string) error {
	reply, err := Command(addr, "PING")
	if err == nil && reply != "PONG" {
		err = fmt.Errorf("PING answered %q", reply)
	}
	return err
}

// Command sends one command to the Redis at addr, in RESP on a new
// connection, and returns its reply as text: a simple string, bulk string
// or integer as it is, a null as "", an array's elements joined by
// newlines. An error reply is an error. It is the test harness's one Redis
// client, for the commands no store sends (CONFIG, INFO, SCRIPT FLUSH).
func Command(addr string, args ...string) (string, error) {
	v, err := do(addr, args...)
	if err != nil {
		return "", err
	}
	return text(v)
}

func text(v any) (string, error) {
	switch v := v.(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			s, err := text(e)
			if err != nil {
				return "", err
			}
			parts[i] = s
		}
		return strings.Join(parts, "\n"), nil
	}
	return "", fmt.Errorf("redistest: reply %v is not text", v)
}

// do sends one command in RESP on a new connection and returns its reply:
// a string for a simple string, bulk string or integer, nil for a null, a
// []any for an array. An error reply is an error.
func do(addr string, args ...string) (any, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	var req strings.Builder
	fmt.Fprintf(&req, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&req, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, req.String()); err != nil {
		return nil, err
	}
	return readReply(bufio.NewReader(c))
}

// readReply reads one RESP2 reply.
func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return nil, errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < -1 {
			return nil, fmt.Errorf("bad bulk reply %q", line)
		}
		if n == -1 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < -1 || n > 1<<20 {
			return nil, fmt.Errorf("bad array reply %q", line)
		}
		if n == -1 {
			return nil, nil
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = readReply(r); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("unexpected reply %q", line)
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return 0, errors.New("redistest: listener has no TCP address")
	}
	return addr.Port, nil
}
