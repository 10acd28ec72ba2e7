#!/usr/bin/env bash
# Copies floodgate's in-memory store as it was at a commit (default
# 65b8f30, issue 28's baseline) into bench/internal/base (ignored by git),
# so that the bench module, built with -tags base, runs that commit's
# memstore rows beside today's in one process, in the same alternating
# rounds: one table, both figures (see BENCHMARKS.md). Two copies of one
# module cannot be linked into one binary, so the copy is renamed: the
# commit's memstore package and every package of the module it imports
# (the root package, internal/keyenc, internal/algo), test files left out,
# their import paths moved under bench/internal/base.
#
#   scripts/benchbase.sh [COMMIT]
set -euo pipefail
cd "$(dirname "$0")/.."

ref=${1:-65b8f30}
mod=github.com/floodgate-rl/floodgate
dst=bench/internal/base
git rev-parse --verify -q "$ref^{commit}" >/dev/null || {
	echo "benchbase: no commit $ref in this repository" >&2
	exit 1
}
rm -rf "$dst"
mkdir -p "$dst"

todo=(memstore) done_=()
while [ ${#todo[@]} -gt 0 ]; do
	pkg=${todo[0]} todo=("${todo[@]:1}")
	done_+=("$pkg")
	prefix=${pkg}/
	[ "$pkg" = . ] && prefix=
	# The package's own files: ls-tree lists one directory level.
	files=$(git ls-tree --name-only "$ref" ${prefix:+"$prefix"} | grep -E '\.go$' | grep -v '_test\.go$' || true)
	[ -n "$files" ] || { echo "benchbase: $ref has no Go files in $pkg" >&2; exit 1; }
	mkdir -p "$dst/$pkg"
	for f in $files; do
		git show "$ref:$f" |
			sed -E "s#\"$mod(/[^\"]*)?\"#\"$mod/bench/internal/base\\1\"#g" >"$dst/$f"
		# The module's packages this file imports, still to copy.
		for dep in $(git show "$ref:$f" | grep -oE "\"$mod(/[^\"]*)?\"" | tr -d '"' | sort -u); do
			dep=${dep#"$mod"}
			dep=${dep#/}
			[ -n "$dep" ] || dep=.
			case " ${done_[*]} ${todo[*]} " in *" $dep "*) ;; *) todo+=("$dep") ;; esac
		done
	done
done
printf '%s\n\n%s\n%s\n' "package floodgate" \
	"// BenchBaseCommit is the commit that scripts/benchbase.sh copied this package from." \
	"const BenchBaseCommit = \"$(git rev-parse --short "$ref")\"" >"$dst/benchbase.go"
echo "benchbase: $dst holds ${done_[*]} at $(git rev-parse --short "$ref")" >&2
