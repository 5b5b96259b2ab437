#!/usr/bin/env bash
# `make demo`: the whole sparkctl flow on the built-in lab (four nspawn "Sparks" + a Linux switch;
# the GB10 engine is replaced by the rank simulator, and every output says so). The ranks run as
# Docker containers of the image built from the lab's synthetic serving kit, as on the Sparks.
# The site it drives is made as on fresh Sparks, from the nodes' four management addresses and root
# password: `sparkctl bootstrap` (an operator with a key made for this run, passwordless sudo) then
# `sparkctl init` write it under the results directory; the lab's own inventory only reaches the
# nodes for the container checks. No site, no demo: it stops there rather than use inventory/lab.
# Each step's full output is kept under results/demo-<time>/; the lab stays up afterwards
# (`make lab-down` removes it).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

if [ "$(id -u)" != 0 ]; then
  echo "make demo needs root (it creates containers, namespaces and bridges)" >&2
  exit 2
fi

out="results/demo-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
# Written by `lab up` (lab N > 0 of $SPARKCTL_LAB_INSTANCE: inventory/labN): its known_hosts vouches
# for the host keys, its ssh_config logs in as root.
lab_inv=inventory/lab$([ "${SPARKCTL_LAB_INSTANCE:-0}" = 0 ] || echo "$SPARKCTL_LAB_INSTANCE")
site="$out/site"       # written by bootstrap and init; every step after them runs on it
inv=$site
n=0
started=$(date +%s)

# `docker ps` of the sparkctl rank containers on every Spark: expect (yes) one running on each, or (no) none.
containers() {
  local want=$1 node names bad=0
  for node in spark-0 spark-1 spark-2 spark-3; do
    names=$(ssh -F "$lab_inv/ssh_config" "$node" "docker ps --filter name=sparkctl- --format '{{.Names}} {{.Status}}'") || return 1
    printf '%s: %s\n' "$node" "${names:-(no rank container)}"
    if [ "$want" = yes ] && [ -z "$names" ]; then bad=1; fi
    if [ "$want" = no ] && [ -n "$names" ]; then bad=1; fi
  done
  return "$bad"
}

step() {
  local name=$1; shift
  n=$((n + 1))
  local log; log=$(printf '%s/%02d-%s.log' "$out" "$n" "$name")
  printf '\n\033[1m== %d. %s\033[0m  (%s)\n' "$n" "$name" "$*"
  local t0; t0=$(date +%s)
  if "$@" 2>&1 | tee "$log"; then
    printf '\033[32m✓\033[0m %s in %ss — output: %s\n' "$name" "$(( $(date +%s) - t0 ))" "$log"
  else
    local rc=${PIPESTATUS[0]}
    printf '\033[31m⨯\033[0m %s failed (exit %s) — output: %s\n' "$name" "$rc" "$log"
    echo "The lab is still up for inspection: sparkctl -i $inv status, sparkctl -i $inv logs; make lab-down removes it."
    exit "$rc"
  fi
}

# `sparkctl bootstrap` or `sparkctl init` with the arguments sparkctl_lab.dayone gives, the same the
# lab test tests/integration/test_day_one_lab.py runs (the password goes by file name, never by value).
day_one() {
  local what=$1 argv_file="$out/day-one-$1.argv" args rc
  python3 -m sparkctl_lab.dayone --inventory "$lab_inv" --site "$site" --workdir "$out/day-one" "$what" \
    >"$argv_file" || return
  mapfile -d '' -t args <"$argv_file"
  printf '$ sparkctl'; printf ' %q' "${args[@]}"; printf '\n'
  sparkctl "${args[@]}" && return
  rc=$?
  echo "sparkctl $what exited $rc: no site in $site, and the demo runs on no other" >&2
  return "$rc"
}

step lab-up         sparkctl lab up
step bootstrap      day_one bootstrap
step init           day_one init
step validate       sparkctl -i "$inv" validate
step plan           sparkctl -i "$inv" plan --node spark-3
step provision      sparkctl -i "$inv" provision
step provision-again sparkctl -i "$inv" provision
step check-fabric   sparkctl -i "$inv" check fabric
# The serving kit (a git repository `lab up` wrote) fetched on the controller and fanned out, then
# the engine image built from its Dockerfile on the head and fanned out; `stage all` repeats both
# (moving nothing) before the weights.
step stage-kit      sparkctl -i "$inv" stage kit
step stage-image    sparkctl -i "$inv" stage image
ckpt=$(python3 -c 'import yaml,sys; print(yaml.safe_load(open(sys.argv[1]))["sparkctl_checkpoint"]["path"])' \
  "$inv/group_vars/all/sparkctl.yml")
step checkpoint     python3 tests/fixtures/synth_checkpoint.py "$ckpt" --filler-shards 4 --filler-mib 64 --engram-rows 65536
step stage          sparkctl -i "$inv" stage all
step stage-again    sparkctl -i "$inv" stage all
step up             sparkctl -i "$inv" up --yes
step status         sparkctl -i "$inv" status
step containers     containers yes
# A real Prometheus (Debian's package) on a loopback port, scraping every node's exporter and rank 0's
# /metrics with the generated configuration while qualify and bench run; stopped before `down`.
step monitoring-config sparkctl -i "$inv" monitoring config --interval 5 -o "$out/prometheus.yml"
prom_port=19090
prometheus --config.file="$out/prometheus.yml" --storage.tsdb.path="$out/prometheus-data" \
  --web.listen-address="127.0.0.1:$prom_port" >"$out/prometheus.log" 2>&1 &
prom_pid=$!
trap 'kill "$prom_pid" 2>/dev/null' EXIT
step qualify        sparkctl -i "$inv" qualify --suite full --results "$out/qualify"
step bench          sparkctl -i "$inv" bench --quick --concurrency 1,4,8 --plot "$out/ladder.png" --results "$out/bench"
step prometheus     python3 scripts/prometheus_check.py "http://127.0.0.1:$prom_port" --targets 5
kill "$prom_pid" 2>/dev/null; wait "$prom_pid" 2>/dev/null
step down           sparkctl -i "$inv" down
step no-containers  containers no

printf '\n\033[1mdemo done in %ss.\033[0m Outputs: %s (bench plot: %s/ladder.png)\n' "$(( $(date +%s) - started ))" "$out" "$out"
echo "The lab is still up: ssh -F $lab_inv/ssh_config spark-0 · sparkctl -i $inv status · make lab-down"
