# Sourced by test.sh and bench.sh: installs redis-server from Debian's
# packages if it is missing (and a C compiler, which the race detector
# needs), and starts a throwaway one (no persistence) on
# a free loopback port in a temporary directory, which is removed, and the
# server killed, when the calling script exits, even on failure.
# After sourcing: $workdir, and $FLOODGATE_REDIS_ADDR exported.

need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v redis-cli >/dev/null || need+=(redis-tools)
command -v cc >/dev/null || need+=(gcc libc6-dev) # go test -race needs cgo
if [ ${#need[@]} -gt 0 ]; then
	echo "== installing ${need[*]}" >&2
	if [ "$(id -u)" -ne 0 ]; then sudo=sudo; else sudo=; fi
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi

workdir=$(mktemp -d)
redis_pid=
cleanup() {
	if [ -n "$redis_pid" ]; then
		kill -9 "$redis_pid" 2>/dev/null || true
		wait "$redis_pid" 2>/dev/null || true # quietly: no "Killed" line
	fi
	rm -rf "$workdir"
}
trap cleanup EXIT
# A signal ends the script through exit, so that the EXIT trap runs (a
# script sourcing this must not exec its last command either: exec skips
# the trap).
trap 'exit 130' INT
trap 'exit 143' TERM

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

redis_port=$(free_port)
echo "== starting redis-server on 127.0.0.1:$redis_port" >&2
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
	--dir "$workdir" --logfile "$workdir/redis.log" --daemonize no >/dev/null &
redis_pid=$!
for _ in $(seq 100); do
	redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
	sleep 0.1
done
redis-cli -p "$redis_port" ping >/dev/null
export FLOODGATE_REDIS_ADDR="127.0.0.1:$redis_port"
