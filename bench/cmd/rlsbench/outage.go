package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/status"
)

// redisProc is the throwaway redis-server that rlsbench runs, stops,
// kills and starts again.
type redisProc struct {
	bin  string
	port int
	dir  string
	cmd  *exec.Cmd
}

func (r *redisProc) addr() string { return fmt.Sprintf("127.0.0.1:%d", r.port) }

func (r *redisProc) start(ctx context.Context) error {
	r.cmd = exec.Command(r.bin, "--port", fmt.Sprint(r.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", r.dir, "--logfile", r.dir+"/redis.log")
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := r.cmd.Start(); err != nil {
		return err
	}
	return waitListen(ctx, r.addr(), 10*time.Second)
}

func (r *redisProc) signal(s syscall.Signal) { r.cmd.Process.Signal(s) }

func (r *redisProc) kill() {
	if r.cmd != nil && r.cmd.Process != nil {
		// SIGKILL ends a stopped process too; a SIGCONT first would let
		// it answer what is queued before it dies.
		r.cmd.Process.Kill()
		r.cmd.Wait()
	}
}

// An event is one call of the outage run.
type event struct {
	start time.Time
	lat   time.Duration
	kind  string // OK, OVER_LIMIT, or the gRPC code of the error
	msg   string // the error's message
}

// timeline runs the allowed workload until stop is closed, recording
// every call.
func timeline(ctx context.Context, l *loader, w workload, callers int, timeout time.Duration, stop <-chan struct{}) []event {
	var (
		mu  sync.Mutex
		all []event
		wg  sync.WaitGroup
	)
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := l.clients[c%len(l.clients)]
			i := rand.IntN(len(w.reqs))
			var evs []event
			for {
				select {
				case <-stop:
					mu.Lock()
					all = append(all, evs...)
					mu.Unlock()
					return
				default:
				}
				t0 := time.Now()
				cctx, cancel := context.WithTimeout(ctx, timeout)
				resp, err := client.ShouldRateLimit(cctx, w.reqs[i])
				cancel()
				kind, msg := resp.GetOverallCode().String(), ""
				if err != nil {
					kind, msg = status.Code(err).String(), status.Convert(err).Message()
				}
				evs = append(evs, event{t0, time.Since(t0), kind, msg})
				if i++; i == len(w.reqs) {
					i = 0
				}
			}
		}()
	}
	wg.Wait()
	slices.SortFunc(all, func(a, b event) int { return a.start.Compare(b.start) })
	return all
}

// An outageResult is one service's figures.
type outageResult struct {
	name          string
	during        []event // calls in flight at some time while Redis was stopped
	p50, p99, max time.Duration
	answers       map[string]int
	afterKill     map[string]int // calls started after the kill, before the first OK
	backAfter     time.Duration  // from the restart to the end of the first OK call started after it
	before        map[string]int
	messages      map[string]string // the first message of each error code seen
}

// outage freezes Redis for 10 seconds under the allowed load of each
// service in turn, kills it, starts it again, and reports.
func outage(ctx context.Context, out io.Writer, o options, rows []*row, rd *redisProc) error {
	w := workloads(o.values)[0]
	var results []outageResult
	for _, name := range []string{"floodgate fixed window", "envoyproxy/ratelimit"} {
		r := find(rows, name)
		if r == nil {
			continue
		}
		fmt.Fprintf(os.Stderr, "== outage: %s\n", name)
		stop := make(chan struct{})
		var evs []event
		done := make(chan struct{})
		go func() {
			evs = timeline(ctx, r.ld, w, o.callers, 30*time.Second, stop)
			close(done)
		}()
		time.Sleep(3 * time.Second)
		stopped := time.Now()
		rd.signal(syscall.SIGSTOP)
		time.Sleep(10 * time.Second)
		killed := time.Now()
		rd.kill()
		if err := rd.start(ctx); err != nil {
			close(stop)
			return fmt.Errorf("restart redis: %w", err)
		}
		restarted := time.Now()
		time.Sleep(15 * time.Second)
		close(stop)
		<-done

		res := outageResult{name: name, answers: map[string]int{}, afterKill: map[string]int{}, before: map[string]int{}, messages: map[string]string{}}
		for _, e := range evs {
			if _, ok := res.messages[e.kind]; !ok && e.msg != "" {
				res.messages[e.kind] = e.msg
			}
		}
		var lats []time.Duration
		for _, e := range evs {
			switch {
			case e.start.Add(e.lat).Before(stopped):
				res.before[e.kind]++
			case e.start.Before(killed):
				res.during = append(res.during, e)
				res.answers[e.kind]++
				lats = append(lats, e.lat)
			}
		}
		slices.Sort(lats)
		if n := len(lats); n > 0 {
			res.p50, res.p99, res.max = lats[n/2], lats[min(n-1, n*99/100)], lats[n-1]
		}
		// Deciding on Redis again: the first OK that ends after the kill.
		var firstOK time.Time
		for _, e := range evs {
			end := e.start.Add(e.lat)
			if e.kind == pb.RateLimitResponse_OK.String() && end.After(killed) && (firstOK.IsZero() || end.Before(firstOK)) {
				firstOK = end
			}
		}
		if !firstOK.IsZero() {
			res.backAfter = firstOK.Sub(restarted)
		}
		for _, e := range evs {
			end := e.start.Add(e.lat)
			inStop := e.start.Before(killed) && end.After(stopped)
			if !inStop && end.After(killed) && (firstOK.IsZero() || end.Before(firstOK)) {
				res.afterKill[e.kind]++
			}
		}
		results = append(results, res)
		// Let the other service find the new Redis before its turn.
		r.ld.run(ctx, w, o.callers, 2*time.Second, 30*time.Second)
	}
	fmt.Fprintf(out, "\n## Outage: Redis SIGSTOP for 10 s under load (%d callers, allowed workload, 30 s call deadline), then SIGKILL and restart\n\n", o.callers)
	tw := tabwriter.NewWriter(out, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "service\tcalls in flight during the stop\tp50\tp99\tmax\ttheir answers\tother answers after the kill, before the first OK\tfirst OK after the restart\t")
	for _, r := range results {
		back := "never (within 15 s)"
		if r.backAfter != 0 {
			back = r.backAfter.Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%v\t%v\t%s\t\n", r.name, len(r.during), ms(r.p50), ms(r.p99), ms(r.max), r.answers, r.afterKill, back)
	}
	tw.Flush()
	for _, r := range results {
		for code, msg := range r.messages {
			fmt.Fprintf(out, "%s: %s: %q\n", r.name, code, msg)
		}
	}
	return nil
}

// profile records floodgate's fixed-window service with perf(1) under
// the allowed load and prints where its CPU time goes.
func profile(ctx context.Context, out io.Writer, o options, rows []*row, wls []workload) error {
	r := find(rows, "floodgate fixed window")
	if r == nil {
		return nil
	}
	data := os.TempDir() + "/rlsbench-perf.data"
	cmd := exec.CommandContext(ctx, "perf", "record", "-F", "499", "-g", "-o", data, "-p", fmt.Sprint(r.p.pid()), "--", "sleep", fmt.Sprint(o.perfSeconds))
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("perf: %w", err)
	}
	r.ld.run(ctx, workloads(o.values)[0], o.callers, time.Duration(o.perfSeconds)*time.Second, o.timeout)
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("perf record: %w", err)
	}
	for _, v := range []struct{ title, children, limit string }{
		{"time in a function and what it calls", "--children", "4"},
		{"time in a function itself", "--no-children", "1"},
	} {
		rep, err := exec.CommandContext(ctx, "perf", "report", "-i", data, v.children, "--sort", "symbol", "--stdio", "-g", "none", "--percent-limit", v.limit).Output()
		if err != nil {
			return fmt.Errorf("perf report: %w", err)
		}
		fmt.Fprintf(out, "\n## perf: floodgate fixed window, allowed workload, %d s: %s\n\n", o.perfSeconds, v.title)
		for _, line := range strings.Split(string(rep), "\n") {
			if line = strings.TrimRight(line, " -"); line != "" && !strings.HasPrefix(line, "#") {
				fmt.Fprintln(out, line)
			}
		}
	}
	return nil
}
