#!/usr/bin/env bash
# The whole test suite: installs what it needs (redis-server from Debian's
# packages), starts a throwaway redis-server on a free loopback port, runs
# the format check, go vet and every test under the race detector, and
# stops the server on exit, even on failure.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*"; }

if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
	log "installing redis-server"
	if [ "$(id -u)" -ne 0 ]; then sudo=sudo; else sudo=; fi
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server redis-tools >/dev/null
fi

workdir=$(mktemp -d)
pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
	rm -rf "$workdir"
}
trap cleanup EXIT

# free_port prints a loopback TCP port that nothing listens on.
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
log "starting redis-server on 127.0.0.1:$port"
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
	--dir "$workdir" --logfile "$workdir/redis.log" --daemonize no &
pids+=($!)
for _ in $(seq 100); do
	redis-cli -p "$port" ping >/dev/null 2>&1 && break
	sleep 0.1
done
redis-cli -p "$port" ping >/dev/null
export FLOODGATE_REDIS_ADDR="127.0.0.1:$port"
redis-server --version

log "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

log "go vet"
go vet ./...

log "go test -race"
go test -race -count=1 -shuffle=on -timeout 15m ./...

log "demo (end to end, in-process Redis)"
go run ./cmd/demo >"$workdir/demo.out" 2>&1 || { cat "$workdir/demo.out"; exit 1; }
tail -n 1 "$workdir/demo.out"
