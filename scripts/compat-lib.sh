# Sourced by compat.sh and statsd-compat.sh: what both need to run
# floodgate's service beside envoyproxy/ratelimit. It installs
# redis-server if it is missing, makes $workdir (removed on exit, with
# every process in $pids killed), defines free_port and wait_port, and
# builds envoyproxy/ratelimit once into $bindir. Set port_base (a
# multiple of 1000) before sourcing: each script takes its own thousand
# ports, so that two of them can run at once.

envoy_rl_version=v1.4.1-0.20260122083618-3fb702589d36
cache=${XDG_CACHE_HOME:-$HOME/.cache}/floodgate
bindir=${FLOODGATE_ENVOY_RL_BIN:-$cache/envoy-ratelimit}

need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v redis-cli >/dev/null || need+=(redis-tools)
if [ ${#need[@]} -gt 0 ]; then
	echo "== installing ${need[*]}" >&2
	if [ "$(id -u)" -ne 0 ]; then sudo=sudo; else sudo=; fi
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi

workdir=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	rm -rf "$workdir"
}
trap cleanup EXIT

# free_port sets port to a loopback TCP port in port_base to
# port_base+999 that nothing listens on and that it has not given before.
taken=" "
free_port() {
	while :; do
		port=$((port_base + RANDOM % 1000))
		case $taken in *" $port "*) continue ;; esac
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			taken="$taken$port "
			return
		fi
	done
}

# wait_port waits until something listens on 127.0.0.1:$1, or fails after
# $2 seconds showing the log $3.
wait_port() {
	for _ in $(seq $(($2 * 10))); do
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
		sleep 0.1
	done
	echo "nothing listens on port $1 after $2s; $3:" >&2
	tail -20 "$3" >&2
	return 1
}

if [ ! -x "$bindir/service_cmd" ]; then
	echo "== building envoyproxy/ratelimit $envoy_rl_version into $bindir (once; minutes)" >&2
	mkdir -p "$bindir"
	GOBIN=$bindir GOFLAGS=-mod=mod GOWORK=off go install "github.com/envoyproxy/ratelimit/src/service_cmd@$envoy_rl_version"
fi
