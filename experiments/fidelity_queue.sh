#!/usr/bin/env bash
# The rank-fidelity measurements in the order that answers soonest, each step resumable: run it
# again after a kill (a session's end) and it goes on where it stopped.
#   1. the reference panel at seed 0: a whole panel of one seed;
#   2. `demo`'s fitness for every panel layer at search seeds 0-2: its first Spearman, against
#      that one-seed panel;
#   3. the panel's seeds 1 and 2;
#   4. every setting of the chart (demo's runs are kept) against the whole panel, with the table
#      and the chart.
# Steps 1 and 3 train in experiments/fidelity_panel.py, 2 and 4 in experiments/proxy_fidelity.py.
#
#     nohup nice -n 15 bash experiments/fidelity_queue.sh >> runs/fidelity_queue.log 2>&1 &
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
"$PY" experiments/fidelity_panel.py --workers 2 --seeds 0
"$PY" experiments/proxy_fidelity.py --workers 2 --only demo
"$PY" experiments/fidelity_panel.py --workers 2
"$PY" experiments/proxy_fidelity.py --workers 2
echo "fidelity queue: done"
