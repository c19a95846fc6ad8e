#!/usr/bin/env bash
# The main job: sets up ./.venv on a fresh machine, then runs a short real layer search on the
# default embedded setup (local process pool, SQLite store, Fashion-MNIST when installed, else a
# small built-in task) and writes its report. Extra arguments go to `evonorm search`.
# EVONORM_RETRAIN_SEEDS=3 also re-trains the top layers, references and seeds with 3 training seeds
# before the report (its first sentence then says whether a found layer beats them; see README,
# "Reports and results": this takes far longer than the 10-minute search, so it is off by default).
source "$(dirname "$0")/env.sh"
RUN="${EVONORM_RUN:-runs/main}"
if [ -f "$RUN/store.sqlite" ]; then
    evonorm resume "$RUN"
else
    evonorm search --preset demo --space s --out "$RUN" "$@"
fi
evonorm report "$RUN" --seeds "${EVONORM_RETRAIN_SEEDS:-0}" --retrain-top "${EVONORM_RETRAIN_TOP:-3}"
