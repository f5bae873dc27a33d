#!/usr/bin/env bash
# Runs vigil's benchmarks (bench/README.md): metastable, goodput, overhead,
# pool, hangdetect, hanglost, or all of them. Extra arguments go to the
# benchmark, e.g.
#   bench/run.sh metastable -arms direct-retry-noabort,vigil -timeline
# They are not part of "go test ./...": each runs for minutes and prints a
# table. overhead and pool need HAProxy (apt-get install haproxy).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"

usage() { echo "usage: bench/run.sh metastable|goodput|overhead|pool|hangdetect|hanglost|all [flags]" >&2; exit 2; }
[ $# -ge 1 ] || usage
what=$1; shift
case "$what" in
  metastable|goodput|overhead|pool|hangdetect|hanglost)
    go build -o "${TMPDIR:-/tmp}/vigil-bench-$what" "./bench/$what"
    exec "${TMPDIR:-/tmp}/vigil-bench-$what" "$@"
    ;;
  all)
    [ $# -eq 0 ] || { echo "bench/run.sh all takes no flags" >&2; exit 2; }
    for b in overhead goodput metastable pool hangdetect hanglost; do
      echo "== $b"
      "$0" "$b"
      echo
    done
    ;;
  *) usage ;;
esac
