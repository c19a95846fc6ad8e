#!/usr/bin/env bash
# The from-primitives experiment (experiments/from_scratch.py), resumable across sessions and
# machines. Its runs use the code of one commit (PINNED), so that later changes to the package do
# not move under them: this script makes a git worktree of that commit beside the checkout (with a
# venv of its own), restores the kept run folders (results/kept/runs+from_scratch.tar.gz, written by
# `keep_runs.py save` before a session ends) and the reference training's finished runs, and
# continues the searches, then the reference training, then the summary. Run it in the background:
#
#     nohup bash experiments/from_scratch_queue.sh > /tmp/from_scratch_queue.log 2>&1 &
#
# Before a session ends, keep what was done (then commit results/kept/ and results/from_scratch/):
#
#     bash experiments/from_scratch_queue.sh --keep
set -euo pipefail
PINNED=3a82d9c
MAIN="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"  # not ROOT: scripts/env.sh sets that
WT="${EVONORM_PINNED_WORKTREE:-$MAIN/../evonorm-from-scratch}"
ARCHIVE=runs+from_scratch.tar.gz
if [ ! -d "$WT" ]; then
    git -C "$MAIN" worktree add --detach "$WT" "$PINNED"
fi
cd "$WT"
[ "$(git rev-parse --short=7 HEAD)" = "$PINNED" ] || { echo "$WT is not at $PINNED" >&2; exit 2; }
EVONORM_EXTRAS="dev,plots,prescreen" source scripts/env.sh
copy_results() {  # the summary, the runs' table and the reference training, not the protocol README
    mkdir -p "$MAIN/results/from_scratch"
    for f in summary.json runs.json runs.md reference; do
        [ -e "results/from_scratch/$f" ] && cp -r "results/from_scratch/$f" "$MAIN/results/from_scratch/"
    done
    return 0
}
if [ "${1:-}" = "--keep" ]; then
    python experiments/keep_runs.py save runs/from_scratch
    cp results/kept/$ARCHIVE "$MAIN/results/kept/$ARCHIVE"
    copy_results
    exit 0
fi
if [ -f "$MAIN/results/kept/$ARCHIVE" ] && [ ! -d runs/from_scratch ]; then
    cp "$MAIN/results/kept/$ARCHIVE" results/kept/
    python experiments/keep_runs.py restore
fi
# the reference training's finished runs (its checkpoints are not kept): a fresh worktree lacks them
if [ -d "$MAIN/results/from_scratch/reference" ] && [ ! -d results/from_scratch/reference ]; then
    cp -r "$MAIN/results/from_scratch/reference" results/from_scratch/
fi
ensure_fashion_mnist
mkdir -p runs
nice -n 10 python experiments/from_scratch.py
python experiments/keep_runs.py save runs/from_scratch
cp results/kept/$ARCHIVE "$MAIN/results/kept/$ARCHIVE"
copy_results
