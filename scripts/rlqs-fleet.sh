#!/usr/bin/env bash
# The RLQS fleet proof of issue 38 (rlqs.TestFleet, full size): 11 Envoys
# played as Envoy's rate_limit_quota filter does (reports every 1s,
# deny-all no_assignment and expired_assignment behaviours, each assignment
# enforced locally with a token bucket) against 2 floodgate RLQS replicas on
# one redis-server of its own: one Envoy asks for 60% of a 1,000/s limit,
# nine for 50/s each, one of them leaves at 15s and another joins at 25s,
# for 40s. It fails if any second admits past the limit, if a second from
# the third on admits 90% or less while demand is above it (the demand the
# test process could make: a stall of the process is not counted as
# demand), or if an Envoy takes more than 2 report intervals to reach 85%
# of its max-min fair share. Those last two depend on timing: run it on an
# idle machine.
# The redis-server listens on loopback only and is always stopped; the run
# is bounded by go test's -timeout. It ends with the line
#   rlqs: worst second A of L admitted; fair share within K intervals; over-limit seconds: N
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null; then
	echo "rlqs-fleet: redis-server is not on PATH (apt-get install redis-server)" >&2
	exit 1
fi
workdir=$(mktemp -d)
redis_pid=
cleanup() {
	if [ -n "$redis_pid" ]; then
		kill "$redis_pid" 2>/dev/null || true
		wait "$redis_pid" 2>/dev/null || true
	fi
	rm -rf "$workdir"
}
trap cleanup EXIT INT TERM

# A free loopback port: bind port 0 and read what the kernel gave.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --dir "$workdir" --logfile "$workdir/redis.log" &
redis_pid=$!
for _ in $(seq 50); do
	if redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null | grep -q PONG; then break; fi
	sleep 0.1
done
redis-cli -h 127.0.0.1 -p "$port" ping >/dev/null

echo "== rlqs.TestFleet (full): 11 Envoys, 2 replicas, redis-server on 127.0.0.1:$port, 40s" >&2
status=0
FLOODGATE_REDIS_ADDR=127.0.0.1:$port FLOODGATE_RLQS_FLEET=full \
	go test -count=1 -timeout 3m -run '^TestFleet$' -v ./internal/rlqs/ >"$workdir/out" 2>&1 || status=$?
grep -v '^rlqs:' "$workdir/out" | grep -v '^=== RUN' >&2 || true
line=$(grep '^rlqs:' "$workdir/out" | tail -1 || true)
if [ -z "$line" ]; then
	echo "rlqs-fleet: the test printed no result (exit $status)" >&2
	exit 1
fi
echo "$line"
exit "$status"
