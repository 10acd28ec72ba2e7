#!/usr/bin/env bash
# The RLS benchmark of issue 16: floodgate's service (fixed window, exact
# sliding window, token bucket), envoyproxy/ratelimit and a null RLS
# server, side by side under one gRPC load generator (bench/cmd/rlsbench),
# on one throwaway redis-server and one configuration directory
# (bench/rls/ratelimit/config). Extra arguments go to rlsbench (-h lists
# them), e.g.
#   scripts/bench-rls.sh -duration 12s -rounds 4 -outage -perf
# With the defaults it takes about two minutes; -outage adds one, -perf
# needs perf(1). envoyproxy/ratelimit is built with go install into a
# cache directory the first time (minutes) and reused after, as
# scripts/compat.sh does. See BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/.."

envoy_rl_version=v1.4.1-0.20260122083618-3fb702589d36
bindir=${FLOODGATE_ENVOY_RL_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/floodgate/envoy-ratelimit}

if ! command -v redis-server >/dev/null; then
	echo "== installing redis-server" >&2
	if [ "$(id -u)" -ne 0 ]; then sudo=sudo; else sudo=; fi
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server >/dev/null
fi
if [ ! -x "$bindir/service_cmd" ]; then
	echo "== building envoyproxy/ratelimit $envoy_rl_version into $bindir (once; minutes)" >&2
	mkdir -p "$bindir"
	GOBIN=$bindir GOFLAGS=-mod=mod GOWORK=off go install "github.com/envoyproxy/ratelimit/src/service_cmd@$envoy_rl_version"
fi

workdir=$(mktemp -d)
trap 'rm -rf "$workdir"' EXIT
echo "== building floodgate and rlsbench" >&2
go build -o "$workdir/floodgate" ./cmd/floodgate
(cd bench && go build -o "$workdir/rlsbench" ./cmd/rlsbench)
"$workdir/rlsbench" -floodgate "$workdir/floodgate" -envoy "$bindir/service_cmd" -config bench/rls "$@"
