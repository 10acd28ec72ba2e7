#!/usr/bin/env bash
# Runs floodgate and its peers side by side (the bench/ module) against a
# throwaway redis-server on a free loopback port, and prints one table
# (decisions/s, p50, p99, allocations, CPU and Redis time per decision,
# each with its ratio to floodgate) and the Redis memory table. Extra
# arguments go to the bench command (go run . -h lists them), e.g.
#   scripts/bench.sh -duration 5s -goroutines 64
# It takes about five minutes with the defaults. See BENCHMARKS.md. It
# builds the bench with -tags gubernator (the gubernator v2 row of the
# escrow table), whose dependencies the test command's short run leaves out.
#
# BASE=<commit> (default 65b8f30, the baseline of issue 28; BASE= turns it
# off) adds a row "floodgate @<commit>": that commit's library, extracted
# with git archive under another module path and built into the same
# binary (bench/base.go), so that the two versions take turns in the same
# rounds against the same redis-server.
#
# With RLS=1 it runs scripts/bench-rls.sh after (the service against
# envoyproxy/ratelimit, issue 16), and with RLS=only that alone; the
# arguments then go to rlsbench.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${RLS:-}" = only ]; then
	exec scripts/bench-rls.sh "$@"
fi

base=${BASE-65b8f30}
(
	. scripts/redis.sh
	cd bench
	if [ -z "$base" ]; then
		# Not exec: the subshell must outlive go run for redis.sh's EXIT
		# trap to stop the server and remove $workdir.
		go run -tags gubernator . -redis "$FLOODGATE_REDIS_ADDR" "$@"
		exit
	fi
	# The base commit's root module under the path .../floodgatebase (its
	# nested modules removed), and a copy of bench/go.mod that requires and
	# replaces it; redis.sh removes $workdir on exit.
	rev=$(git rev-parse --short "$base^{commit}")
	src=$workdir/floodgatebase
	mkdir "$src"
	git -C .. archive "$rev" | tar -x -C "$src"
	find "$src" -mindepth 2 -name go.mod -printf '%h\n' | xargs rm -rf
	rm -f "$src/go.work" "$src/go.work.sum"
	find "$src" \( -name '*.go' -o -name go.mod \) -print0 |
		xargs -0 sed -i -E 's#github\.com/floodgate-rl/floodgate([/"[:space:]]|$)#github.com/floodgate-rl/floodgatebase\1#g'
	cp go.mod "$workdir/bench.mod"
	cp go.sum "$workdir/bench.sum"
	printf 'require github.com/floodgate-rl/floodgatebase v0.0.0\nreplace github.com/floodgate-rl/floodgatebase => %s\n' "$src" >>"$workdir/bench.mod"
	GOWORK=off GOFLAGS=-mod=mod go run -modfile="$workdir/bench.mod" -tags fgbase,gubernator -ldflags "-X main.baseRev=$rev" . -redis "$FLOODGATE_REDIS_ADDR" "$@"
)
if [ -n "${RLS:-}" ]; then
	scripts/bench-rls.sh
fi
