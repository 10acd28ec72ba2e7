package chaos

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// Kind is a kind of fault.
type Kind string

// The faults the chaos run injects.
const (
	// RedisKill kills redis-server with SIGKILL and starts it again on the
	// same address after the fault's duration; it comes back empty.
	RedisKill Kind = "redis-kill"
	// RedisStop freezes redis-server with SIGSTOP and resumes it with
	// SIGCONT: connections stay open and nothing answers.
	RedisStop Kind = "redis-stop"
	// ScriptFlush empties Redis's script cache (SCRIPT FLUSH): the next
	// EVALSHA of every replica answers NOSCRIPT.
	ScriptFlush Kind = "script-flush"
	// RedisOOM puts Redis out of memory: maxmemory of 1 byte with the
	// noeviction policy, restored after the fault's duration. Redis then
	// refuses a script's first write if it may grow memory, but not one
	// that follows another write (see RELIABILITY.md).
	RedisOOM Kind = "redis-oom"
	// RedisNoReplicas makes Redis refuse every write: min-replicas-to-write
	// 1 on a server without replicas (NOREPLICAS), restored after the
	// fault's duration.
	RedisNoReplicas Kind = "redis-noreplicas"
	// ReplicaRestart stops one bankapi replica with SIGTERM and starts it
	// again.
	ReplicaRestart Kind = "replica-restart"
)

// Kinds lists every kind of fault.
var Kinds = []Kind{RedisKill, RedisStop, ScriptFlush, RedisOOM, RedisNoReplicas, ReplicaRestart}

// Describe says what the fault does, for the results.
func (k Kind) Describe() string {
	switch k {
	case RedisKill:
		return "redis-server killed (SIGKILL), restarted empty on the same address"
	case RedisStop:
		return "redis-server frozen (SIGSTOP), then resumed (SIGCONT)"
	case ScriptFlush:
		return "SCRIPT FLUSH: every replica's next EVALSHA answers NOSCRIPT"
	case RedisOOM:
		return "out of memory: CONFIG SET maxmemory 1, maxmemory-policy noeviction; then restored"
	case RedisNoReplicas:
		return "every write refused (NOREPLICAS): CONFIG SET min-replicas-to-write 1 without replicas; then restored"
	case ReplicaRestart:
		return "one bankapi replica stopped (SIGTERM) and started again"
	}
	return string(k)
}

// Fault is one injected fault.
type Fault struct {
	Kind Kind
	// Replica is the replica restarted by a ReplicaRestart.
	Replica int
	// Start is when the fault was injected, End when it was undone (Redis
	// answers again, the replica is healthy again); equal for ScriptFlush.
	Start, End time.Time
	// Note says what the fault showed, if anything worth a line.
	Note string
	// Recovered is, for each replica the fault touched, when the store
	// decided the first probe sent to it at or after End; absent if it
	// never did.
	Recovered map[int]time.Time
}

// LosesState reports whether the fault wipes the limits' counts.
func (f Fault) LosesState() bool { return f.Kind == RedisKill }

// Recovery returns the time from End until every replica the fault touched
// decided a probe through the store again, and false if one never did.
func (f Fault) Recovery(replicas []int) (time.Duration, bool) {
	var worst time.Duration
	for _, r := range f.touched(replicas) {
		t, ok := f.Recovered[r]
		if !ok {
			return 0, false
		}
		worst = max(worst, t.Sub(f.End))
	}
	return worst, true
}

// Until returns the end of the fault's effect: End plus the recovery, or
// the run's end if it never recovered.
func (f Fault) Until(replicas []int, runEnd time.Time) time.Time {
	if d, ok := f.Recovery(replicas); ok {
		return f.End.Add(d)
	}
	return runEnd
}

func (f Fault) touched(replicas []int) []int {
	if f.Kind == ReplicaRestart {
		return []int{f.Replica}
	}
	return replicas
}

// SetRecovery fills f.Recovered from the probes in recs, sorted by start.
func (f *Fault) SetRecovery(recs []Record, replicas []int) {
	f.Recovered = map[int]time.Time{}
	for _, r := range recs {
		if !r.Probe || r.Start.Before(f.End) || (r.Outcome != Admitted && r.Outcome != Denied) {
			continue
		}
		if _, done := f.Recovered[r.Replica]; !done {
			f.Recovered[r.Replica] = r.End
		}
	}
}

// Injector injects faults into a fleet.
type Injector struct {
	Redis    *redistest.Server
	Replicas []*Replica
}

// Inject injects a fault of kind k into replica (for ReplicaRestart),
// holds it for hold (when the kind has a duration), undoes it and returns
// it with Start and End set.
func (in *Injector) Inject(k Kind, replica int, hold time.Duration) (Fault, error) {
	f := Fault{Kind: k, Start: time.Now()}
	var err error
	switch k {
	case RedisKill:
		in.Redis.Kill()
		time.Sleep(hold)
		err = in.Redis.Restart()
	case RedisStop:
		if err = in.Redis.Stop(); err != nil {
			break
		}
		time.Sleep(hold)
		err = in.Redis.Cont()
	case ScriptFlush:
		_, err = redistest.Command(in.Redis.Addr(), "SCRIPT", "FLUSH")
	case RedisOOM:
		policy, gerr := redistest.Command(in.Redis.Addr(), "CONFIG", "GET", "maxmemory-policy")
		if gerr != nil {
			return f, gerr
		}
		before := usedMemory(in.Redis.Addr())
		if _, err = redistest.Command(in.Redis.Addr(), "CONFIG", "SET", "maxmemory-policy", "noeviction", "maxmemory", "1"); err != nil {
			break
		}
		time.Sleep(hold)
		f.Note = fmt.Sprintf("used_memory went from %d to %d bytes while maxmemory was 1 byte", before, usedMemory(in.Redis.Addr()))
		_, p, _ := strings.Cut(policy, "\n")
		_, err = redistest.Command(in.Redis.Addr(), "CONFIG", "SET", "maxmemory", "0", "maxmemory-policy", p)
	case RedisNoReplicas:
		if _, err = redistest.Command(in.Redis.Addr(), "CONFIG", "SET", "min-replicas-to-write", "1"); err != nil {
			break
		}
		time.Sleep(hold)
		_, err = redistest.Command(in.Redis.Addr(), "CONFIG", "SET", "min-replicas-to-write", "0")
	case ReplicaRestart:
		f.Replica = replica
		f.Start = time.Now()
		err = in.Replicas[replica-1].Restart()
	default:
		err = fmt.Errorf("chaos: unknown fault %q", k)
	}
	f.End = time.Now()
	if err != nil {
		return f, fmt.Errorf("chaos: %s: %w", k, err)
	}
	return f, nil
}

// usedMemory returns Redis's used_memory, or -1.
func usedMemory(addr string) int64 {
	info, err := redistest.Command(addr, "INFO", "memory")
	if err != nil {
		return -1
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return -1
}
