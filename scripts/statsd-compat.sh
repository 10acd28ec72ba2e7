#!/usr/bin/env bash
# Proves that floodgate's service sends envoyproxy/ratelimit's statsd
# statistics: runs both services on one configuration
# (bench/compat/statsd/config) and one throwaway redis-server, each with
# USE_STATSD=true pointed at its own prometheus/statsd_exporter fed
# upstream's example mapping (bench/compat/statsd-exporter/conf.yaml,
# envoyproxy/ratelimit's examples/prom-statsd-exporter/conf.yaml: what
# Envoy Gateway's statsd-exporter sidecar reads), sends both the same
# ShouldRateLimit calls (bench/cmd/statsdcompat) and compares the series
# the two exporters serve: every ratelimit_service_* series, its labels
# and its figure. A second pass compares, in the same way, floodgate's
# own /metrics under USE_PROMETHEUS=true with PROMETHEUS_MAPPER_YAML set
# to the same mapping. It starts things as scripts/compat.sh does.
#
#   scripts/statsd-compat.sh                  the comparison; exit 0 when the series are the same
#   STATSD_COMPAT_BREAK=1 scripts/statsd-compat.sh
#                                             proves it can fail: floodgate runs with
#                                             NEAR_LIMIT_RATIO=0.5, so its near_limit
#                                             figures differ; exit 0 only when the
#                                             comparison FAILS
#
# envoyproxy/ratelimit is built as scripts/compat.sh builds it (the same
# cache, $FLOODGATE_ENVOY_RL_BIN); statsd_exporter is built with go install
# into $FLOODGATE_STATSD_EXPORTER_BIN (default
# ~/.cache/floodgate/statsd-exporter) the first time. v0.30.0: v0.31
# refuses timer_type, which upstream's mapping uses.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

exporter_version=v0.30.0
port_base=19000
. scripts/compat-lib.sh
expdir=${FLOODGATE_STATSD_EXPORTER_BIN:-$cache/statsd-exporter}

if [ ! -x "$expdir/statsd_exporter" ]; then
	echo "== building prometheus/statsd_exporter $exporter_version into $expdir (once)" >&2
	mkdir -p "$expdir"
	GOBIN=$expdir GOFLAGS=-mod=mod GOWORK=off go install "github.com/prometheus/statsd_exporter@$exporter_version"
fi
echo "== building floodgate and statsdcompat" >&2
go build -o "$workdir/floodgate" ./cmd/floodgate
(cd bench && go build -o "$workdir/statsdcompat" ./cmd/statsdcompat)

free_port
redis_port=$port
echo "== redis-server on 127.0.0.1:$redis_port" >&2
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
	--dir "$workdir" --logfile "$workdir/redis.log" --daemonize no >/dev/null &
pids+=($!)
wait_port "$redis_port" 10 "$workdir/redis.log"

# exporter NAME starts a statsd_exporter on upstream's mapping: statsd on
# $statsd (TCP and UDP), its series on $web.
exporter() {
	free_port
	statsd=$port
	free_port
	web=$port
	echo "== statsd_exporter for $1: statsd on 127.0.0.1:$statsd, series on 127.0.0.1:$web" >&2
	"$expdir/statsd_exporter" --statsd.mapping-config="$root/bench/compat/statsd-exporter/conf.yaml" \
		--statsd.listen-udp="127.0.0.1:$statsd" --statsd.listen-tcp="127.0.0.1:$statsd" \
		--web.listen-address="127.0.0.1:$web" --log.level=warn >"$workdir/exporter-$1.log" 2>&1 &
	pass_pids+=($!)
	wait_port "$web" 20 "$workdir/exporter-$1.log"
}

fg_extra=()
if [ -n "${STATSD_COMPAT_BREAK:-}" ]; then
	fg_extra=(NEAR_LIMIT_RATIO=0.5)
	echo "== STATSD_COMPAT_BREAK: floodgate counts near_limit from half of each limit" >&2
fi

# run_pass MODE: envoyproxy/ratelimit with USE_STATSD=true into an
# exporter, and floodgate with USE_STATSD=true into another (MODE statsd)
# or with USE_PROMETHEUS=true and the same mapping file (MODE prometheus:
# its own /metrics is compared); each pass has Redis keys of its own.
run_pass() {
	local mode=$1 pass_pids=() st=0 fg_metrics
	# The same statistics settings for both: upstream's defaults (TCP),
	# a short flush interval.
	local stats=(STATS_FLUSH_INTERVAL=1s)
	exporter "envoy-$mode"
	local en_statsd=$statsd en_web=$web
	free_port
	local grpc_fg=$port
	free_port
	local http_fg=$port
	local fg_stats
	if [ "$mode" = statsd ]; then
		exporter "floodgate-$mode"
		fg_stats=(USE_STATSD=true STATSD_HOST=127.0.0.1 STATSD_PORT=$statsd)
		fg_metrics=http://127.0.0.1:$web/metrics
	else
		free_port
		fg_stats=(USE_PROMETHEUS=true PROMETHEUS_ADDR=127.0.0.1:$port PROMETHEUS_MAPPER_YAML=$root/bench/compat/statsd-exporter/conf.yaml)
		fg_metrics=http://127.0.0.1:$port/metrics
	fi
	echo "== floodgate on 127.0.0.1:$grpc_fg: ${fg_stats[*]}" >&2
	env "${stats[@]}" "${fg_stats[@]}" "${fg_extra[@]}" CONFIG_DIR=$root/bench/compat/statsd/config \
		REDIS_URL=127.0.0.1:$redis_port CACHE_KEY_PREFIX=fg$mode: \
		GRPC_ADDR=127.0.0.1:$grpc_fg HTTP_ADDR=127.0.0.1:$http_fg LOG_LEVEL=warn \
		"$workdir/floodgate" >"$workdir/floodgate-$mode.log" 2>&1 &
	pass_pids+=($!)

	free_port
	local grpc_en=$port
	free_port
	local http_en=$port
	free_port
	local debug_en=$port
	echo "== envoyproxy/ratelimit on 127.0.0.1:$grpc_en: USE_STATSD=true" >&2
	env "${stats[@]}" USE_STATSD=true STATSD_HOST=127.0.0.1 STATSD_PORT=$en_statsd \
		RUNTIME_ROOT=$root/bench/compat/statsd RUNTIME_SUBDIRECTORY=. RUNTIME_APPDIRECTORY=config \
		RUNTIME_WATCH_ROOT=false REDIS_SOCKET_TYPE=tcp REDIS_URL=127.0.0.1:$redis_port CACHE_KEY_PREFIX=en$mode: \
		GRPC_HOST=127.0.0.1 GRPC_PORT=$grpc_en HOST=127.0.0.1 PORT=$http_en \
		DEBUG_HOST=127.0.0.1 DEBUG_PORT=$debug_en LOG_LEVEL=warn \
		"$bindir/service_cmd" >"$workdir/envoy-ratelimit-$mode.log" 2>&1 &
	pass_pids+=($!)
	pids+=("${pass_pids[@]}")

	wait_port "$grpc_fg" 20 "$workdir/floodgate-$mode.log"
	wait_port "$grpc_en" 20 "$workdir/envoy-ratelimit-$mode.log"
	"$workdir/statsdcompat" -floodgate "127.0.0.1:$grpc_fg" -envoy "127.0.0.1:$grpc_en" \
		-floodgate-metrics "$fg_metrics" -envoy-metrics "http://127.0.0.1:$en_web/metrics" || st=$?
	if [ "$st" -eq 2 ]; then
		tail -20 "$workdir/floodgate-$mode.log" "$workdir/envoy-ratelimit-$mode.log" >&2
	fi
	for p in "${pass_pids[@]}"; do
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	return "$st"
}

# Twice: floodgate's statsd into statsd_exporter, then floodgate's own
# mapped series (USE_PROMETHEUS). The worst status counts.
status=0
for mode in statsd prometheus; do
	echo "== pass: $mode" >&2
	st=0
	run_pass "$mode" || st=$?
	if [ "$st" -gt "$status" ]; then status=$st; fi
done
if [ -n "${STATSD_COMPAT_BREAK:-}" ]; then
	if [ "$status" -eq 1 ]; then
		echo "== STATSD_COMPAT_BREAK: the comparison found floodgate's other near_limit figures, as it must" >&2
		exit 0
	fi
	echo "== STATSD_COMPAT_BREAK: the comparison did NOT find the difference (status $status)" >&2
	exit 1
fi
exit "$status"
