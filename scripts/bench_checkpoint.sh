#!/usr/bin/env bash
# Checkpoint benchmark, GPT-2 124M shape (T=256, micro-batch 4) in one
# process: the disk's own sequential write speed (dd with fsync), blocking
# checkpoint write speed (weights + AdamW m and v, ~1.5 GB), and what an
# asynchronous save costs the training loop (its blocking part, and the step
# time while the background write runs, against a run without checkpoints).
#   THREADS=2 DIR=/tmp scripts/bench_checkpoint.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh >/dev/null
threads=${THREADS:-$(nproc)}
tmp=$(mktemp -d "${DIR:-/tmp}/ckbench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
dd_out=$(dd if=/dev/zero of="$tmp/dd.bin" bs=1M count=1024 conv=fsync 2>&1 | tail -1)
rm -f "$tmp/dd.bin"
/usr/bin/python3 - "$tmp/data.bin" <<'PY'
import random, struct, sys
random.seed(0)
n = 400_000
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack(f"<{n}H", *(random.randrange(50257) for _ in range(n))))
PY
sets=(--set "data.train=[\"$tmp/data.bin\"]" --set "data.val=[]" --set model.seq_len=256
      --set training.micro_batch=4 --set training.global_batch=4 --set training.eval_every=0
      --set training.log_every=1 --set optimizer.warmup_steps=0 --set "runtime.threads=$threads"
      --set checkpoint.keep=1)
build/trainer train configs/gpt2_124m.toml "${sets[@]}" --set training.steps=6 --set "run.dir=$tmp/none" >/dev/null
build/trainer train configs/gpt2_124m.toml "${sets[@]}" --set training.steps=6 --set "run.dir=$tmp/sync" \
  --set checkpoint.every=2 >/dev/null
build/trainer train configs/gpt2_124m.toml "${sets[@]}" --set training.steps=8 --set "run.dir=$tmp/async" \
  --set checkpoint.every=4 --set checkpoint.async=true >/dev/null
bytes=$(du -sb "$tmp/sync/checkpoints/step_00000006" | cut -f1)
/usr/bin/python3 - "$dd_out" "$bytes" "$tmp" <<'PY'
import json, re, sys
dd, nbytes, tmp = sys.argv[1], int(sys.argv[2]), sys.argv[3]
m = re.search(r"([\d.,]+) ([kMG]?B)/s", dd)
scale = {"B": 1e-6, "kB": 1e-3, "MB": 1, "GB": 1e3}[m.group(2)]
disk = float(m.group(1).replace(",", ".")) * scale
runs = {k: [json.loads(l) for l in open(f"{tmp}/{k}/metrics.jsonl")] for k in ("none", "sync", "async")}
sync_ms = [r["ckpt_ms"] for r in runs["sync"] if "ckpt_ms" in r]
mbps = nbytes / 1e6 / (sum(sync_ms) / len(sync_ms) / 1e3)
step = lambda rs: sum(r["step_ms"] for r in rs[1:]) / len(rs[1:])
# The save at step 4 blocks for the snapshot only; its write overlaps steps 5-7
# and commits at a later step's poll; the last save of a run must wait for its
# write before the run ends, so it is reported apart.
last = runs["async"][-1]["step"]
async_block = [r["ckpt_ms"] for r in runs["async"] if "ckpt_ms" in r and r["step"] == 4]
commit_ms = [r["ckpt_ms"] for r in runs["async"] if "ckpt_ms" in r and 4 < r["step"] < last]
final_ms = [r["ckpt_ms"] for r in runs["async"] if "ckpt_ms" in r and r["step"] == last]
print(f"checkpoint size            {nbytes / 1e6:8.0f} MB (weights + AdamW m, v)")
print(f"disk (dd, fsync)           {disk:8.0f} MB/s")
print(f"blocking save              {mbps:8.0f} MB/s = {100 * mbps / disk:.0f}% of the disk ({sum(sync_ms) / len(sync_ms):.0f} ms per save)")
during = [r["step_ms"] for r in runs["async"] if 4 < r["step"] < last]
print(f"step, no checkpoints       {step(runs['none']):8.0f} ms")
print(f"step during async write    {sum(during) / len(during):8.0f} ms ({100 * (sum(during) / len(during) / step(runs['none']) - 1):+.0f}%)")
print(f"async save, blocking part  {async_block[0]:8.0f} ms = {100 * async_block[0] / step(runs['none']):.1f}% of a step (host snapshot)")
print(f"async commit (later step)  {sum(commit_ms):8.0f} ms")
print(f"async last save of the run {final_ms[0]:8.0f} ms (waits for its write before the run ends)")
PY
