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
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${RLS:-}" = only ]; then
	exec scripts/bench-rls.sh "$@"
fi

(
	. scripts/redis.sh
	cd bench
	go run . -redis "$FLOODGATE_REDIS_ADDR" "$@"
)
if [ -n "${RLS:-}" ]; then
	scripts/bench-rls.sh
fi
