#!/usr/bin/env bash
# Mutation testing (issue 12): runs gremlins v0.6.0, with its default
# mutators, on one package at a time and prints a table of mutants, killed,
# lived, not covered, timed out, not viable and the score, killed /
# (killed + lived). It is not part of scripts/test.sh: a package takes
# minutes to tens of minutes. docs/TESTING.md shows the last table and the
# equivalent mutants.
#
#   scripts/mutation.sh                    # root clientip httplimit
#   scripts/mutation.sh root clientip      # the packages named (root = core)
#   scripts/mutation.sh memstore redisstore  # the stores, with their filters
#   scripts/mutation.sh rls                # the service, without its long tests
#   MUTATION_KEEP=dir scripts/mutation.sh  # keep each package's JSON and log
#
# Environment: MUTATION_WORKERS (default 1: the machine is shared; more
# workers also make real-clock tests flaky), MUTATION_TIMEOUT_COEFFICIENT
# (default 10). A package whose tests need Redis gets a throwaway
# redis-server (scripts/redis.sh) unless FLOODGATE_REDIS_ADDR is set.
# MUTATION_RUN and MUTATION_SKIP pass -run and -skip to every test run,
# the coverage run included, and MUTATION_EXCLUDE adds --exclude-files
# patterns (regular expressions, space-separated) for files that only
# drive external processes. The defaults per package are below
# (filters_for); setting a variable, even to "", overrides its default.
#
# Gremlins quirks, and what this script does about each:
#
#  - It runs only the mutated package's own tests for each mutant (its
#    --integration mode runs every test of the module per mutant, far too
#    slow). The score is therefore what a package's own tests catch, which
#    is what the targets mean: a package's tests must pin its behaviour.
#
#  - Its coverage step runs `go test -cover ./...` from the module root
#    (`./pkg/...` when started in pkg/), so for the core, whose directory
#    is the module root, it runs every test of the module, and it walks
#    every subdirectory for mutants. The script runs gremlins from the
#    package's directory with --exclude-files '/' (the package's own files
#    only, no subdirectories), and puts a `go` wrapper first in PATH that
#    narrows the coverage run to the package itself.
#
#  - That coverage run may come from Go's test cache and take a few
#    milliseconds, and gremlins times each mutant's test run out at the
#    coverage run's duration times a coefficient (3), which is also too
#    tight for packages with real-clock tests (the core's Wait, httplimit's
#    throttling) once a mutant's package must be recompiled on a loaded
#    machine. The wrapper adds -count=1 to the coverage run, and the script
#    raises --timeout-coefficient to 10.
#
#  - Go's coverage blocks leave out the conditions of `case` clauses and of
#    an `else if` whose statement holds a function literal, so gremlins
#    marks mutants there "not covered" although they run. After the
#    coverage run, the wrapper adds each gap between two blocks to the
#    profile as covered when a block beside it ran, or when it ends at a
#    `case`/`default` line and the gap before it was added (the cases of
#    one switch). A gap that did not run then yields a lived mutant, never
#    a hidden one.
#
#  - --test-cpu is broken (it passes "-cpu N" as one argument, which
#    `go test` rejects, so every mutant would look killed): not used.
#
#  - A mutant that does not compile (`+` on strings turned into `-`) makes
#    `go test` exit 1, which gremlins counts as killed. The wrapper turns a
#    build failure into exit status 2, which gremlins counts as not viable,
#    and turns vet off in mutants' test runs (a mutated condition can trip
#    vet's checks, which is no test catching it).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

gremlins_version=v0.6.0
GOBIN=$(go env GOPATH)/bin
if ! go version -m "$GOBIN/gremlins" 2>/dev/null | grep -qE "^\s+mod\s+github.com/go-gremlins/gremlins\s+$gremlins_version\s"; then
	echo "== installing gremlins $gremlins_version" >&2
	go install "github.com/go-gremlins/gremlins/cmd/gremlins@$gremlins_version"
fi
gremlins=$GOBIN/gremlins

pkgs=("$@")
[ ${#pkgs[@]} -gt 0 ] || pkgs=(root clientip httplimit)
workers=${MUTATION_WORKERS:-1}
coefficient=${MUTATION_TIMEOUT_COEFFICIENT:-10}

if [ -z "${FLOODGATE_REDIS_ADDR:-}" ]; then
	. scripts/redis.sh # sets $workdir, starts redis-server, cleans up on exit
else
	workdir=$(mktemp -d)
	trap 'rm -rf "$workdir"' EXIT
fi
keep=$(realpath -m "${MUTATION_KEEP:-$workdir}")
mkdir -p "$keep"

# The go wrapper (see the quirks above).
mkdir -p "$workdir/bin"
cat >"$workdir/bin/go" <<'WRAPPER'
#!/usr/bin/env bash
set -uo pipefail
real=$MUTATION_REAL_GO
if [ "${1:-}" != test ]; then exec "$real" "$@"; fi
filter=()
[ -n "${MUTATION_RUN_PKG:-}" ] && filter+=(-run "$MUTATION_RUN_PKG")
[ -n "${MUTATION_SKIP_PKG:-}" ] && filter+=(-skip "$MUTATION_SKIP_PKG")
profile=
args=()
prev=
for a in "$@"; do
	[ "$prev" = -coverprofile ] && profile=$a
	prev=$a
	args+=("$a")
done
if [ -n "$profile" ]; then
	# gremlins' coverage run: only the package, never from the test cache.
	unset 'args[${#args[@]}-1]'
	"$real" "${args[@]:0:1}" -count=1 "${filter[@]}" "${args[@]:1}" "$MUTATION_PKG_PATH" || exit
	awk -v root="$MUTATION_ROOT" -v mod="$MUTATION_MODULE" -f "$MUTATION_FILL" "$profile" >"$profile.filled" &&
		mv "$profile.filled" "$profile"
	exit
fi
# A mutant's test run: no vet, and a build failure is exit status 2.
out=$("$real" "${args[@]:0:1}" -vet=off "${filter[@]}" "${args[@]:1}" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ $rc -ne 0 ] && grep -qE '\[(build|setup) failed\]' <<<"$out"; then exit 2; fi
exit $rc
WRAPPER
chmod +x "$workdir/bin/go"

# fill.awk: adds the gaps between coverage blocks (see the quirks above).
cat >"$workdir/fill.awk" <<'AWK'
NR == 1 { print; next }
{
	split($1, a, ":"); file = a[1]; split(a[2], r, ","); split(r[1], s, "."); split(r[2], e, ".")
	key = file SUBSEP sprintf("%08d%08d%08d%08d", s[1], s[2], e[1], e[2])
	if (!(key in cnt)) { n[file]++; blk[file, n[file]] = key; sl[key] = s[1]; sc[key] = s[2]; el[key] = e[1]; ec[key] = e[2] }
	if ($3 > cnt[key]) cnt[key] = $3
	print
}
function srcline(file, line,    path, l, i) {
	path = file; sub("^" mod "/", "", path); path = root "/" path
	if (!(path in lines)) {
		lines[path] = 1; i = 0
		while ((getline l < path) > 0) src[path, ++i] = l
		close(path)
	}
	return src[path, line]
}
END {
	for (f in n) {
		m = n[f]
		for (i = 1; i <= m; i++) k[i] = blk[f, i]
		# insertion sort by position (keys sort as strings)
		for (i = 2; i <= m; i++) { x = k[i]; for (j = i - 1; j >= 1 && k[j] > x; j--) k[j + 1] = k[j]; k[j + 1] = x }
		filled = 0
		for (i = 2; i <= m; i++) {
			p = k[i - 1]; q = k[i]
			if (el[p] > sl[q] || (el[p] == sl[q] && ec[p] >= sc[q])) { filled = 0; continue } # no gap
			caseLine = srcline(f, sl[q]) ~ /^[ \t]*(case[ \t]|default:)/
			if (cnt[p] > 0 || cnt[q] > 0 || (filled && caseLine)) {
				printf "%s:%d.%d,%d.%d 1 1\n", f, el[p], ec[p], sl[q], sc[q]
				filled = 1
			} else filled = 0
		}
	}
}
AWK

export MUTATION_REAL_GO MUTATION_ROOT=$root MUTATION_MODULE MUTATION_FILL=$workdir/fill.awk
MUTATION_REAL_GO=$(command -v go)
MUTATION_MODULE=$(go list -m)

# Per-package defaults of MUTATION_RUN, MUTATION_SKIP and MUTATION_EXCLUDE:
#  - memstore: TestConformanceRealClock runs the suite of TestConformance
#    again on the real clock and sleeps for about 5 s; per mutant that is
#    most of the run, and the fake-clock suite checks the same figures.
#  - redisstore: the tests that start or stop Cluster, Sentinel, Valkey or
#    a killed/frozen redis-server (about 80 s of the 90) are skipped, and so
#    are the replicas' real-clock concurrency, the differential run against
#    memstore and the memory report. The rest (about 17 s, the real-clock
#    conformance suite included) runs on one redis-server. rueidis.go, the
#    driver of the rueidis client, is excluded: most of it dials and
#    redials, which only the skipped outage tests drive (their mutants
#    would all live), and its Eval runs under every other test anyway.
filters_for() {
	skip= run= exclude=
	case $1 in
	memstore) skip='^TestConformanceRealClock$' ;;
	rls) skip='^(TestExactUnderConcurrency|TestClusterAllOrNothing|TestRedisOutage|TestExactOverJSON|TestPeekOutage|FuzzShouldRateLimit)$' ;;
	redisstore)
		exclude='rueidis\.go$'
		skip='^(TestCluster|TestClusterFailover|TestSentinel|TestSentinelFailover|TestValkey|TestStartDuringOutage|TestDialIsRateLimited|TestKilledRedisRecovers|TestFrozenRedisRespectsTheBudget|TestNoCallWaitsForever|TestCloseDuringDial|TestReplicas.*|TestDifferentialAgainstMemstore|TestMemoryUsage)$'
		;;
	esac
	MUTATION_RUN_PKG=${MUTATION_RUN-$run}
	MUTATION_SKIP_PKG=${MUTATION_SKIP-$skip}
	exclude_files=(--exclude-files '/')
	local xs x
	read -ra xs <<<"${MUTATION_EXCLUDE-$exclude}" # split on blanks, no globbing
	for x in "${xs[@]}"; do exclude_files+=(--exclude-files "$x"); done
	export MUTATION_RUN_PKG MUTATION_SKIP_PKG
}

rows=()
for p in "${pkgs[@]}"; do
	filters_for "$p"
	if [ "$p" = root ]; then dir=.; else dir=$p; fi
	[ -d "$dir" ] || { echo "no package directory $dir" >&2; exit 1; }
	export MUTATION_PKG_PATH=./$dir
	[ "$dir" = . ] && MUTATION_PKG_PATH=.
	json=$keep/$p.json
	log=$keep/$p.log
	echo "== gremlins $p (log: $log; -run '$MUTATION_RUN_PKG' -skip '$MUTATION_SKIP_PKG')" >&2
	start=$(date +%s)
	(cd "$dir" && PATH="$workdir/bin:$PATH" "$gremlins" unleash --workers "$workers" \
		--timeout-coefficient "$coefficient" "${exclude_files[@]}" -o "$json") >"$log" 2>&1 ||
		{ tail -n 20 "$log" >&2; exit 1; }
	secs=$(($(date +%s) - start))
	rows+=("$(jq -r --arg p "$p" --arg secs "$secs" '
		[.files[].mutations[].status] as $s
		| def n($x): [$s[] | select(. == $x)] | length;
		(n("KILLED")) as $k | (n("LIVED")) as $l
		| [$p, ($s | length), $k, $l, n("NOT COVERED"), n("TIMED OUT"), n("NOT VIABLE"),
		   (if $k + $l > 0 then "\(($k * 1000 / ($k + $l) | floor) / 10)%" else "-" end), "\($secs)s"]
		| @tsv' "$json")")
	# The mutants that lived or were not covered, for the next test to write.
	jq -r '.files[] | .file_name as $f | .mutations[]
		| select(.status == "LIVED" or .status == "NOT COVERED" or .status == "TIMED OUT")
		| "   \(.status)\t\($f):\(.line):\(.column)\t\(.type)"' "$json" | sort -t: -k1,1 -k2,2n >&2
done

printf '\n| package | mutants | killed | lived | not covered | timed out | not viable | score | time |\n'
printf '|---|---|---|---|---|---|---|---|---|\n'
for r in "${rows[@]}"; do
	printf '| %s |\n' "$(sed 's/\t/ | /g' <<<"$r")"
done
