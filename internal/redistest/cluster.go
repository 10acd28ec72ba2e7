package redistest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ClusterNodeTimeout is the cluster-node-timeout of the clusters that
// StartCluster builds: a master that does not answer for this long is
// marked failing, and one of its replicas takes over about a second later.
// Production clusters use 15s by default; tests want failovers quick.
const ClusterNodeTimeout = time.Second

// clusterReadyTimeout bounds the wait for a new cluster to settle.
const clusterReadyTimeout = 30 * time.Second

// Cluster is a Redis Cluster of redis-server processes on loopback ports,
// started for one test by [StartCluster]. Its methods are safe for
// concurrent use.
type Cluster struct {
	nodes []*Server // the masters as created, then their replicas
}

// StartCluster starts a Redis Cluster for t with the given number of
// masters, each with replicasPerMaster replicas, and waits until every
// node agrees that the cluster is up and every replica is in sync. t's
// cleanup kills every node. With three masters or more the cluster is
// built by `redis-cli --cluster create`, as an operator would; a smaller
// one (which redis-cli refuses) is assembled by hand with CLUSTER
// ADDSLOTSRANGE, MEET and REPLICATE. The nodes run with
// cluster-node-timeout ClusterNodeTimeout and
// cluster-require-full-coverage no, so that losing one master stops only
// its slots. It needs Redis 7.0 or later, and redis-cli for three masters
// or more.
func StartCluster(t testing.TB, masters, replicasPerMaster int) *Cluster {
	t.Helper()
	requireBinary(t)
	if masters < 1 || replicasPerMaster < 0 {
		t.Fatalf("redistest: StartCluster(%d masters, %d replicas each): need one master or more", masters, replicasPerMaster)
	}
	if masters >= 3 {
		requireBinaryNamed(t, "redis-cli", "redis-tools")
	}
	dir := t.TempDir()
	c := &Cluster{}
	t.Cleanup(c.kill)
	for i := range masters * (1 + replicasPerMaster) {
		s, err := startServer(&Server{dir: dir}, func(s *Server) error {
			bus, err := freePort()
			if err != nil {
				return err
			}
			s.extra = []string{
				"--cluster-enabled", "yes",
				"--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", i)),
				"--cluster-port", strconv.Itoa(bus),
				"--cluster-node-timeout", strconv.Itoa(int(ClusterNodeTimeout / time.Millisecond)),
				"--cluster-require-full-coverage", "no",
			}
			_ = os.Remove(filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", i)))
			return nil
		})
		if err != nil {
			t.Fatalf("redistest: cluster node %d: %v", i, err)
		}
		c.nodes = append(c.nodes, s)
	}
	var err error
	if masters >= 3 {
		err = c.create(replicasPerMaster)
	} else {
		err = c.assemble(masters, replicasPerMaster)
	}
	if err != nil {
		t.Fatalf("redistest: building the cluster: %v", err)
	}
	if err := c.waitReady(masters*(1+replicasPerMaster), clusterReadyTimeout); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return c
}

// create runs redis-cli --cluster create over every node.
func (c *Cluster) create(replicas int) error {
	ctx, cancel := context.WithTimeout(context.Background(), clusterReadyTimeout)
	defer cancel()
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("redis-cli %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// assemble builds a cluster of fewer than three masters by hand: the
// first nodes are masters sharing the slots evenly, the others replicate
// them in turn.
func (c *Cluster) assemble(masters, replicas int) error {
	for i := range masters {
		lo, hi := i*16384/masters, (i+1)*16384/masters-1
		if reply, err := Command(c.nodes[i].addr, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil || reply != "OK" {
			return fmt.Errorf("CLUSTER ADDSLOTSRANGE on %s: %q, %w", c.nodes[i].addr, reply, err)
		}
	}
	first := c.nodes[0].addr
	host, port, _ := strings.Cut(first, ":")
	for _, n := range c.nodes[1:] {
		if _, err := Command(n.addr, "CLUSTER", "MEET", host, port); err != nil {
			return fmt.Errorf("CLUSTER MEET from %s: %w", n.addr, err)
		}
	}
	ids := make([]string, masters)
	for i := range masters {
		id, err := Command(c.nodes[i].addr, "CLUSTER", "MYID")
		if err != nil {
			return err
		}
		ids[i] = id
	}
	for j := range masters * replicas {
		n := c.nodes[masters+j]
		deadline := time.Now().Add(clusterReadyTimeout)
		for {
			// A node can replicate only a master it has heard of.
			_, err := Command(n.addr, "CLUSTER", "REPLICATE", ids[j%masters])
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("CLUSTER REPLICATE on %s: %w", n.addr, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// waitReady waits until every node sees the cluster up with every node,
// and every replica's link to its master is up.
func (c *Cluster) waitReady(n int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		err := c.ready(n)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster not ready after %v: %w", within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *Cluster) ready(n int) error {
	for _, s := range c.nodes {
		info, err := Command(s.addr, "CLUSTER", "INFO")
		if err != nil {
			return fmt.Errorf("%s: CLUSTER INFO: %w", s.addr, err)
		}
		if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(n)+"\r") {
			return fmt.Errorf("%s: cluster not up with %d nodes yet", s.addr, n)
		}
		repl, err := Command(s.addr, "INFO", "replication")
		if err != nil {
			return fmt.Errorf("%s: INFO replication: %w", s.addr, err)
		}
		if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
			return fmt.Errorf("%s: replica not in sync", s.addr)
		}
	}
	nodes, err := c.clusterNodes()
	if err != nil {
		return err
	}
	for _, nd := range nodes {
		if !nd.master && nd.masterID == "-" {
			return fmt.Errorf("%s: replica without a master yet", nd.addr)
		}
	}
	return nil
}

// Nodes returns every node: the masters as created, then the replicas.
// Roles change when a replica takes over; see MasterOf.
func (c *Cluster) Nodes() []*Server { return c.nodes }

// Addrs returns the addresses of every node, masters as created first.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		out[i] = s.addr
	}
	return out
}

// URL returns a redis:// URL that names every node, the first as host and
// the others as addr parameters ("redis://a?addr=b&addr=c"), the form
// that rueidis.ParseURL takes for a Cluster.
func (c *Cluster) URL() string { return seedURL(c.Addrs(), nil) }

// seedURL builds "redis://first?addr=second&addr=...&extra...".
func seedURL(addrs []string, extra url.Values) string {
	q := url.Values{}
	for _, a := range addrs[1:] {
		q.Add("addr", a)
	}
	for k, vs := range extra {
		for _, v := range vs {
			q.Add(k, v)
		}
	}
	return "redis://" + addrs[0] + "?" + q.Encode()
}

// MasterOf returns the node that serves slot as master, as the live nodes
// see it, and an error if none does (while a failover is under way).
func (c *Cluster) MasterOf(slot int) (*Server, error) {
	nodes, err := c.clusterNodes()
	if err != nil {
		return nil, err
	}
	for _, nd := range nodes {
		if !nd.master || nd.failed {
			continue
		}
		for _, r := range nd.slots {
			if slot >= r[0] && slot <= r[1] {
				for _, s := range c.nodes {
					if s.addr == nd.addr {
						return s, nil
					}
				}
				return nil, fmt.Errorf("redistest: slot %d is served by %s, which is not a node of this cluster", slot, nd.addr)
			}
		}
	}
	return nil, fmt.Errorf("redistest: no live master serves slot %d", slot)
}

// KeySlot asks the cluster which slot key hashes to.
func (c *Cluster) KeySlot(key string) (int, error) {
	var last error
	for _, s := range c.nodes {
		reply, err := Command(s.addr, "CLUSTER", "KEYSLOT", key)
		if err == nil {
			return strconv.Atoi(reply)
		}
		last = err
	}
	return 0, last
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	addr           string
	master, failed bool
	masterID       string
	slots          [][2]int
}

// clusterNodes reads CLUSTER NODES from the first node that answers.
func (c *Cluster) clusterNodes() ([]clusterNode, error) {
	var last error = errors.New("no node")
	for _, s := range c.nodes {
		text, err := Command(s.addr, "CLUSTER", "NODES")
		if err != nil {
			last = err
			continue
		}
		return parseClusterNodes(text, s.addr)
	}
	return nil, fmt.Errorf("redistest: CLUSTER NODES: %w", last)
}

// parseClusterNodes parses the reply of CLUSTER NODES, asked of the node
// at self: "<id> <ip:port@cport> <flags> <master> <ping> <pong> <epoch>
// <link> <slot>...". A node that has met no other does not know its own
// IP and lists itself as ":port".
func parseClusterNodes(text, self string) ([]clusterNode, error) {
	var out []clusterNode
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		flags := strings.Split(f[2], ",")
		nd := clusterNode{addr: addr, masterID: f[3]}
		for _, fl := range flags {
			switch fl {
			case "myself":
				nd.addr = self
			case "master":
				nd.master = true
			case "fail", "fail?", "noaddr":
				nd.failed = true
			}
		}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") { // a slot being migrated
				continue
			}
			lo, hi, isRange := strings.Cut(r, "-")
			a, err := strconv.Atoi(lo)
			if err != nil {
				return nil, fmt.Errorf("redistest: CLUSTER NODES: slot %q", r)
			}
			b := a
			if isRange {
				if b, err = strconv.Atoi(hi); err != nil {
					return nil, fmt.Errorf("redistest: CLUSTER NODES: slot %q", r)
				}
			}
			nd.slots = append(nd.slots, [2]int{a, b})
		}
		out = append(out, nd)
	}
	return out, nil
}

func (c *Cluster) kill() {
	for _, s := range c.nodes {
		s.Kill()
	}
}

// requireBinaryNamed skips t, or fails it under CI=true, when bin is not
// on PATH.
func requireBinaryNamed(t testing.TB, bin, pkg string) {
	t.Helper()
	if _, err := exec.LookPath(bin); err == nil {
		return
	}
	why := "redistest: " + bin + " is not on PATH; install it (Debian: apt-get install " + pkg + ") to run the Redis tests"
	if os.Getenv("CI") == "true" {
		t.Fatal(why + " (CI=true: Redis tests must run)")
	}
	t.Skip(why)
}

// Backend is a Redis deployment a test runs on: its URL, and Holder, the
// address of the server that holds a key (to stop or inspect that one).
type Backend struct {
	URL    string
	Holder func(t testing.TB, key string) string
}

// Backends are the shared standalone server and a fresh Cluster of three
// masters, by name: for code whose keys must share a slot (a hash and its
// version counter, a script's keys) to prove it on both.
func Backends(t testing.TB) map[string]Backend {
	addr := Addr(t)
	cluster := StartCluster(t, 3, 0)
	return map[string]Backend{
		"standalone": {"redis://" + addr, func(testing.TB, string) string { return addr }},
		"cluster": {cluster.URL(), func(t testing.TB, key string) string {
			t.Helper()
			slot, err := cluster.KeySlot(key)
			if err != nil {
				t.Fatal(err)
			}
			node, err := cluster.MasterOf(slot)
			if err != nil {
				t.Fatal(err)
			}
			return node.Addr()
		}},
	}
}
