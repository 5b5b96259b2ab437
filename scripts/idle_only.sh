#!/usr/bin/env bash
# Run a command on what the rest of the machine leaves idle: `make test` runs lint and the unit/CLI
# tests this way beside the lab tests.
#
# `nice -n 19` alone is not enough where the kernel groups tasks by session (autogroup, on by
# default on most distributions: /proc/sys/kernel/sched_autogroup_enabled): a nice value then only
# ranks a task within its own session, and the session as a whole competes at equal weight with
# every other one (each lab node, each ansible-playbook run under a pty is its own session). So the
# command gets a session of its own (setsid) whose autogroup is niced to 19 as well.
set -euo pipefail
if [ "${1:-}" = --in-session ]; then
  shift
  echo 19 > /proc/self/autogroup 2>/dev/null || true
  exec nice -n 19 "$@"
fi
if [ -e /proc/self/autogroup ] && command -v setsid >/dev/null; then
  exec setsid --wait bash "$0" --in-session "$@"
fi
exec nice -n 19 "$@"
