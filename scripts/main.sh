#!/usr/bin/env bash
# The main job: sets up ./.venv on a fresh machine, then runs a short real layer search on the
# default embedded setup (local process pool, SQLite store, Fashion-MNIST when installed, else a
# small built-in task) and writes its report. Extra arguments go to `evonorm search`.
source "$(dirname "$0")/env.sh"
RUN="${EVONORM_RUN:-runs/main}"
if [ -f "$RUN/store.sqlite" ]; then
    evonorm resume "$RUN"
else
    evonorm search --preset demo --space s --out "$RUN" "$@"
fi
evonorm report "$RUN"
