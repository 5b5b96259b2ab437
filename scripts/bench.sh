#!/usr/bin/env bash
# `make bench`: every benchmark under bench/, each printing ratios against a baseline measured in
# the same run. The lab benchmarks bring the lab up themselves when needed (root). Results land in
# results/bench-<time>/<name>.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
out="results/bench-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
rc=0
run() {
  local name=$1; shift
  printf '\n\033[1m== %s\033[0m  (%s)\n' "$name" "$*"
  if ! "$@" 2>&1 | tee "$out/$name.txt"; then
    echo "⨯ $name failed"; rc=1
  fi
}
run stage-local  python bench/stage_bench.py
run startup      python bench/startup_bench.py -n 15
run lab-zipcache python bench/lab_zipcache.py -n 7
run client-overhead python bench/client_overhead.py -n 5
if [ "$(id -u)" = 0 ]; then
  run lab-updown   python bench/lab_updown.py --runs 2
  sparkctl lab up >/dev/null
  run provision    python bench/provision_bench.py --keep-lab
  run code-cache   python bench/mitogen_code_cache.py -n 5
  run stage-lab    python bench/stage_bench.py --lab
  run status       python bench/status_bench.py -i inventory/lab -n 5
  run up-overhead  python bench/up_overhead.py -i inventory/lab -n 3
  run down-stop    python bench/down_stop.py -n 5
else
  echo "(not root: the lab benchmarks are skipped)"
fi
echo; echo "results: $out"
exit $rc
