# One prepared device run: the CUDA-only tests, then the Triton kernels against the compiled formula.
# Run it on a GPU machine from the repository root; results go to $OUT (default ./gpu_check_out).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 OUT="${OUT:-gpu_check_out}"; mkdir -p "$OUT"
nvidia-smi -L; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
timeout 180 python3 -m pytest -q -p no:cacheprovider -rs tests/test_layers_cuda.py tests/test_layers_triton.py \
  tests/test_graph_fast.py tests/test_devices.py "tests/test_graph_module.py::test_runs_on_cuda_like_on_cpu" \
  2>&1 | tee $OUT/tests.log | tail -40
L="bn_relu gn_relu evonorm_s0 evonorm_b0"
S="128,64,24,24 8,256,14,14 256,64,56,56"
for dt in float32 bfloat16; do for impl in triton compile; do
  timeout $([ $impl = triton ] && echo 50 || echo 90) python3 benchmarks/bench_layers.py --device cuda --impl $impl --dtype $dt --layers $L --shapes $S \
    --rounds 7 > $OUT/bench_${impl}_${dt}.md 2>&1; echo "bench $impl $dt rc=$?"; tail -12 $OUT/bench_${impl}_${dt}.md
done; done
