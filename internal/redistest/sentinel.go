package redistest

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// SentinelMasterName is the name under which the sentinels of
// StartSentinel monitor their master ("master_set" in a rueidis URL,
// MasterName in go-redis).
const SentinelMasterName = "floodgate"

// SentinelDownAfter is the down-after-milliseconds of StartSentinel's
// sentinels: a master that does not answer for this long is seen down, and
// a replica is promoted shortly after. Production setups use 30s by
// default; tests want failovers quick.
const SentinelDownAfter = time.Second

// sentinels is how many sentinels StartSentinel runs; a quorum of 2 of
// them decides that the master is down.
const sentinels = 3

// Sentinel is a Redis master with replicas watched by three sentinels, all
// redis-server processes on loopback ports, started for one test by
// [StartSentinel]. Its methods are safe for concurrent use.
type Sentinel struct {
	data      []*Server // the master as started, then the replicas
	sentinels []*Server
}

// StartSentinel starts, for t, a master, the given number of replicas of
// it and three sentinels (redis-server --sentinel) monitoring it under
// SentinelMasterName with a quorum of 2, down-after-milliseconds
// SentinelDownAfter and a short failover-timeout, and waits until every
// sentinel knows every replica and the other sentinels, so that a
// failover can happen. t's cleanup kills every process.
func StartSentinel(t testing.TB, replicas int) *Sentinel {
	t.Helper()
	requireBinary(t)
	dir := t.TempDir()
	s := &Sentinel{}
	t.Cleanup(s.kill)
	master, err := start(dir)
	if err != nil {
		t.Fatalf("redistest: sentinel's master: %v", err)
	}
	s.data = append(s.data, master)
	host, port, _ := strings.Cut(master.addr, ":")
	for i := range replicas {
		r, err := start(dir, "--replicaof", host, port)
		if err != nil {
			t.Fatalf("redistest: replica %d: %v", i, err)
		}
		s.data = append(s.data, r)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	s.sentinels = make([]*Server, sentinels)
	for i := range sentinels {
		wg.Go(func() {
			conf := filepath.Join(dir, fmt.Sprintf("sentinel-%d.conf", i))
			srv, err := startServer(&Server{dir: dir, conf: conf, extra: []string{"--sentinel"}}, func(*Server) error {
				// Sentinel rewrites its configuration file: each
				// attempt starts from a fresh one.
				return os.WriteFile(conf, []byte(sentinelConf(host, port)), 0o600)
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("sentinel %d: %w", i, err))
				return
			}
			s.sentinels[i] = srv
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("redistest: %v", errs)
	}
	if err := s.waitReady(replicas, clusterReadyTimeout); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return s
}

func sentinelConf(host, port string) string {
	m := SentinelMasterName
	return strings.Join([]string{
		"sentinel monitor " + m + " " + host + " " + port + " 2",
		"sentinel down-after-milliseconds " + m + " " + strconv.Itoa(int(SentinelDownAfter/time.Millisecond)),
		"sentinel failover-timeout " + m + " 5000",
		"sentinel parallel-syncs " + m + " 1",
		"",
	}, "\n")
}

// waitReady waits until each sentinel sees the master up with every
// replica and every other sentinel, and every replica is in sync.
func (s *Sentinel) waitReady(replicas int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		err := s.ready(replicas)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sentinels not ready after %v: %w", within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *Sentinel) ready(replicas int) error {
	for _, sn := range s.sentinels {
		v, err := do(sn.addr, "SENTINEL", "MASTER", SentinelMasterName)
		if err != nil {
			return fmt.Errorf("sentinel %s: %w", sn.addr, err)
		}
		f := fields(v)
		if f["flags"] != "master" || f["num-slaves"] != strconv.Itoa(replicas) || f["num-other-sentinels"] != strconv.Itoa(sentinels-1) {
			return fmt.Errorf("sentinel %s sees flags %q, %s replicas, %s other sentinels", sn.addr, f["flags"], f["num-slaves"], f["num-other-sentinels"])
		}
	}
	for _, d := range s.data[1:] {
		repl, err := Command(d.addr, "INFO", "replication")
		if err != nil {
			return err
		}
		if !strings.Contains(repl, "master_link_status:up") {
			return fmt.Errorf("replica %s not in sync", d.addr)
		}
	}
	return nil
}

// fields turns a flat array reply of names and values into a map.
func fields(v any) map[string]string {
	out := map[string]string{}
	arr, _ := v.([]any)
	for i := 0; i+1 < len(arr); i += 2 {
		k, _ := arr[i].(string)
		val, _ := arr[i+1].(string)
		out[k] = val
	}
	return out
}

// URL returns a redis:// URL naming every sentinel and the master set
// ("redis://s1?addr=s2&addr=s3&master_set=floodgate"), the form that
// rueidis.ParseURL takes for Sentinel.
func (s *Sentinel) URL() string {
	return seedURL(s.SentinelAddrs(), url.Values{"master_set": {SentinelMasterName}})
}

// SentinelAddrs returns the sentinels' addresses.
func (s *Sentinel) SentinelAddrs() []string {
	out := make([]string, len(s.sentinels))
	for i, sn := range s.sentinels {
		out[i] = sn.addr
	}
	return out
}

// Servers returns the data servers: the master as started, then the
// replicas. Roles change with a failover; see Master.
func (s *Sentinel) Servers() []*Server { return s.data }

// Master returns the data server that the sentinels currently name as
// master, as the first sentinel that answers reports it.
func (s *Sentinel) Master() (*Server, error) {
	var last error
	for _, sn := range s.sentinels {
		v, err := do(sn.addr, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMasterName)
		if err != nil {
			last = err
			continue
		}
		arr, _ := v.([]any)
		if len(arr) != 2 {
			last = fmt.Errorf("reply %v", v)
			continue
		}
		h, _ := arr[0].(string)
		p, _ := arr[1].(string)
		addr := h + ":" + p
		for _, d := range s.data {
			if d.addr == addr {
				return d, nil
			}
		}
		return nil, fmt.Errorf("redistest: sentinels name %s, not one of the test's servers", addr)
	}
	return nil, fmt.Errorf("redistest: no sentinel answered: %w", last)
}

func (s *Sentinel) kill() {
	for _, sn := range s.sentinels {
		if sn != nil {
			sn.Kill()
		}
	}
	for _, d := range s.data {
		d.Kill()
	}
}
