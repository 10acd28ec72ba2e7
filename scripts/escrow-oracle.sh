#!/usr/bin/env bash
# The escrow oracle (issue 37; docs/RELIABILITY.md, "The escrow oracle"):
# three replica processes share one throwaway redis-server (started here
# on a free loopback port, and always killed on exit, as scripts/redis.sh
# does) and drive one key per algorithm past its limit; the checker
# replays the union of their admission logs. Each run is one mode and
# one scenario:
#   direct  today's path (one store call per decision)
#   escrow  the Limiter's escrow (floodgate.Options.Escrow), once merged
#   broken  an escrow that stamps a lease at its grant: the oracle must
#           find over-admissions here, or it proves nothing
#   plain | kill (SIGKILL a replica mid-burst, holding leases)
#         | stop (SIGSTOP redis-server for three lease periods, then SIGCONT)
# It ends with one "over-admissions: N of M" line per scenario, mode and
# algorithm. About 8 s a run, 7 runs; ORACLE_DURATION changes the 8 s.
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/redis.sh

duration=${ORACLE_DURATION:-8s}
go build -o "$workdir/escrow-oracle" ./internal/oracle/cmd/escrow-oracle
results="$workdir/results"
: >"$results"

oracle() { # mode scenario
	local out="$workdir/run.out"
	printf '== %s %s\n' "$1" "$2" >&2
	if timeout 120 "$workdir/escrow-oracle" run -redis "redis://$FLOODGATE_REDIS_ADDR" -redis-pid "$redis_pid" \
		-mode "$1" -scenario "$2" -duration "$duration" >"$out" 2>"$workdir/run.err"; then
		cat "$out" | tee -a "$results"
	else
		cat "$workdir/run.err" >&2
		exit 1
	fi
	# A run's own faults must not outlive it.
	kill -CONT "$redis_pid" 2>/dev/null || true
}

for mode in direct escrow; do
	for scenario in plain kill stop; do
		oracle "$mode" "$scenario"
	done
done
oracle broken plain

printf '\n== over-admissions (N admissions past the limit, of M in all)\n'
cat "$results"
# The proof's two halves: every correct run holds, and the broken one is caught.
if grep -v '^plain broken' "$results" | grep -q 'over-admissions: [1-9]'; then
	echo "FAIL: a correct mode admitted past a limit"; exit 1
fi
if ! grep '^plain broken' "$results" | grep -q 'over-admissions: [1-9]'; then
	echo "FAIL: the broken escrow went unseen"; exit 1
fi
