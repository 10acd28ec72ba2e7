#!/usr/bin/env bash
# Runs floodgate and its peers side by side (the bench/ module) against a
# throwaway redis-server on a free loopback port, and prints one table
# (decisions/s, p50, p99, allocations and CPU per decision, each with its
# ratio to floodgate) and the Redis memory table. Extra arguments go to the
# bench command (go run . -h lists them), e.g.
#   scripts/bench.sh -duration 5s -goroutines 64
# It takes about five minutes with the defaults. See BENCHMARKS.md.
# With RLS=1 it runs scripts/bench-rls.sh after (the service against
# envoyproxy/ratelimit, issue 16), and with RLS=only that alone; the
# arguments then go to rlsbench.
# The memory rows of floodgate's store run twice, as it is now and as it
# was at BASE (default 65b8f30, issue 28's baseline), copied by
# scripts/benchbase.sh; BASE= (empty) leaves the baseline out.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${RLS:-}" = only ]; then
	exec scripts/bench-rls.sh "$@"
fi

tags=
if [ -n "${BASE-65b8f30}" ]; then
	scripts/benchbase.sh "${BASE-65b8f30}"
	tags=base
fi
(
	. scripts/redis.sh
	cd bench
	go run -tags "$tags" . -redis "$FLOODGATE_REDIS_ADDR" "$@"
)
if [ -n "${RLS:-}" ]; then
	scripts/bench-rls.sh
fi
