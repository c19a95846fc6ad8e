#!/usr/bin/env bash
# The prescreen's measurements in order, each step resumable: run it again after a kill (a
# session's end) and it goes on where it stopped. Start it once `demo`'s setting is final: the
# prior and every measurement hold for that setting only (the prior's file records it).
#   1. demo's shipped prior: evolution searches at seeds 100-105, 900 worker-seconds each
#      (experiments/prescreen_prior.py), written to src/evonorm/proxy/priors/ (commit it);
#   2. the surrogate on held-out candidates of those searches, pooled: enough valid layers to
#      score its fitness ranking too (experiments/surrogate_holdout.py);
#   3. the arms: evolution with and without the prescreen, and random search, seeds 0-9, 900
#      worker-seconds each, the three arms of a seed side by side (experiments/prescreen_arms.py;
#      a first attempt, whose features ran 100x slow, is kept as runs/prescreen_attempt1);
#   4. Fig. 10 with the prescreen: its arm against random search on the paper's metric and the
#      best fitness, and each arm's best layer trained again with 4 fresh seeds; then the same
#      for the plain-evolution arm of those runs;
#   5. the one-hour S search with the prescreen, its top 3 trained again with 5 seeds beside
#      EvoNorm-S0, GN-ReLU, BN-ReLU and its seed layers (experiments/long_search.py), then at the
#      reference setting of the rank-fidelity panel, 3 seeds (experiments/fidelity_panel.py --run);
#   6. the paper's stability-test ablation (its appendix Fig. 11): evolution with and without the
#      stability test, seeds 0-9, 900 worker-seconds each (experiments/stability_ablation.py);
#   7. the one lead of step 5 at the reference setting, id 2845 `max(x / v1 / group std(x), 0)`
#      (above GN-ReLU at seeds 0-2 by 4.1 points, p = 0.029, one of six tests), at fresh seeds
#      3-5 beside GN-ReLU and EvoNorm-S0 at the same seeds. Protocol, fixed before the runs: each
#      seed's score the mean of both architectures; the test that counts is one one-sided Welch
#      t-test over the three seeds, id 2845 above GN-ReLU, p < 0.05; beside it, against
#      EvoNorm-S0 each way. (Run before step 6 finished, which it resumed after; done:
#      results/long_search_prescreen/reference_seeds345/, a rerun finds it complete.)
#
#     nohup nice -n 15 bash experiments/prescreen_queue.sh >> runs/prescreen_queue.log 2>&1 &
#
# The run folders live in runs/ (not in git), and the next session may start on a fresh machine:
# before a session ends, keep them in git (the queue's first step unpacks them where missing),
#
#     python -m experiments.keep_runs save runs/prescreen_prior runs/prescreen \
#         runs/long_search_prescreen runs/stability_ablation    # those that exist; commit results/kept
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
"$PY" -m experiments.keep_runs restore
SEEDS="0 1 2 3 4 5 6 7 8 9"
"$PY" -m experiments.prescreen_prior --seeds 100 101 102 103 104 105 --budget-seconds 900
[ -f results/prescreen/holdout-prior.json ] ||  # done once; a rerun only costs minutes
    "$PY" -m experiments.surrogate_holdout --run runs/prescreen_prior/demo_s10{0,1,2,3,4,5} \
        --sizes 25,50,100,150 --splits 20 --name holdout-prior
"$PY" -m experiments.prescreen_arms --seeds $SEEDS --budget-seconds 900
# the top level of results/evolution_vs_random/ holds this comparison (runs 5 and 6's files are in
# sixth_run_seeds0-9/, as earlier runs' are in folders of their own)
EVR=results/evolution_vs_random
"$PY" -m experiments.evolution_vs_random --preset demo --test paired --budget-seconds 900 \
    --seeds $SEEDS --runs runs/prescreen --evolution-arm prescreen --summarize-only \
    --fresh-seeds 4
# beside it, the plain-evolution arm of the same runs against the same random arm (the random
# arm's fresh runs are shared): whether what beats random search is the prescreen or evolution
"$PY" -m experiments.evolution_vs_random --preset demo --test paired --budget-seconds 900 \
    --seeds $SEEDS --runs runs/prescreen --evolution-arm evolution --summarize-only \
    --fresh-seeds 4 --out "$EVR/prescreen_arms_plain_evolution"
"$PY" -m experiments.long_search --prescreen --run runs/long_search_prescreen \
    --out results/long_search_prescreen
"$PY" -m experiments.fidelity_panel --run runs/long_search_prescreen --top 3 \
    --out results/long_search_prescreen/reference
"$PY" -m experiments.stability_ablation --seeds $SEEDS --budget-seconds 900
"$PY" -m experiments.fidelity_panel --seeds 3 4 5 --out results/long_search_prescreen/reference_seeds345 \
    --layer 'found_2845={"nodes": [["abs", 2], ["tanh", 4], ["div", 0, 3], ["group_std", 0], ["div", 6, 7], ["max", 8, 1]]}' \
    --layer gn_relu=gn_relu --layer evonorm_s0=evonorm_s0
echo "prescreen queue: done"
