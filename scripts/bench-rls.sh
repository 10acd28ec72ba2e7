#!/usr/bin/env bash
# The RLS benchmark of issues 16 and 28: floodgate's service (fixed
# window, exact sliding window, token bucket), the same service built
# from a base commit (its fixed and sliding windows: issue 28's "today"),
# envoyproxy/ratelimit and a null RLS server, side by side under one gRPC
# load generator (bench/cmd/rlsbench), in interleaved rounds, on one
# throwaway redis-server and one configuration directory
# (bench/rls/ratelimit/config). Extra arguments go to rlsbench (-h lists
# them), e.g.
#   scripts/bench-rls.sh -duration 12s -rounds 4 -outage -perf
#   BASE=none scripts/bench-rls.sh       # without the base rows
#   BASE=HEAD~3 scripts/bench-rls.sh     # another base commit
# With the defaults it takes about three minutes; -outage adds one, -perf
# needs perf(1). envoyproxy/ratelimit is built with go install into a
# cache directory the first time (minutes) and reused after, as
# scripts/compat.sh does; the base's cmd/floodgate is built from a
# git archive of the commit, into the same cache. See BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/.."

envoy_rl_version=v1.4.1-0.20260122083618-3fb702589d36
bindir=${FLOODGATE_ENVOY_RL_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/floodgate/envoy-ratelimit}
# The base of issue 28: main when the issue started.
base=${BASE:-65b8f30}

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
baseargs=()
if [ "$base" != none ] && ! git rev-parse -q --verify "$base^{commit}" >/dev/null; then
	echo "== base commit $base not in this repository: no base rows (BASE=none to silence)" >&2
	base=none
fi
if [ "$base" != none ]; then
	sha=$(git rev-parse --short=7 "$base^{commit}")
	basebin=${XDG_CACHE_HOME:-$HOME/.cache}/floodgate/base-$sha/floodgate
	if [ ! -x "$basebin" ]; then
		echo "== building cmd/floodgate of $sha into $basebin (once)" >&2
		src=$workdir/base-src
		mkdir -p "$src" "$(dirname "$basebin")"
		git archive "$sha" | tar -x -C "$src"
		(cd "$src" && GOWORK=off go build -o "$basebin" ./cmd/floodgate)
	fi
	baseargs=(-base "$basebin" -base-name "$sha")
fi
"$workdir/rlsbench" -floodgate "$workdir/floodgate" -envoy "$bindir/service_cmd" -config bench/rls "${baseargs[@]}" "$@"
