#!/usr/bin/env bash
# The installed tool, outside any clone: build the wheel from a clean copy of the working tree
# (the pinned Ansible collections vendored from this tree's collections/, where `make` installs
# them), install it into a fresh venv under a temp dir (with constraints.txt, as CI tests it) that
# exposes only the `sparkctl` command on PATH (as pipx does), and run it from another temp dir with
# its own state directory:
#   sparkctl --version / --help; the content and the collections come from the package (nothing
#   downloaded); `init --example DIR` then `validate -i DIR` (the exit code a copy of the example
#   gives) and plan --json; `status --format prometheus` against unreachable nodes (exit 1, the
#   metrics printed); `ansible-command provision` prints a line whose playbook is in the venv and
#   which `ansible-playbook --syntax-check` accepts;
#   and, with --lab DIR (a running lab's inventory), `sparkctl -i DIR provision --check`, whose run
#   record keeps that line.
# Each step's time is printed; on failure the temp dir is kept for inspection.
#
# Usage: scripts/wheel_check.sh [--lab INVENTORY_DIR] [--keep]
# Used by `make wheel-check` and by tests/integration/test_wheel_install.py (on the lab).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PY=${PY:-python3}
lab=""
keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --lab) lab=$(cd "$2" && pwd); shift 2 ;;
    --keep) keep=1; shift ;;
    *) echo "usage: $0 [--lab INVENTORY_DIR] [--keep]" >&2; exit 2 ;;
  esac
done

export PIP_DISABLE_PIP_VERSION_CHECK=1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sparkctl-wheel-check.XXXXXX")
ok=0
finish() {
  if [ "$ok" = 1 ] && [ "$keep" = 0 ]; then rm -rf "$tmp"; else echo "wheel check: files kept in $tmp" >&2; fi
}
trap finish EXIT

usec() { echo "${EPOCHREALTIME/./}"; }
secs() { local d=$(( $(usec) - $1 )); printf '%d.%01d' $(( d / 1000000 )) $(( d % 1000000 / 100000 )); }
started=$(usec)
step_t0=$started
step() {  # step NAME: close the previous step's timer, print the next one's name
  printf '   (%ss)\n' "$(secs "$step_t0")"
  step_t0=$(usec)
  printf '== %s\n' "$1"
}
printf '== copy the working tree\n'

# A clean copy: tracked and untracked-but-not-ignored files only (no build/, no .venv, no caches).
mkdir -p "$tmp/src"
git -C "$REPO" ls-files -z --cached --others --exclude-standard \
  | tar -C "$REPO" --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -C "$tmp/src" -xf -

step "fresh venv"
"$PY" -m venv "$tmp/venv"

step "build the wheel"
# The clean copy has no installed collections (git-ignored): setup.py takes them from this tree's.
SPARKCTL_COLLECTIONS_PATH="$REPO/collections" "$tmp/venv/bin/pip" wheel -q --no-deps -w "$tmp/dist" "$tmp/src"
wheel=$(ls "$tmp"/dist/*.whl)
printf '   %s, %s KiB\n' "$(basename "$wheel")" "$(( $(stat -c %s "$wheel") / 1024 ))"

step "install the wheel (constraints.txt)"
# --no-compile: pip's byte-compiling of every installed module (ansible-core's thousands among them)
# was two thirds of the install (23 s against 8 s); the few modules the checks import compile as
# they are first imported.
"$tmp/venv/bin/pip" install -q --no-compile -c "$REPO/constraints.txt" "$wheel"

step "sparkctl --version, --help"
mkdir -p "$tmp/work" "$tmp/state" "$tmp/bin"
cd "$tmp/work"
export SPARKCTL_STATE_DIR="$tmp/state"
unset SPARKCTL_INVENTORY SPARKCTL_RUNS_DIR ANSIBLE_CONFIG ANSIBLE_COLLECTIONS_PATH PYTHONPATH VIRTUAL_ENV
# As pipx: the venv's own commands (ansible-playbook among them) are not on PATH, only sparkctl.
ln -s "$tmp/venv/bin/sparkctl" "$tmp/bin/sparkctl"
export PATH="$tmp/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
sparkctl=$tmp/bin/sparkctl
"$sparkctl" --version
"$sparkctl" --help >"$tmp/help.txt"
grep -q provision "$tmp/help.txt" || { echo "sparkctl --help lists no provision command" >&2; exit 1; }
# The Ansible content comes from the installed package, not from a checkout.
root=$("$tmp/venv/bin/python" -c 'from sparkctl.ansible import content; print(content.root())')
case "$root" in
  "$tmp/venv/"*) ;;
  *) echo "the installed sparkctl uses Ansible content outside its venv: $root" >&2; exit 1 ;;
esac
for f in ansible.cfg playbooks/provision.yml plugins/vars/sparkctl_rendered.py collections/requirements.yml \
         inventory/example/hosts.yml inventory/example/group_vars/all/sparkctl.yml; do
  [ -f "$root/$f" ] || { echo "the wheel lacks $f" >&2; exit 1; }
done
# The pinned collections are in the package: nothing to download on first use.
missing=$("$tmp/venv/bin/python" -c 'from sparkctl.ansible import content; print(content.missing_collections() or "")')
[ -z "$missing" ] || { echo "the wheel lacks the pinned collections: $missing" >&2; exit 1; }
# Role module_utils are symlinks in the repository: the wheel must carry real files.
if find "$root" -type l | grep -q .; then
  echo "the wheel carries symlinks: $(find "$root" -type l | head -3)" >&2; exit 1
fi

step "sparkctl init --example site, then validate -i site"
"$sparkctl" init --example site >"$tmp/init.txt" || { cat "$tmp/init.txt"; exit 1; }
[ -f site/hosts.yml ] || { echo "init --example wrote no site/hosts.yml" >&2; cat "$tmp/init.txt"; exit 1; }
# The exit code the example itself gives, from the same installed tool: init --example writes it.
cp -r "$REPO/inventory/example" "$tmp/example-copy"
set +e
"$sparkctl" validate -i "$tmp/example-copy" >"$tmp/validate-example.txt" 2>&1; want=$?
"$sparkctl" validate -i site >"$tmp/validate.txt" 2>&1; got=$?
set -e
if [ "$got" != "$want" ]; then
  echo "validate -i site exited $got, the example itself $want" >&2; cat "$tmp/validate.txt" >&2; exit 1
fi
if [ "$got" = 0 ]; then
  grep -q "is valid" "$tmp/validate.txt" || { cat "$tmp/validate.txt"; exit 1; }
fi
printf '   validate: exit %s, as the example\n' "$got"

step "sparkctl plan --json -i site"
"$sparkctl" plan --json -i site >"$tmp/plan.json"
"$tmp/venv/bin/python" - "$tmp/plan.json" <<'EOF'
import json, sys
plan = json.load(open(sys.argv[1]))
nodes = plan["nodes"]
assert len(nodes) == 4 and all(n["rank_launch"]["argv"] for n in nodes), "plan --json: nodes without a rank argv"
print(f"   {plan['cluster']}: {len(nodes)} nodes, profile {plan['profile']}")
EOF

step "sparkctl status --format prometheus -i <nodes that refuse SSH>"
# The example with every node on a loopback address whose port 9 refuses: unreachable at once.
cp -r "$REPO/inventory/example" "$tmp/unreachable"
sed -i -E 's/^( *)ansible_host: 192\.168\.7\.1([0-9])$/\1ansible_host: 127.0.0.1\2\n\1ansible_port: 9/' \
  "$tmp/unreachable/hosts.yml"
set +e
"$sparkctl" status --format prometheus -i "$tmp/unreachable" >"$tmp/status.prom" 2>"$tmp/status.err"; rc=$?
set -e
if grep -q "No module named" "$tmp/status.prom" "$tmp/status.err"; then
  grep "No module named" "$tmp/status.err" >&2; exit 1
fi
# README: the file is written whatever the verdict; the exit code says not ready (1: a node did not answer).
if [ "$rc" != 1 ]; then
  echo "status --format prometheus exited $rc, expected 1 (nodes unreachable)" >&2; cat "$tmp/status.err" >&2; exit 1
fi
grep -q '^sparkctl_status_node_reachable{.*} 0' "$tmp/status.prom" \
  || { echo "no sparkctl_status_node_reachable 0 in the metrics" >&2; head -20 "$tmp/status.prom" >&2; exit 1; }

step "sparkctl ansible-command provision -i site, ansible-playbook --syntax-check of it"
line=$("$sparkctl" ansible-command provision -i site)
printf '   %s\n' "$line"
"$tmp/venv/bin/python" - "$line" "$tmp/venv" <<'PY'
import shlex, sys
from pathlib import Path
words, venv = shlex.split(sys.argv[1]), Path(sys.argv[2]).resolve()
argv = [w for w in words if "=" not in w.split("/")[0]]
playbook = Path(argv[argv.index("-i") + 2])
assert playbook.is_file(), f"the line's playbook does not exist: {playbook}"
assert playbook.resolve().is_relative_to(venv), f"the line's playbook is not the installed one: {playbook}"
assert Path(argv[0]).resolve().is_relative_to(venv), f"the line runs another ansible-playbook: {argv[0]}"
PY
bash -c "$line --syntax-check" >"$tmp/syntax.txt" 2>&1 || { cat "$tmp/syntax.txt" >&2; exit 1; }
[ ! -e "$tmp/state/collections" ] || { echo "collections were installed into the state directory" >&2; exit 1; }

if [ -n "$lab" ]; then
  step "sparkctl -i $lab provision --check"
  "$sparkctl" -i "$lab" provision --check
  runs=$(find "$tmp/state/runs" -mindepth 1 -maxdepth 1 -type d -name '*-provision' | wc -l)
  [ "$runs" -ge 1 ] || { echo "no run record under $tmp/state/runs" >&2; exit 1; }
  record=$(find "$tmp/state/runs" -mindepth 2 -maxdepth 2 -name command -path '*-provision/*' | head -1)
  grep -q "$tmp/venv/.*/playbooks/provision.yml" "$record" \
    || { echo "the run record's command is not the installed playbook: $(cat "$record")" >&2; exit 1; }
  [ ! -e "$tmp/state/collections" ] || { echo "the run installed collections into the state directory" >&2; exit 1; }
fi

printf '   (%ss)\n' "$(secs "$step_t0")"
printf 'wheel check passed in %ss\n' "$(secs "$started")"
ok=1
