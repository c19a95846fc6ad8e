#!/usr/bin/env bash
# Exploratory, beside the from-primitives protocol (results/from_scratch/README.md, last section):
# random search's two best layers trained at the reference setting, seeds 10-13, with the pinned
# code of the reference training, so that its gn_relu and evonorm_s0 runs are the comparison.
# Needs the worktree experiments/from_scratch_queue.sh makes; resumes from its checkpoints; copies
# the finished runs (and restores them into a fresh worktree) like the queue does.
#
#     nohup bash experiments/from_scratch_random_reference.sh > /tmp/random_reference.log 2>&1 &
set -euo pipefail
MAIN="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WT="${EVONORM_PINNED_WORKTREE:-$MAIN/../evonorm-from-scratch}"
OUT=results/from_scratch/reference_random
cd "$WT"
EVONORM_EXTRAS="dev,plots,prescreen" source scripts/env.sh
ensure_fashion_mnist
if [ -d "$MAIN/$OUT" ] && [ ! -d "$OUT" ]; then
    mkdir -p "$(dirname "$OUT")" && cp -r "$MAIN/$OUT" "$OUT"
fi
R1='{"nodes":[["group_std",0],["group_std",2],["instance_rms",3],["square",2],["div",0,4],["layer_rms",0],["layer_mean",2],["exp",5],["layer_mean",11],["neg",8]]}'
R2='{"nodes":[["tanh",1],["group_std",0],["add",1,0],["tanh",2],["neg",0],["group_rms",6],["layer_rms",8],["neg",3],["group_mean",9],["div",8,10]]}'
nice -n 10 python experiments/fidelity_panel.py --out "$OUT" --workers 2 --seeds 10 11 12 13 \
    --layer "random_1=$R1" --layer "random_2=$R2"
mkdir -p "$MAIN/$OUT"
cp "$OUT"/runs.jsonl "$OUT"/panel.json "$OUT"/panel.md "$MAIN/$OUT/"
