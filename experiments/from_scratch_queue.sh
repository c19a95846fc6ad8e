#!/usr/bin/env bash
# A from-primitives experiment (experiments/from_scratch.py; EXPERIMENT=from_scratch, the default,
# or from_scratch_2), resumable across sessions and machines. Its runs use the code of one commit
# (PINNED, per experiment), so that later changes to the package do not move under them: this
# script makes a git worktree of that commit beside the checkout (with a venv of its own), restores
# the kept run folders (results/kept/runs+<experiment>.tar.gz, written by `keep_runs.py save`
# before a session ends) and the reference training's finished runs, and continues the searches,
# then the reference training, then the summary. Run it in the background:
#
#     EXPERIMENT=from_scratch_2 nohup bash experiments/from_scratch_queue.sh > /tmp/from_scratch_2.log 2>&1 &
#
# Before a session ends, keep what was done (then commit results/kept/ and results/<experiment>/):
#
#     EXPERIMENT=from_scratch_2 bash experiments/from_scratch_queue.sh --keep
set -euo pipefail
NAME="${EXPERIMENT:-from_scratch}"
case "$NAME" in
    from_scratch) PINNED=3a82d9c; ARGS=(); WT_NAME=evonorm-from-scratch ;;
    from_scratch_2) PINNED=855b7d9; ARGS=(--experiment from_scratch_2); WT_NAME=evonorm-from-scratch-2 ;;
    *) echo "from_scratch_queue.sh: unknown EXPERIMENT '$NAME' (from_scratch or from_scratch_2)" >&2; exit 2 ;;
esac
MAIN="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"  # not ROOT: scripts/env.sh sets that
WT="${EVONORM_PINNED_WORKTREE:-$MAIN/../$WT_NAME}"
ARCHIVE=runs+$NAME.tar.gz
if [ ! -d "$WT" ]; then
    git -C "$MAIN" worktree add --detach "$WT" "$PINNED"
fi
cd "$WT"
[ "$(git rev-parse --short=7 HEAD)" = "$PINNED" ] || { echo "$WT is not at $PINNED" >&2; exit 2; }
EVONORM_EXTRAS="dev,plots,prescreen" source scripts/env.sh
copy_results() {  # the summary, the runs' table and the reference training, not the protocol README
    mkdir -p "$MAIN/results/$NAME"
    for f in summary.json runs.json runs.md reference; do
        [ -e "results/$NAME/$f" ] && cp -r "results/$NAME/$f" "$MAIN/results/$NAME/"
    done
    return 0
}
if [ "${1:-}" = "--keep" ]; then
    python experiments/keep_runs.py save runs/$NAME
    cp results/kept/$ARCHIVE "$MAIN/results/kept/$ARCHIVE"
    copy_results
    exit 0
fi
if [ -f "$MAIN/results/kept/$ARCHIVE" ] && [ ! -d runs/$NAME ]; then
    cp "$MAIN/results/kept/$ARCHIVE" results/kept/
    python experiments/keep_runs.py restore
fi
# the reference training's finished runs (its checkpoints are not kept): a fresh worktree lacks them
if [ -d "$MAIN/results/$NAME/reference" ] && [ ! -d results/$NAME/reference ]; then
    cp -r "$MAIN/results/$NAME/reference" results/$NAME/
fi
ensure_fashion_mnist
mkdir -p runs
nice -n 10 python experiments/from_scratch.py "${ARGS[@]}"
python experiments/keep_runs.py save runs/$NAME
cp results/kept/$ARCHIVE "$MAIN/results/kept/$ARCHIVE"
copy_results
