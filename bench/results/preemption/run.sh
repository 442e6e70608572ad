#!/bin/bash
# SIGTERM and a main thread asleep in a lock wait, with both cores kept busy (two shell loops).
# usage: bash bench/results/preemption/run.sh  (from the repository root; writes run.txt beside this file)
# Cases: plain Python (idle, then loaded); the client before the fix (f50b9aa, in a temporary worktree) and
# after it (this checkout), both loaded.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(pwd)
py=$root/.venv/bin/python
old=$(mktemp -d)/old
git worktree add -q --detach "$old" f50b9aa
{
  echo "# commit $(git rev-parse --short HEAD); $(date -u +%FT%TZ); uptime:$(uptime)"
  echo "\$ python signal_thread.py 30 3   # idle"
  $py "$here/signal_thread.py" 30 3
  for i in 1 2; do timeout 1200 bash -c 'while :; do :; done' & done
  echo "\$ python signal_thread.py 30 3   # two busy loops"
  $py "$here/signal_thread.py" 30 3
  echo "\$ (cd f50b9aa-worktree && python client_preempted.py 10)   # before the fix, two busy loops"
  (cd "$old" && $py "$here/client_preempted.py" 10)
  echo "\$ python client_preempted.py 30   # this checkout, two busy loops"
  $py "$here/client_preempted.py" 30
  pkill -f "while :; do :; done"
  echo "# $(date -u +%FT%TZ); uptime:$(uptime)"
} 2>&1 | tee "$here/run.txt"
git worktree remove --force "$old"
