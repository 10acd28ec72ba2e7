package chaos

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/floodgate-rl/floodgate/examples/bank/internal/bank"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// The chaos run's shape. The whole test takes about a minute and a half.
const (
	warmUp      = 6 * time.Second  // load before the first fault
	faultBudget = 55 * time.Second // faults start only within this time
	coolDown    = 8 * time.Second  // load after the last recovery
	recoveryCap = 30 * time.Second // a fault not recovered by then fails the test
)

// The limits of the run: short windows, so that a minute and a half holds
// many of them.
var chaosRules = []Rule{
	{RuleGlobalIP, 100, 10 * time.Second},
	{RuleLoginIP, 10, 30 * time.Second},
	{RuleLoginAccount, 5, 30 * time.Second},
	{RulePIX, 10, 10 * time.Second},
	{RuleStatement, 20, 10 * time.Second},
}

// resultsEnv names the file the run writes its figures to; without it,
// the figures go to the test log only. Refresh the committed figures with
//
//	CHAOS_RESULTS=$PWD/docs/reliability-results.md go test -run TestChaos ./internal/chaos
const resultsEnv = "CHAOS_RESULTS"

// TestChaos runs three bankapi processes on a real redis-server behind a
// forwarding proxy, under continuous mixed load, injects every kind of
// fault at seeded random moments (CHAOS_SEED replays a run's choices; the
// moments also depend on how fast the machine recovers), checks the
// invariants of the package documentation, and writes the figures to the
// file that CHAOS_RESULTS names (docs/reliability-results.md holds a run).
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("runs processes for about a minute and a half")
	}
	wallStart := time.Now()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("CHAOS_SEED=%q: %v", s, err)
		}
	}
	t.Logf("seed %d (CHAOS_SEED=%d replays the fault schedule)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 1))

	redis := redistest.Start(t)
	bin := filepath.Join(t.TempDir(), "bankapi")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/bankapi").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	docs, unknown := documents()
	secret := "chaos-token-secret-" + randomHex()
	const password = "chaos-password"
	usersFile := writeUsers(t, docs, password)
	env := []string{
		"LIMIT_GLOBAL_IP=100/10s", "LIMIT_LOGIN_IP=10/30s", "LIMIT_LOGIN_ACCOUNT=5/30s", "LIMIT_PIX=10/10s", "LIMIT_STATEMENT=20/10s",
		"TRUSTED_PROXIES=127.0.0.1/32", "LOG_LEVEL=info",
	}
	// CHAOS_REPLICA_ENV adds settings to the replicas, for experiments:
	// FAILURE_PIX=local, for one, must make the limit check fail (each
	// replica then admits its own limit while Redis is out).
	env = append(env, strings.Fields(os.Getenv("CHAOS_REPLICA_ENV"))...)
	config := append([]string(nil), env...)
	env = append(env, "REDIS_URL="+redis.URL(), "TOKEN_SECRET="+secret, "USERS_FILE="+usersFile)

	var replicas []*Replica
	var nums []int
	for i := 1; i <= 3; i++ {
		addr, err := FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		r := NewReplica(i, bin, addr, env)
		replicas, nums = append(replicas, r), append(nums, i)
		t.Cleanup(func() { _ = r.Stop() })
	}
	for _, r := range replicas {
		if err := r.Start(); err != nil {
			t.Fatalf("%v\n%s", err, r.Log())
		}
	}
	proxy := NewProxy(replicas)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	proxySrv := &http.Server{Handler: proxy}
	go func() { _ = proxySrv.Serve(ln) }()
	t.Cleanup(func() { proxySrv.Close(); proxy.CloseIdleConnections() })

	rec := NewRecorder()
	load := &Load{Proxy: "http://" + ln.Addr().String(), Replicas: replicas, Docs: docs, Unknown: unknown,
		Password: password, Rec: rec, Seed: seed}
	defer load.Close()
	sessions, err := load.Setup()
	if err != nil {
		t.Fatal(err)
	}
	idle := func() {
		load.Close()
		proxy.CloseIdleConnections()
		time.Sleep(time.Second)
	}
	idle()
	figs := make([]ReplicaFigures, len(replicas))
	for i, r := range replicas {
		figs[i].N = r.N
		figs[i].RSSStart, _ = r.RSS()
		figs[i].GoroutinesStart = goroutines(t, r)
	}

	// Hostile input on the production binary, before the load. Login
	// timing runs on a fourth process with the built-in directory (bcrypt
	// cost 10, as in production) and its own memory store, away from the
	// fleet's counts.
	res := &Results{Seed: seed, Date: time.Now(), GoVersion: runtime.Version(), RedisVersion: redisVersion(redis.Addr()), Config: config,
		ServerOutcomes: map[string]float64{}}
	h := &res.Hostile
	timingAddr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	timing := NewReplica(4, bin, timingAddr, []string{"TOKEN_SECRET=" + secret, "TRUSTED_PROXIES=127.0.0.1/32", "LOG_LEVEL=warn"})
	t.Cleanup(func() { _ = timing.Stop() })
	if err := timing.Start(); err != nil {
		t.Fatalf("%v\n%s", err, timing.Log())
	}
	(&Load{Docs: docs, Unknown: unknown, Rec: NewRecorder()}).LoginTiming(h, 8, timing)
	if err := timing.Stop(); err != nil {
		t.Error(err)
	}
	load.Spoof(h, replicas[0], chaosRules[1].Limit)
	if err := BodyLimit(h, replicas[0]); err != nil {
		t.Error(err)
	}

	// The load, and the slowloris client beside it.
	ctx, stopLoad := context.WithCancel(context.Background())
	loadStart := time.Now()
	load.Run(ctx, sessions)
	var side sync.WaitGroup
	defer func() { // on every path, a failed one too: no goroutine outlives the test
		stopLoad()
		load.Wait()
		side.Wait()
	}()
	side.Go(func() {
		if err := Slowloris(h, replicas[1]); err != nil {
			t.Error(err)
		}
	})
	var peakMu sync.Mutex
	side.Go(func() {
		for tick := time.NewTicker(time.Second); ; {
			select {
			case <-ctx.Done():
				tick.Stop()
				return
			case <-tick.C:
			}
			for i, r := range replicas {
				if rss, err := r.RSS(); err == nil {
					peakMu.Lock()
					figs[i].RSSPeak = max(figs[i].RSSPeak, rss)
					peakMu.Unlock()
				}
			}
		}
	})
	time.Sleep(warmUp)
	for i, r := range replicas {
		figs[i].RSSWarm, _ = r.RSS()
	}

	// Faults: rounds of every kind in a seeded order; the first round runs
	// whole, later ones while the budget lasts.
	in := &Injector{Redis: redis, Replicas: replicas}
	var faults []Fault
	var losses []time.Time
	var order []Kind
	faultStart := time.Now()
	for i := 0; i < len(Kinds) || time.Since(faultStart) < faultBudget; i++ {
		if i%len(Kinds) == 0 {
			order = order[:0]
			for _, j := range rng.Perm(len(Kinds)) {
				order = append(order, Kinds[j])
			}
		}
		k := order[i%len(Kinds)]
		gap := 3*time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))
		hold := 1500*time.Millisecond + time.Duration(rng.Int64N(int64(1500*time.Millisecond)))
		replica := 1 + rng.IntN(len(replicas))
		time.Sleep(gap)
		if k == ReplicaRestart {
			addOutcomes(t, res.ServerOutcomes, replicas[replica-1])
		}
		f, err := in.Inject(k, replica, hold)
		if err != nil {
			t.Fatalf("%v\n%s", err, redis.Output())
		}
		if f.LosesState() {
			losses = append(losses, f.Start)
		}
		faults = append(faults, f)
		what := string(k)
		if k == ReplicaRestart {
			what += " of replica " + strconv.Itoa(replica)
		}
		t.Logf("fault %d: %s at +%v, held %v", len(faults), what, f.Start.Sub(loadStart).Round(time.Millisecond), f.End.Sub(f.Start).Round(time.Millisecond))
		for _, r := range f.touched(nums) {
			for deadline := time.Now().Add(recoveryCap); !rec.DecidedSince(r, f.End) && time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	time.Sleep(coolDown)
	stopLoad()
	load.Wait()
	res.LoadFor = time.Since(loadStart)
	side.Wait()
	runEnd := time.Now()

	// The replicas at rest: memory, goroutines, their own counts; then a
	// graceful stop each.
	idle()
	var logs strings.Builder
	for i, r := range replicas {
		figs[i].RSSEnd, _ = r.RSS()
		figs[i].GoroutinesEnd = goroutines(t, r)
		addOutcomes(t, res.ServerOutcomes, r)
		figs[i].Restarts = r.Restarts()
		figs[i].CleanExit = r.Stop() == nil
		figs[i].Panics = len(panicRE.FindAllString(r.Log(), -1))
		logs.WriteString(r.Log())
	}
	res.Replicas = figs
	logs.WriteString(timing.Log())

	secrets := []string{secret, password, "wrong-" + password}
	for _, d := range append(append([]string(nil), docs...), unknown...) {
		secrets = append(secrets, d, digits(d))
	}
	secrets = append(secrets, load.Issued()...)
	res.LogBytes, res.SecretsChecked, res.Leaks = logs.Len(), len(secrets), Leaks(logs.String(), secrets)

	recs := rec.Records()
	res.Rules = Check(chaosRules, recs, losses)
	res.Traffic = Analyze(recs, faults, nums, runEnd)
	for _, at := range BreakerOpenings(logs.String()) {
		res.BreakerOpenings++
		if !res.Traffic.DuringFault(at) {
			res.BreakerOpeningsOutside++
		}
	}
	res.ProxyErrors = proxy.Errors()
	res.Wall = time.Since(wallStart)
	writeResults(t, res)
	verify(t, res, logs.String())
}

// verify checks the invariants against the figures.
func verify(t *testing.T, res *Results, logs string) {
	t.Helper()
	for _, rr := range res.Rules {
		if rr.Violations > 0 {
			t.Errorf("rule %s (%d per %v) admitted more than its limit in %d windows; first: %s", rr.Rule.Name, rr.Rule.Limit, rr.Rule.Window, rr.Violations, rr.Example)
		}
		if rr.AtLimit == 0 {
			t.Errorf("rule %s: no key reached its limit, so the check proves nothing; the load must press every rule", rr.Rule.Name)
		}
	}
	tr := res.Traffic
	for _, g := range groups {
		if n := tr.Outside.Of(g, Invalid); n > 0 {
			t.Errorf("%s: %d answers outside faults that the route's contract forbids", g, n)
		}
		if n := tr.Outside.Of(g, Unavailable); n > 0 {
			t.Errorf("%s: %d requests outside faults that no replica answered", g, n)
		}
	}
	for i, f := range tr.Faults {
		name := string(f.Kind) + " #" + strconv.Itoa(i+1)
		if !f.Recovered {
			t.Errorf("%s: the fleet did not recover within %v", name, recoveryCap)
		}
		for _, g := range groups {
			if n := f.Counts.Of(g, Invalid); n > 0 {
				t.Errorf("%s: %s answered %d times against its failure mode", name, g, n)
			}
		}
		switch f.Kind {
		case RedisKill, RedisStop, RedisNoReplicas:
			if f.Counts.Of(PIX, FailedClosed) == 0 || f.Counts.Of(Statement, FailedOpen)+f.Counts.Of("statement probe", FailedOpen) == 0 {
				t.Errorf("%s: PIX failed closed %d times and the statement failed open %d times; the fault must show in both", name,
					f.Counts.Of(PIX, FailedClosed), f.Counts.Of(Statement, FailedOpen))
			}
		}
	}
	// Generous sanity bounds only: the machine is shared and noisy.
	for _, l := range tr.Latencies {
		if l.Max > 10*time.Second {
			t.Errorf("%s (during faults: %v): a request took %v", l.Group, l.DuringFault, l.Max)
		}
	}
	if tr.OwnerOK == 0 {
		t.Errorf("the owner never logged in with a known device during the botnet attack (%d attempts)", tr.OwnerLogins)
	}
	for _, rf := range res.Replicas {
		if rf.Panics > 0 || !rf.CleanExit {
			t.Errorf("replica %d: %d panics, clean exit %v; its output:\n%s", rf.N, rf.Panics, rf.CleanExit, tail(logs, 4000))
		}
		if rf.RSSWarm > 0 && rf.RSSEnd > 2*rf.RSSWarm+64<<20 {
			t.Errorf("replica %d: RSS grew from %s after warm-up to %s at the end", rf.N, mib(rf.RSSWarm), mib(rf.RSSEnd))
		}
		if rf.GoroutinesEnd > rf.GoroutinesStart+25 {
			t.Errorf("replica %d: %d goroutines at rest after the run, %d before", rf.N, rf.GoroutinesEnd, rf.GoroutinesStart)
		}
	}
	if len(res.Leaks) > 0 {
		t.Errorf("the replicas' logs hold %d secrets: %q", len(res.Leaks), res.Leaks)
	}
	h := res.Hostile
	if h.SpoofAdmitted > h.SpoofLimit {
		t.Errorf("%d spoofed logins from one untrusted peer were admitted; the per-IP limit is %d", h.SpoofAdmitted, h.SpoofLimit)
	}
	if !h.TimingSameAnswer || h.TimingKnown == 0 || h.TimingUnknown == 0 {
		t.Errorf("logins on known and unknown accounts answered differently, or not at all: %+v", h)
	}
	if h.BodyStatus != http.StatusRequestEntityTooLarge || h.BodySent >= h.BodySize {
		t.Errorf("64 MiB body: status %d after %d bytes; want 413 before the end", h.BodyStatus, h.BodySent)
	}
	if !h.SlowlorisCutOff {
		t.Error("the slowloris client was never cut off")
	}
}

var panicRE = regexp.MustCompile(`(?m)^(panic: |fatal error: |WARNING: DATA RACE)`)

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// documents returns the accounts' documents (punctuated CPFs) and
// documents of no account (bare digits).
func documents() (docs, unknown []string) {
	all := bank.DemoDocuments(140)
	for i, d := range all {
		s := string(d)
		if i < 100 {
			docs = append(docs, s[:3]+"."+s[3:6]+"."+s[6:9]+"-"+s[9:])
		} else {
			unknown = append(unknown, s)
		}
	}
	return docs, unknown
}

func digits(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, s)
}

// writeUsers writes the fleet's users file: every account hashed at
// bcrypt's least cost, so that two shared cores serve the load (every
// login pays a comparison at the directory's highest cost).
func writeUsers(t *testing.T, docs []string, password string) string {
	cheap, _ := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	var recs []bank.UserRecord
	for i, d := range docs {
		recs = append(recs, bank.UserRecord{Document: d, Name: "Cliente " + strconv.Itoa(i), PasswordBcrypt: string(cheap)})
	}
	b, err := json.Marshal(recs)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "users.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func randomHex() string {
	var b [16]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func redisVersion(addr string) string {
	info, err := redistest.Command(addr, "INFO", "server")
	if err != nil {
		return "redis (version unknown)"
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return "redis-server " + v
		}
	}
	return "redis (version unknown)"
}

// goroutines returns the replica's go_goroutines.
func goroutines(t *testing.T, r *Replica) int {
	m, err := r.Metrics("go_goroutines")
	if err != nil {
		t.Errorf("replica %d metrics: %v", r.N, err)
	}
	return int(m["go_goroutines"])
}

var labelRE = regexp.MustCompile(`(\w+)="([^"]*)"`)

// addOutcomes adds the replica's decision and store-error counts to out,
// keyed "route outcome".
func addOutcomes(t *testing.T, out map[string]float64, r *Replica) {
	m, err := r.Metrics("floodgate_decisions_total", "floodgate_store_errors_total")
	if err != nil {
		t.Errorf("replica %d metrics: %v", r.N, err)
		return
	}
	for k, v := range m {
		labels := map[string]string{}
		for _, l := range labelRE.FindAllStringSubmatch(k, -1) {
			labels[l[1]] = l[2]
		}
		what := labels["outcome"]
		if strings.HasPrefix(k, "floodgate_store_errors_total") {
			what = "store error: " + labels["reason"]
		}
		out[labels["gate"]+" "+what] += v
	}
}

// writeResults writes the figures to the log, and to the results file if
// CHAOS_RESULTS names one.
func writeResults(t *testing.T, res *Results) {
	var buf strings.Builder
	if err := res.WriteMarkdown(&buf); err != nil {
		t.Error(err)
	}
	t.Log("\n" + buf.String())
	path := os.Getenv(resultsEnv)
	if path == "" {
		return
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := res.WriteMarkdown(f); err != nil {
		t.Error(err)
	}
	if err := f.Close(); err != nil {
		t.Error(err)
	}
	abs, _ := filepath.Abs(path)
	t.Logf("figures written to %s", abs)
}
