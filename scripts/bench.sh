#!/usr/bin/env bash
# Runs floodgate and its peers side by side (the bench/ module) against a
# throwaway redis-server on a free loopback port, and prints one table
# (decisions/s, p50, p99, allocations and CPU per decision, each with its
# ratio to floodgate) and the Redis memory table. Extra arguments go to the
# bench command (go run . -h lists them), e.g.
#   scripts/bench.sh -duration 5s -goroutines 64
# It takes about five minutes with the defaults. See BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
	echo "== installing redis-server" >&2
	if [ "$(id -u)" -ne 0 ]; then sudo=sudo; else sudo=; fi
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server redis-tools >/dev/null
fi

workdir=$(mktemp -d)
pid=
cleanup() {
	if [ -n "$pid" ]; then kill -9 "$pid" 2>/dev/null || true; fi
	rm -rf "$workdir"
}
trap cleanup EXIT

free_port() {
	local port
	while :; do
		port=$((20000 + RANDOM % 20000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "$port"
			return
		fi
	done
}

port=$(free_port)
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
	--dir "$workdir" --logfile "$workdir/redis.log" --daemonize no &
pid=$!
for _ in $(seq 100); do
	redis-cli -p "$port" ping >/dev/null 2>&1 && break
	sleep 0.1
done
redis-cli -p "$port" ping >/dev/null

cd bench
go run . -redis "127.0.0.1:$port" "$@"
