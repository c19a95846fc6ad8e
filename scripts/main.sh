#!/usr/bin/env bash
# The main job: sets up ./.venv on a fresh machine, then runs a short real layer search on the
# default embedded setup (local process pool, SQLite store, Fashion-MNIST when installed, else a
# small built-in task) and writes its report. Extra arguments go to `evonorm search`.
# Before the report it re-trains the top found layer, the references and the seed layers with 3
# training seeds (EVONORM_RETRAIN_TOP=1, EVONORM_RETRAIN_SEEDS=3; 0 turns it off), so the page's first
# sentence can say whether a found layer beats them (about 8.5 min on 2 cores; README, "Reports").
source "$(dirname "$0")/env.sh"
RUN="${EVONORM_RUN:-runs/main}"
if [ -f "$RUN/store.sqlite" ]; then
    evonorm resume "$RUN"
else
    evonorm search --preset demo --space s --out "$RUN" "$@"
fi
evonorm report "$RUN" --seeds "${EVONORM_RETRAIN_SEEDS:-3}" --retrain-top "${EVONORM_RETRAIN_TOP:-1}"
