package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is the kernel's USER_HZ, the unit of /proc/PID/stat's times.
const clockTick = 10 * time.Millisecond

// cpuTime reads the user plus system CPU time of process pid.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	d, err := parseStat(string(b))
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return d, nil
}

// parseStat reads utime plus stime from the text of /proc/PID/stat.
func parseStat(s string) (time.Duration, error) {
	// The command name, field 2, is in parentheses and may hold spaces
	// and parentheses.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("no command name")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("%d fields after the command name", len(f))
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(u+st) * clockTick, nil
}

// rss reads the resident set size of process pid, in bytes.
func rss(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}

// A proc is a child process: a service, the null server or Redis.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
}

// start runs bin with args and env added to this process's environment,
// its output to a log file in dir, and waits until it listens on addr.
func start(ctx context.Context, dir, name, addr, bin string, args, env []string) (*proc, error) {
	logPath := dir + "/" + strings.ReplaceAll(name, "/", "_") + ".log"
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath}
	if err := waitListen(ctx, addr, 30*time.Second); err != nil {
		p.kill()
		b, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("%s: %w\n%s", name, err, tail(string(b), 2000))
	}
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) kill() {
	p.cmd.Process.Kill()
	p.cmd.Wait()
}

func waitListen(ctx context.Context, addr string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("nothing listens on %s after %v", addr, d)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// freePort returns a loopback TCP port in 18000-18999 that nothing
// listens on and that it has not returned before.
type ports map[int]bool

func (ps ports) free() (int, error) {
	for p := 18000; p < 19000; p++ {
		if ps[p] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		ln.Close()
		ps[p] = true
		return p, nil
	}
	return 0, errors.New("no free port in 18000-18999")
}
