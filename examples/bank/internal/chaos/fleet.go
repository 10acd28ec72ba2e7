package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/floodgate-rl/floodgate/internal/syncbuf"
)

// Replica is one bankapi process, on a fixed loopback address that stays
// the same across restarts. Its methods are safe for concurrent use.
type Replica struct {
	// N numbers the replica from 1.
	N int
	// Addr is its listening address, "127.0.0.1:port".
	Addr string
	// MetricsAddr is where it serves /metrics (METRICS_ADDR), apart from
	// the API.
	MetricsAddr string

	bin string
	env []string
	log syncbuf.Buffer // its stdout and stderr, across restarts

	mu       sync.Mutex
	pid      int   // guarded by mu; 0 while stopped
	exit     *exit // guarded by mu; the running process's end
	restarts int   // guarded by mu
}

// NewReplica returns replica n of the binary bin, to be run with env (on
// top of this process's environment), LISTEN_ADDR=addr and METRICS_ADDR
// on a free loopback port.
func NewReplica(n int, bin, addr string, env []string) *Replica {
	maddr, err := FreeAddr()
	if err != nil {
		maddr = "127.0.0.1:0" // Metrics will fail; the replica still runs
	}
	return &Replica{N: n, Addr: addr, MetricsAddr: maddr, bin: bin,
		env: append(append(os.Environ(), env...), "LISTEN_ADDR="+addr, "METRICS_ADDR="+maddr)}
}

// Start starts the process and waits until it answers /healthz, at most
// 30s.
func (r *Replica) Start() error {
	r.mu.Lock()
	running := r.pid != 0
	r.mu.Unlock()
	if running {
		return fmt.Errorf("chaos: replica %d is running", r.N)
	}
	fmt.Fprintf(&r.log, "--- chaos: replica %d starts\n", r.N)
	started := make(chan error, 1)
	ex := &exit{done: make(chan struct{})}
	// The goroutine that starts the process keeps its OS thread until the
	// process exits: Pdeathsig fires when the creating thread ends, and
	// the kernel then kills the replica if the test dies first.
	go func() {
		runtime.LockOSThread()
		cmd := exec.Command(r.bin)
		cmd.Env = r.env
		cmd.Stdout, cmd.Stderr = &r.log, &r.log
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		r.mu.Lock()
		r.pid, r.exit = cmd.Process.Pid, ex
		r.mu.Unlock()
		started <- nil
		ex.err = cmd.Wait()
		close(ex.done)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("chaos: starting replica %d: %w", r.N, err)
	}
	return waitHealthy("http://"+r.Addr+"/healthz", ex)
}

// exit is the end of a process: done is closed when it has exited, with
// err the result of its Wait.
type exit struct {
	done chan struct{}
	err  error
}

// waitHealthy polls u until it answers 200, the process exits, or 30s
// pass.
func waitHealthy(u string, ex *exit) error {
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case <-ex.done:
			return fmt.Errorf("chaos: %s: the process exited: %v", u, ex.err)
		default:
		}
		if resp, err := client.Get(u); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
	return fmt.Errorf("chaos: %s did not answer within 30s", u)
}

// Stop sends SIGTERM and waits for the process to exit, at most 15s
// (then it kills it). It returns an error if the process did not exit
// cleanly with status 0.
func (r *Replica) Stop() error {
	r.mu.Lock()
	pid, ex := r.pid, r.exit
	r.mu.Unlock()
	if pid == 0 {
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	err := error(nil)
	select {
	case <-ex.done:
		err = ex.err
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(pid, syscall.SIGKILL)
		<-ex.done
		err = errors.New("ignored SIGTERM for 15s")
	}
	r.mu.Lock()
	r.pid, r.exit = 0, nil
	r.mu.Unlock()
	fmt.Fprintf(&r.log, "--- chaos: replica %d stopped: %v\n", r.N, err)
	if err != nil {
		return fmt.Errorf("chaos: replica %d: %w", r.N, err)
	}
	return nil
}

// Restart stops the replica gracefully and starts it again.
func (r *Replica) Restart() error {
	if err := r.Stop(); err != nil {
		return err
	}
	r.mu.Lock()
	r.restarts++
	r.mu.Unlock()
	return r.Start()
}

// Restarts returns how many times the replica was restarted.
func (r *Replica) Restarts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.restarts
}

// Log returns everything the replica's processes wrote.
func (r *Replica) Log() string { return r.log.String() }

// RSS returns the resident memory of the running process, from
// /proc/<pid>/status.
func (r *Replica) RSS() (int64, error) {
	r.mu.Lock()
	pid := r.pid
	r.mu.Unlock()
	if pid == 0 {
		return 0, fmt.Errorf("chaos: replica %d is not running", r.N)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("chaos: no VmRSS in /proc status")
}

// Metrics returns the replica's /metrics samples whose name starts with
// one of prefixes, keyed by the sample line's name and labels.
func (r *Replica) Metrics(prefixes ...string) (map[string]float64, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	resp, err := client.Get("http://" + r.MetricsAddr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") {
			continue
		}
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				i := strings.LastIndexByte(line, ' ')
				if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
					out[line[:i]] += v
				}
			}
		}
	}
	return out, nil
}

// FreeAddr returns a loopback address that was free a moment ago.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// Proxy headers: EdgeHeader carries the simulated client address from the
// load to the proxy, which plays the internet edge and turns it into
// X-Forwarded-For (dropping what the client sent); ReplicaHeader names the
// replica that answered.
const (
	EdgeHeader    = "X-Chaos-Client-IP"
	ReplicaHeader = "X-Chaos-Replica"
)

// Proxy is the fleet's forwarding proxy, the replicas' only trusted
// proxy. It sends requests to the replicas in turn and, like nginx's
// proxy_next_upstream, tries the next one when a replica refuses the
// connection (it is restarting): the request was never sent, so this is
// safe for a POST too. It answers 502 when no replica takes the request.
type Proxy struct {
	http.Handler
	tr *http.Transport

	mu     sync.Mutex
	errors map[string]int // guarded by mu; the errors behind 502s, by their last part
}

// Errors returns the errors behind the proxy's 502 answers, counted by
// their last part ("EOF", "connection reset by peer").
func (p *Proxy) Errors() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for k, v := range p.errors {
		out[k] = v
	}
	return out
}

// CloseIdleConnections closes the proxy's idle connections to the
// replicas.
func (p *Proxy) CloseIdleConnections() { p.tr.CloseIdleConnections() }

// NewProxy returns a proxy in front of replicas.
func NewProxy(replicas []*Replica) *Proxy {
	var next atomic.Uint64
	tr := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	p := &Proxy{tr: tr, errors: map[string]int{}}
	p.Handler = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: "http", Host: "replicas"})
			pr.Out.Header.Set("X-Forwarded-For", pr.In.Header.Get(EdgeHeader))
			pr.Out.Header.Del(EdgeHeader)
		},
		Transport: roundTripFunc(func(req *http.Request) (*http.Response, error) {
			var body []byte
			if req.Body != nil {
				var err error
				if body, err = io.ReadAll(io.LimitReader(req.Body, 1<<20)); err != nil {
					return nil, err
				}
				req.Body.Close()
			}
			first := int(next.Add(1) - 1)
			var err error
			for try := range replicas {
				r := replicas[(first+try)%len(replicas)]
				out := req.Clone(req.Context())
				out.URL.Host, out.Host = r.Addr, r.Addr
				out.Body = io.NopCloser(bytes.NewReader(body))
				out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
				var resp *http.Response
				if resp, err = tr.RoundTrip(out); err == nil {
					resp.Header.Set(ReplicaHeader, strconv.Itoa(r.N))
					return resp, nil
				}
				if !errors.Is(err, syscall.ECONNREFUSED) {
					return nil, err
				}
			}
			return nil, err
		}),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			msg := err.Error()
			msg = msg[strings.LastIndex(msg, ": ")+1:]
			p.mu.Lock()
			p.errors[strings.TrimSpace(msg)]++
			p.mu.Unlock()
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	return p
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
