#!/usr/bin/env bash
# floodgate's escrow beside gubernator v2 with GLOBAL behaviour (issue 37),
# in one run on this machine, loopback only: three gubernator daemons (its
# own daemon code, in the bench process, each on its own loopback ports
# and a peer of the other two) and three floodgate Limiters on one
# throwaway redis-server (scripts/redis.sh, killed on exit).
#   1. the hot workload of the escrow table: decisions/s of 64 goroutines
#      over the three replicas, rows floodgate direct, floodgate escrow,
#      floodgate memstore and gubernator v2 GLOBAL;
#   2. the overadmit workload: one key hammered past 1,000 per second by
#      the same 64 goroutines, as a fixed window (floodgate FixedWindow
#      beside gubernator's TOKEN_BUCKET) and as a bucket (floodgate
#      TokenBucket beside gubernator's LEAKY_BUCKET), every admission
#      logged with its time span in the escrow oracle's format, then the
#      oracle's checker
#      (escrow-oracle check -origin, from each start of gubernator's
#      windows that its answers named; the least count is the row's
#      "over-admissions: N of M"). The bench's own line for gubernator adds
#      a count with no clock, by the windows its answers named.
#   3. with ORACLE=1, the escrow oracle's own run of floodgate escrow
#      (escrow-oracle run -mode escrow -scenario plain), for its 0s.
# GUBER_DURATION (default 2s) is each cell of 1, OVERADMIT_DURATION
# (default 5s) each row of 2. About a minute in all. See BENCHMARKS.md,
# "gubernator v2 GLOBAL beside escrow".
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/redis.sh

logs="$workdir/overadmit"
go build -o "$workdir/escrow-oracle" ./internal/oracle/cmd/escrow-oracle
(cd bench && go build -tags gubernator -o "$workdir/bench" .)
timeout 300 "$workdir/bench" -redis "$FLOODGATE_REDIS_ADDR" -workloads hot,overadmit \
	-duration "${GUBER_DURATION:-2s}" -overadmit-duration "${OVERADMIT_DURATION:-5s}" -overadmit-dir "$logs"

printf '\n# the escrow oracle'"'"'s checker on each row'"'"'s logs: a fixed window of 1,000 per 1s (floodgate, on the epoch) or per 1.001s (gubernator'"'"'s TOKEN_BUCKET, from each start its answers came from; the least count holds in whichever), and a bucket of 1,000 per 1s with a burst of 1,000 (floodgate'"'"'s TokenBucket, gubernator'"'"'s LEAKY_BUCKET); see bench/overadmit.go\n'
for row in floodgate-escrow gubernator-global floodgate-escrow-bucket gubernator-global-leaky; do
	least=
	while read -r origin; do
		line=$("$workdir/escrow-oracle" check -origin "$origin" "$logs/$row"-[0-9]*.log)
		printf '%s from %s: %s\n' "$row" "$origin" "$line"
		n=${line#*over-admissions: }
		n=${n%% of*}
		if [ -z "$least" ] || [ "$n" -lt "${least%% *}" ]; then least="$n ${line#*over-admissions: $n }"; fi
	done <"$logs/$row.origins"
	printf '%s: over-admissions: %s\n' "$row" "$least"
done

if [ "${ORACLE:-}" = 1 ]; then
	printf '\n# escrow-oracle run -mode escrow -scenario plain (its own load: limits of 100 per second, 8 s)\n'
	timeout 120 "$workdir/escrow-oracle" run -redis "redis://$FLOODGATE_REDIS_ADDR" -mode escrow -scenario plain 2>"$workdir/oracle.err" ||
		{ cat "$workdir/oracle.err" >&2; exit 1; }
fi
