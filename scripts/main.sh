#!/usr/bin/env bash
# The main job: sets up ./.venv on a fresh machine, installs Fashion-MNIST (Debian's
# dataset-fashion-mnist) where it can, then runs a short real layer search on the default embedded
# setup (local process pool, SQLite store) and writes its report. Extra arguments go to
# `evonorm search`; without Fashion-MNIST the search stops (exit 2) unless given --dataset synthetic.
# EVONORM_RETRAIN_SEEDS=3 (off by default: it adds about 8.5 min on 2 cores) re-trains the top
# EVONORM_RETRAIN_TOP found layers, the references and the seed layers with that many training
# seeds (`evonorm retrain`) before the report, so its first sentence can say whether a found layer beats them.
source "$(dirname "$0")/env.sh"
RUN="${EVONORM_RUN:-runs/main}"
ensure_fashion_mnist || echo "main.sh: or run 'scripts/main.sh --dataset synthetic' for the built-in synthetic task" >&2
if [ -f "$RUN/store.sqlite" ]; then
    evonorm resume "$RUN"
else
    evonorm search --preset demo --space s --out "$RUN" "$@"
fi
if [ "${EVONORM_RETRAIN_SEEDS:-0}" != 0 ]; then
    evonorm retrain "$RUN" --seeds "$EVONORM_RETRAIN_SEEDS" --top "${EVONORM_RETRAIN_TOP:-1}"
fi
evonorm report "$RUN"
