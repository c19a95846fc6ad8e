# One prepared device run: the found layer `tanh_group_rms` against GN-ReLU (the primary comparison),
# EvoNorm-S0 and BN-ReLU at full width, the protocol of docs/findings.md section 7 ("a proper test at full
# width"): ResNet50 at width 1.0 on all 60,000 Fashion-MNIST training images, 1000 steps of batch 128 (the
# `small` preset's schedule), scored on the official test split, training seeds 2-6, PARALLEL runs at once on
# the one GPU, the primary pair's runs first. Run from the repository root on a GPU machine with the four IDX
# files in $EVONORM_DATA_ROOT; one JSON per run in $OUT; a run past RUN_TIMEOUT seconds is cut and reported.
# A dry run here: DEVICE=cpu STEPS=2 N_TRAIN=512 N_TEST=64 SEEDS=2 PARALLEL=2 EVONORM_DATA_ROOT=<IDX folder>.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 OUT="${OUT:-full_width_out}"; mkdir -p "$OUT"
DATA="${EVONORM_DATA_ROOT:-.gpudata}" SEEDS="${SEEDS:-2 3 4 5 6}" PARALLEL="${PARALLEL:-10}"
STEPS="${STEPS:-1000}" RUN_TIMEOUT="${RUN_TIMEOUT:-500}" DEVICE="${DEVICE:-cuda}"
N_TRAIN="${N_TRAIN:-60000}" N_TEST="${N_TEST:-10000}"
export DATA RUN_TIMEOUT STEPS DEVICE N_TRAIN N_TEST
{ nvidia-smi -L; python3 -c "import os, torch; print('torch', torch.__version__, 'cpus', os.cpu_count())"; } \
  2>&1 | tee "$OUT/env.txt"
{ for s in $SEEDS; do echo "tanh_group_rms $s"; echo "gn_relu $s"; done
  for s in $SEEDS; do echo "evonorm_s0 $s"; echo "bn_relu $s"; done; } > "$OUT/jobs.txt"
t0=$(date +%s)
xargs -P "$PARALLEL" -L 1 bash -c 'timeout "$RUN_TIMEOUT" python3 -m evonorm.cli train --layer "$0" \
  --arch resnet50_cifar --preset small --dataset fashion_mnist --data-root "$DATA" --width 1.0 --steps "$STEPS" \
  --batch-size 128 --n-train "$N_TRAIN" --n-test "$N_TEST" --seed "$1" --device "$DEVICE" --no-progress \
  --out "$OUT/$0_s$1.json" > "$OUT/$0_s$1.log" 2>&1; echo "$0 seed $1 rc=$? at $(( $(date +%s) - '"$t0"' )) s"' \
  < "$OUT/jobs.txt"
python3 - "$OUT" <<'PY'
import json, pathlib, sys
rows = [json.loads(p.read_text()) for p in sorted(pathlib.Path(sys.argv[1]).glob("*_s*.json"))]
for r in rows:
    print(r["layer"], r["config"]["seed"], r["status"], r["accuracy"], round(r["seconds"], 1))
PY
