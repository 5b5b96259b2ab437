#!/usr/bin/env bash
# The installed tool, outside any clone: build the wheel from a clean copy of the working tree,
# install it into a fresh venv under a temp dir (with constraints.txt, as CI tests it), and run it
# from another temp dir with its own state directory:
#   sparkctl --version / --help, validate and plan --json on a copy of inventory/example,
#   and, with --lab DIR (a running lab's inventory), `sparkctl -i DIR provision --check`.
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
"$tmp/venv/bin/pip" wheel -q --no-deps -w "$tmp/dist" "$tmp/src"
wheel=$(ls "$tmp"/dist/*.whl)
printf '   %s, %s KiB\n' "$(basename "$wheel")" "$(( $(stat -c %s "$wheel") / 1024 ))"

step "install the wheel (constraints.txt)"
"$tmp/venv/bin/pip" install -q -c "$REPO/constraints.txt" "$wheel"

step "sparkctl --version, --help"
mkdir -p "$tmp/work" "$tmp/state"
cd "$tmp/work"
export SPARKCTL_STATE_DIR="$tmp/state"
unset SPARKCTL_INVENTORY SPARKCTL_RUNS_DIR
sparkctl=$tmp/venv/bin/sparkctl
"$sparkctl" --version
"$sparkctl" --help >"$tmp/help.txt"
grep -q provision "$tmp/help.txt" || { echo "sparkctl --help lists no provision command" >&2; exit 1; }
# The Ansible content comes from the installed package, not from a checkout.
root=$("$tmp/venv/bin/python" -c 'from sparkctl.ansible import content; print(content.root())')
case "$root" in
  "$tmp/venv/"*) ;;
  *) echo "the installed sparkctl uses Ansible content outside its venv: $root" >&2; exit 1 ;;
esac
for f in ansible.cfg playbooks/provision.yml plugins/vars/sparkctl_rendered.py collections/requirements.yml; do
  [ -f "$root/$f" ] || { echo "the wheel lacks $f" >&2; exit 1; }
done
# Role module_utils are symlinks in the repository: the wheel must carry real files.
if find "$root" -type l | grep -q .; then
  echo "the wheel carries symlinks: $(find "$root" -type l | head -3)" >&2; exit 1
fi

step "sparkctl validate -i <copy of inventory/example>"
cp -r "$REPO/inventory/example" "$tmp/work/site"
"$sparkctl" validate -i site >"$tmp/validate.txt"
grep -q "is valid" "$tmp/validate.txt" || { cat "$tmp/validate.txt"; exit 1; }

step "sparkctl plan --json -i <copy>"
"$sparkctl" plan --json -i site >"$tmp/plan.json"
"$tmp/venv/bin/python" - "$tmp/plan.json" <<'EOF'
import json, sys
plan = json.load(open(sys.argv[1]))
nodes = plan["nodes"]
assert len(nodes) == 4 and all(n["rank_launch"]["argv"] for n in nodes), "plan --json: nodes without a rank argv"
print(f"   {plan['cluster']}: {len(nodes)} nodes, profile {plan['profile']}")
EOF

if [ -n "$lab" ]; then
  step "sparkctl -i $lab provision --check"
  "$sparkctl" -i "$lab" provision --check
  runs=$(find "$tmp/state/runs" -mindepth 1 -maxdepth 1 -type d -name '*-provision' | wc -l)
  [ "$runs" -ge 1 ] || { echo "no run record under $tmp/state/runs" >&2; exit 1; }
fi

printf '   (%ss)\n' "$(secs "$step_t0")"
printf 'wheel check passed in %ss\n' "$(secs "$started")"
ok=1
