#!/usr/bin/env bash
# footprint: vigil's idle cost (docs/design.md section 10: under 40 MB RSS and 1%
# of a core). Starts vllm-sim and `vigil run` with the default interval on
# loopback, lets them settle, then reads vigil's RSS and CPU time over a
# window from /proc. Usage: bench/footprint.sh [window_seconds]
set -euo pipefail
cd "$(dirname "$0")/.."
window=${1:-60}
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/vigil" ./cmd/vigil
go build -o "$tmp/vllm-sim" ./cmd/vllm-sim
"$tmp/vllm-sim" -listen 127.0.0.1:18300 -control 127.0.0.1:18301 >"$tmp/sim.log" 2>&1 &
cat >"$tmp/vigil.yaml" <<YAML
engine:
  url: http://127.0.0.1:18300
watchdog:
  state_file: $tmp/state.json
admission:
  listen: 127.0.0.1:18302
status:
  listen: 127.0.0.1:18303
YAML
"$tmp/vigil" run --config "$tmp/vigil.yaml" >"$tmp/vigil.log" 2>&1 &
pid=$!
sleep 5
hz=$(getconf CLK_TCK)
t0=$(awk '{print $14+$15}' /proc/$pid/stat)
sleep "$window"
t1=$(awk '{print $14+$15}' /proc/$pid/stat)
rss=$(awk '/VmRSS/{print $2}' /proc/$pid/status)
awk -v rss="$rss" -v dt="$((t1 - t0))" -v hz="$hz" -v w="$window" 'BEGIN {
  printf "vigil idle over %ds (interval 15s, limiter on): RSS %.1f MB (target < 40 MB, %.2fx of it), CPU %.3f%% of a core (target < 1%%, %.2fx of it)\n",
    w, rss/1024, rss/1024/40, 100*dt/hz/w, (100*dt/hz/w)/1 }'
