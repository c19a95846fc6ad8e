#!/usr/bin/env bash
# The rank-fidelity measurements in the order that answers soonest, each step resumable: run it
# again after a kill (a session's end) and it goes on where it stopped.
#   1. the reference panel at seed 0: a whole panel of one seed;
#   2. `demo`'s fitness for every panel layer at search seeds 0-2: its first Spearman, against
#      that one-seed panel;
#   3. the chart's screen: every other setting at seed 0, against the panel as it stands (which
#      settings could rank well is the answer that changes what is tried next);
#   4. the confirmation runs (seeds 1 and 2) of the two best screened settings against the panel
#      as it stands: some 90 minutes of training done before the panel's last seeds, not after;
#   5. the panel's seeds 1 and 2;
#   6. the chart's whole protocol against the whole panel (the runs of 2-4 are kept): it picks
#      the two to confirm again, against the whole panel, and trains any it names that step 4
#      did not; then the choice, the table and the chart.
# Steps 1 and 5 train in experiments/fidelity_panel.py, the others in experiments/proxy_fidelity.py.
# The settings' runs live in runs/fidelity/ (not in git); a fresh checkout starts from the copies
# in results/fidelity/records/ (commit those, partial ones too, before a session ends), so that
# only runs in neither place train again. The panel's runs are in results/fidelity/runs.jsonl.
#
#     nohup nice -n 15 bash experiments/fidelity_queue.sh >> runs/fidelity_queue.log 2>&1 &
#
# Heavy work beside it raises the CPU seconds the chart's costs are measured in (up to 25% seen):
# pause the running step for it (`kill -STOP` its python process and that process's children,
# `kill -CONT` after); keep the pause under an hour: a job's time limit (90 minutes) runs on.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
for rec in results/fidelity/records/*/; do
    run="runs/fidelity/$(basename "$rec")"
    if [ ! -f "$run/runs.jsonl" ] || [ "$(wc -l < "$run/runs.jsonl")" -lt "$(wc -l < "$rec/runs.jsonl")" ]; then
        mkdir -p "$run" && cp "$rec"/* "$run"/
    fi
done
"$PY" -m experiments.fidelity_panel --workers 2 --seeds 0
"$PY" -m experiments.proxy_fidelity --workers 2 --only demo
"$PY" -m experiments.proxy_fidelity --workers 2 --seeds 0 --only \
    steps600-1run steps300-2runs images12k nocrop lr0.05 width0.125 batch64 resnet-only-450 \
    mobilenet-only-300 steps900-1run
"$PY" -m experiments.proxy_fidelity --workers 2 --confirm
"$PY" -m experiments.fidelity_panel --workers 2
"$PY" -m experiments.proxy_fidelity --workers 2
echo "fidelity queue: done"
