#!/usr/bin/env bash
# The whole test suite: installs what it needs (redis-server from Debian's
# packages), starts a throwaway redis-server on a free loopback port, runs
# the format check, go vet and every test under the race detector, then
# the chaos test alone (about 90 s of faults under load), every fuzz
# target briefly and the demo, and stops the server on exit, even on
# failure.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*"; }

. scripts/redis.sh
redis-server --version

# --- Redis Cluster, Sentinel, failover, Valkey (issue 5) --------------------
# The Go tests start their own clusters (3 masters + 3 replicas, built by
# `redis-cli --cluster create`) and Sentinel groups (a master, a replica,
# three `redis-server --sentinel`) on free loopback ports, through
# internal/redistest, and kill them when each test ends: they need only
# redis-server and redis-cli, installed above. The failover tests log what
# they measured (go test -v -run Failover ./redisstore shows it, and
# FLOODGATE_FAILOVER_REPORT=file appends it there as JSON lines).
# Valkey runs the conformance suite too where apt offers valkey-server
# (Debian 13 and later; Debian 12 has none, and the test skips).
if ! command -v valkey-server >/dev/null; then
	if apt-cache policy valkey-server 2>/dev/null | grep -q 'Candidate: [0-9]'; then
		log "installing valkey-server"
		if [ "$(id -u)" -ne 0 ]; then sudo=sudo; else sudo=; fi
		DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq valkey-server >/dev/null ||
			echo "valkey-server: install failed; TestValkey will skip"
		# The package starts a service on 6379; the tests start their own.
		$sudo systemctl disable --now valkey-server >/dev/null 2>&1 || true
	else
		echo "valkey-server: no apt candidate on this distribution; TestValkey will skip"
	fi
fi
if command -v valkey-server >/dev/null; then valkey-server --version; fi
# --- end of issue 5 section -------------------------------------------------

# --- Prometheus (issue 17) ---------------------------------------------------
# examples/bank/internal/ops runs a real Prometheus (Debian's prometheus
# package: /usr/bin/prometheus and promtool) against bankapi to check the
# dashboard's queries and the alert rules; FLOODGATE_REQUIRE_PROMETHEUS
# makes that test fail instead of skipping when the binaries are missing.
if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
	log "installing prometheus"
	if [ "$(id -u)" -ne 0 ]; then sudo=sudo; else sudo=; fi
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends prometheus >/dev/null
	# The package starts a server on :9090; the test starts its own.
	$sudo systemctl disable --now prometheus >/dev/null 2>&1 || true
fi
prometheus --version 2>&1 | head -n 1
promtool check rules deploy/prometheus/alerts.yaml
export FLOODGATE_REQUIRE_PROMETHEUS=1
# --- end of issue 17 section ------------------------------------------------

log "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

# The modules: the library (.), and, named by go.work, the bank example
# (examples/bank: the reference service, its demo and chaos suite), the gin
# adapter (adapters/ginlimit) and the benchmarks (bench). "./..." names the
# packages of one module only, so each is listed.
modules="./... ./examples/bank/... ./adapters/ginlimit/..."

log "go vet"
go vet $modules

# The bench/ module (peers, side by side; see BENCHMARKS.md) is its own
# module: vet it, test the RLS compat and bench programs' logic (bench/cmd),
# and run its guards briefly so it cannot rot, without the long benchmarks.
log "bench module (go vet, short run)"
(cd bench && go vet ./... && go test -race -count=1 ./cmd/... &&
	go run . -redis "$FLOODGATE_REDIS_ADDR" -duration 300ms -mem-duration 100ms -rounds 1 -goroutines 64 -workloads attack \
		>"$workdir/bench.out" 2>&1) || { cat "$workdir/bench.out"; exit 1; }

log "go test -race"
go test -race -count=1 -shuffle=on -timeout 9m -skip '^(TestChaos|TestFloodOfLargeRequests)$' $modules

# The load tests run alone: the flood's 2 s of large requests, and the
# chaos test's three replicas under load, would crowd the timing-tolerant
# tests of other packages on a small machine, and be crowded by them. The
# flood runs at full scale without the race detector, which would slow
# the service it measures several times over (under -race it scales
# itself down, and no longer tells the old breaker from the new).
go test -count=1 -run '^TestFloodOfLargeRequests$' ./internal/rls

# The chaos test's figures
# are printed here; docs/reliability-results.md holds a committed run.
CHAOS_RESULTS="$workdir/reliability-results.md" go test -race -count=1 -timeout 4m -run '^TestChaos$' ./examples/bank/internal/chaos
sed -n '/^## Limits held/,/^## Faults/p' "$workdir/reliability-results.md"

# ---------------------------------------------------------------- fuzzing
# Every fuzz target (go test -list finds them, so a new one joins by
# itself) runs for FUZZTIME (default 5s) on top of its seed corpus in
# testdata/fuzz. A failure leaves the input in that directory: commit it as
# a regression seed with the fix.
fuzztime=${FUZZTIME:-5s}
log "fuzz: every target for $fuzztime"
targets=$(go test -list '^Fuzz' $modules | awk '/^Fuzz/ { names[n++] = $1; next } /^ok/ { for (i = 0; i < n; i++) print $2 " " names[i]; n = 0 }')
[ -n "$targets" ] || { echo "no fuzz targets found"; exit 1; }
while read -r pkg target; do
	printf -- '-- %s %s\n' "$pkg" "$target"
	corpus="$(go list -f '{{.Dir}}' "$pkg")/testdata/fuzz/$target"
	before=$( (find "$corpus" -type f 2>/dev/null || true) | wc -l) # no corpus yet: 0
	if ! go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg" >"$workdir/fuzz.out" 2>&1; then
		after=$( (find "$corpus" -type f 2>/dev/null || true) | wc -l)
		# Go 1.26's fuzz coordinator may report its own -fuzztime deadline
		# as a failure (go.dev/issue/75804, fixed in Go 1.27): that is no
		# finding when it is the only error and no failing input was written.
		if [ "$after" -eq "$before" ] && grep -q '^    context deadline exceeded$' "$workdir/fuzz.out" &&
			[ "$(grep -c -E '^\s+\S' "$workdir/fuzz.out")" -eq 1 ]; then
			echo "   (the -fuzztime deadline race of go.dev/issue/75804; no failing input)"
		else
			cat "$workdir/fuzz.out"
			exit 1
		fi
	fi
	grep -E '^fuzz: elapsed' "$workdir/fuzz.out" | tail -n 1
done <<<"$targets"
# ------------------------------------------------------------ end fuzzing

log "demo (end to end, in-process Redis)"
go run ./examples/bank/cmd/demo >"$workdir/demo.out" 2>&1 || { cat "$workdir/demo.out"; exit 1; }
tail -n 1 "$workdir/demo.out"
