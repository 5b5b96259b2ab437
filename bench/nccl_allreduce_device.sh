#!/usr/bin/env bash
# Validates sparkctl/qa/nccl_allreduce.py on a host with two or more CUDA GPUs and records the
# results under $OUT (default ./nccl-out): spawned ranks (--local-procs), two separately started
# ranks with the flags `sparkctl check fabric` passes, and a rendezvous that must time out.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-./nccl-out}
mkdir -p "$OUT"
PY=${PY:-python3}
S=sparkctl/qa/nccl_allreduce.py
{
  nvidia-smi -L; nvidia-smi topo -m
  $PY -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.device_count(), torch.cuda.nccl.version())'
} >"$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
$PY -c 'import torch' 2>/dev/null || { echo "no torch for $PY"; exit 3; }

step() { local name=$1; shift; local t0=$SECONDS; "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"; local rc=$?
  echo "== $name: rc=$rc, $((SECONDS - t0)) s"; tail -n 1 "$OUT/$name.out" | cut -c1-400; }

step local2_bf16_table $PY $S --local-procs 2 --sizes 1M,16M,256M,1G --table --output "$OUT/local2_bf16.json"
cat "$OUT/local2_bf16_table.out"
step local2_fp32_sweep $PY $S --local-procs 2 --dtype fp32 --sizes 64K,1M,4M,16M,64M,256M,1G,4G --iters 20 --json
NCCL_DEBUG=INFO step local2_nccl_debug $PY $S --local-procs 2 --sizes 256M --iters 5 --json
grep -E "NCCL INFO (Channel 00|comm 0x|NCCL version|.*via P2P)" "$OUT/local2_nccl_debug.out" | head -8

# Two ranks started on their own, with the aliases the check_fabric role uses.
PORT=29659
$PY $S --rank 1 --world 2 --addr 127.0.0.1 --port $PORT --local-rank 1 >"$OUT/rank1.out" 2>"$OUT/rank1.err" &
r1=$!
step rank0 $PY $S --rank 0 --world 2 --addr 127.0.0.1 --port $PORT --local-rank 0
wait $r1; echo "rank 1 rc=$?, stdout bytes: $(wc -c <"$OUT/rank1.out")"

# Rank 1 never comes: rank 0 must fail within the timeout with an error document and exit 1.
step lonely $PY $S --rank 0 --world-size 2 --master-addr 127.0.0.1 --master-port 29660 --timeout-s 15 --json
cat "$OUT/lonely.err" | tail -n 2
