#!/usr/bin/env bash
# Runs floodgate's service and envoyproxy/ratelimit side by side on the
# same configuration directory (bench/compat/ratelimit/config: the
# examples of envoyproxy/ratelimit's README as files, and more), on one
# throwaway redis-server (flushed before the sequence; the two services'
# keys never overlap), sends both one scripted sequence of
# ShouldRateLimit calls through the generated gRPC client
# (bench/cmd/rlscompat) and compares the answers field by field, once
# with both services' default headers and once with
# LIMIT_RESPONSE_HEADERS_ENABLED=true on both, then runs
# scripts/statsd-compat.sh (the statsd_exporter series of both). It
# passes when every difference is one of the deliberate ones that
# rlscompat prints (docs/SERVICE.md lists them too).
#
#   scripts/compat.sh                  the comparison; exit 0 when it passes
#   COMPAT_BREAK=1 scripts/compat.sh   proves it can fail: envoyproxy/ratelimit
#                                      reads a copy of the directory with one
#                                      limit changed (mongo_cps users 500 -> 499);
#                                      exit 0 only when the comparison FAILS
#   COMPAT_XDS=1 scripts/compat.sh     the same comparison with both services
#                                      configured over xDS (CONFIG_TYPE=GRPC_XDS_SOTW)
#                                      by one server, bench/cmd/xdsconfig, serving
#                                      the directory as RateLimitConfig resources
#                                      to one node id; rlscompat -xds checks the
#                                      differences of that mode (it prints them;
#                                      COMPAT_BREAK works with it too)
#
# envoyproxy/ratelimit is built with go install into a cache directory
# ($FLOODGATE_ENVOY_RL_BIN, default ~/.cache/floodgate/envoy-ratelimit) the
# first time (about 2.5 minutes) and reused after. The test command never
# builds it. REDIS_PORT picks the redis-server's port (default: a free
# one).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

port_base=18000
. scripts/compat-lib.sh
echo "== building floodgate and rlscompat" >&2
go build -o "$workdir/floodgate" ./cmd/floodgate
(cd bench && go build -o "$workdir/rlscompat" ./cmd/rlscompat)
if [ -n "${COMPAT_XDS:-}" ]; then
	(cd bench && go build -o "$workdir/xdsconfig" ./cmd/xdsconfig)
fi

# One configuration directory for both; with COMPAT_BREAK, a copy for
# envoyproxy/ratelimit with one limit changed.
fg_root=$root/bench/compat
en_root=$root/bench/compat
if [ -n "${COMPAT_BREAK:-}" ]; then
	en_root=$workdir/broken
	cp -r bench/compat "$en_root"
	sed -i '0,/requests_per_unit: 500/s//requests_per_unit: 499/' "$en_root/ratelimit/config/readme1_mongo_cps.yaml"
	echo "== COMPAT_BREAK: envoyproxy/ratelimit reads mongo_cps users at 499/s instead of 500/s" >&2
fi

free_port
redis_port=${REDIS_PORT:-$port}
echo "== redis-server on 127.0.0.1:$redis_port" >&2
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
	--dir "$workdir" --logfile "$workdir/redis.log" --daemonize no >/dev/null &
pids+=($!)
wait_port "$redis_port" 10 "$workdir/redis.log"

# With COMPAT_XDS, the services read no directory: xdsconfig serves it
# over xDS, to one node id (and, with COMPAT_BREAK, the broken copy from a
# second server, since one node id has one snapshot).
fg_src=(CONFIG_DIR=$fg_root/ratelimit/config)
en_src=(RUNTIME_ROOT=$en_root RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false)
compat_flags=()
if [ -n "${COMPAT_XDS:-}" ]; then
	node=floodgate-compat
	free_port
	fg_xds=$port
	echo "== xdsconfig on 127.0.0.1:$fg_xds serving $fg_root/ratelimit/config to node $node" >&2
	"$workdir/xdsconfig" -dir "$fg_root/ratelimit/config" -addr "127.0.0.1:$fg_xds" -node "$node" >"$workdir/xdsconfig.log" 2>&1 &
	pids+=($!)
	wait_port "$fg_xds" 20 "$workdir/xdsconfig.log"
	en_xds=$fg_xds
	if [ "$en_root" != "$fg_root" ]; then
		free_port
		en_xds=$port
		echo "== xdsconfig on 127.0.0.1:$en_xds serving $en_root/ratelimit/config (COMPAT_BREAK) to node $node" >&2
		"$workdir/xdsconfig" -dir "$en_root/ratelimit/config" -addr "127.0.0.1:$en_xds" -node "$node" >"$workdir/xdsconfig-break.log" 2>&1 &
		pids+=($!)
		wait_port "$en_xds" 20 "$workdir/xdsconfig-break.log"
	fi
	# The fields the proto cannot carry, which rlscompat -xds lists as
	# differences from the file mode.
	grep '^dropped:' "$workdir/xdsconfig.log" >&2 || true
	fg_src=(CONFIG_TYPE=GRPC_XDS_SOTW CONFIG_GRPC_XDS_SERVER_URL=127.0.0.1:$fg_xds CONFIG_GRPC_XDS_NODE_ID=$node)
	en_src=(CONFIG_TYPE=GRPC_XDS_SOTW CONFIG_GRPC_XDS_SERVER_URL=127.0.0.1:$en_xds CONFIG_GRPC_XDS_NODE_ID=$node)
	compat_flags=(-xds)
fi

# run_pass starts both services with the extra environment "$@" (the
# same for both), runs rlscompat against them and stops them; its status
# is rlscompat's.
run_pass() {
	local grpc_fg http_fg grpc_en http_en debug_en pass_pids=() st=0
	free_port
	grpc_fg=$port
	free_port
	http_fg=$port
	echo "== floodgate on 127.0.0.1:$grpc_fg $*" >&2
	env "${fg_src[@]}" "$@" REDIS_URL=127.0.0.1:$redis_port \
		GRPC_ADDR=127.0.0.1:$grpc_fg HTTP_ADDR=127.0.0.1:$http_fg LOG_LEVEL=warn \
		"$workdir/floodgate" >>"$workdir/floodgate.log" 2>&1 &
	pass_pids+=($!)

	free_port
	grpc_en=$port
	free_port
	http_en=$port
	free_port
	debug_en=$port
	echo "== envoyproxy/ratelimit on 127.0.0.1:$grpc_en $*" >&2
	env "${en_src[@]}" "$@" USE_STATSD=false REDIS_SOCKET_TYPE=tcp REDIS_URL=127.0.0.1:$redis_port \
		GRPC_HOST=127.0.0.1 GRPC_PORT=$grpc_en HOST=127.0.0.1 PORT=$http_en \
		DEBUG_HOST=127.0.0.1 DEBUG_PORT=$debug_en LOG_LEVEL=warn \
		"$bindir/service_cmd" >>"$workdir/envoy-ratelimit.log" 2>&1 &
	pass_pids+=($!)
	pids+=("${pass_pids[@]}")

	wait_port "$grpc_fg" 20 "$workdir/floodgate.log"
	wait_port "$grpc_en" 20 "$workdir/envoy-ratelimit.log"
	"$workdir/rlscompat" "${compat_flags[@]}" -floodgate "127.0.0.1:$grpc_fg" -envoy "127.0.0.1:$grpc_en" -redis "127.0.0.1:$redis_port" || st=$?
	for p in "${pass_pids[@]}"; do
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	return "$st"
}

# Twice: with both services' default headers (none), then with
# envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED on both. The
# worst status counts.
status=0
for headers in "" LIMIT_RESPONSE_HEADERS_ENABLED=true; do
	echo "== pass: ${headers:-default headers}" >&2
	st=0
	run_pass $headers || st=$?
	if [ "$st" -gt "$status" ]; then status=$st; fi
done
# The statistics side by side, through statsd_exporter
# (scripts/statsd-compat.sh), with the configuration from files;
# COMPAT_NO_STATSD=1 skips them.
if [ -z "${COMPAT_XDS:-}${COMPAT_BREAK:-}${COMPAT_NO_STATSD:-}" ]; then
	echo "== scripts/statsd-compat.sh" >&2
	st=0
	scripts/statsd-compat.sh || st=$?
	if [ "$st" -gt "$status" ]; then status=$st; fi
fi
if [ -n "${COMPAT_BREAK:-}" ]; then
	if [ "$status" -eq 1 ]; then
		echo "== COMPAT_BREAK: the comparison found the changed limit, as it must" >&2
		exit 0
	fi
	echo "== COMPAT_BREAK: the comparison did NOT find the changed limit (status $status)" >&2
	exit 1
fi
exit "$status"
