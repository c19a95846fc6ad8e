# One prepared device run: what a GPU box gives the search. First the candidate cost on the GPU (a `demo`
# model built and trained 60 steps per layer, graph layers against native ones), then the same random search
# (its proposals do not depend on results, so both runs do identical work) with its candidates trained on the
# GPU and on the machine's CPU cores, with the same number of local workers.
# Run from the repository root on a GPU machine, with Fashion-MNIST's four IDX files in $EVONORM_DATA_ROOT;
# results go to $OUT (default ./gpu_search_out). BUDGET, WORKERS and DEVICES shorten it for a dry run.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 OUT="${OUT:-gpu_search_out}"; mkdir -p "$OUT"
DATA="${EVONORM_DATA_ROOT:-.gpudata}" BUDGET="${BUDGET:-75}" WORKERS="${WORKERS:-8}" DEVICES="${DEVICES:-cuda cpu}"
{ nvidia-smi -L; python3 -c "import os, torch; print('torch', torch.__version__, 'cpus', os.cpu_count())"; } \
  2>&1 | tee "$OUT/env.txt"
if [[ " $DEVICES " == *" cuda "* ]]; then
  timeout "${BENCH_TIMEOUT:-150}" python3 benchmarks/bench_candidate.py --device cuda --rounds 2 \
    --graphs GN-ReLU evonorm_s0 > "$OUT/bench_candidate_cuda.md" 2> "$OUT/bench_candidate_cuda.log"
  echo "bench_candidate rc=$?"; cat "$OUT/bench_candidate_cuda.md"
fi
for dev in $DEVICES; do
  run="/tmp/gpu_search_check/$dev"; rm -rf "$run"; t0=$(date +%s.%N)
  timeout "${SEARCH_TIMEOUT:-180}" python3 -m evonorm.cli search --preset demo --algorithm random --budget "$BUDGET" \
    --device "$dev" --workers "$WORKERS" --data-root "$DATA" --out "$run" > "$OUT/search_$dev.log" 2>&1
  rc=$?; echo "search $dev rc=$rc wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s" \
    | tee -a "$OUT/search_walls.txt"
  tail -3 "$OUT/search_$dev.log"
  python3 benchmarks/bench_search.py costs "$run" 2>&1 | tee -a "$OUT/search_costs.txt"
done
