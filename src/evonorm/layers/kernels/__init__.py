"""The hand-written kernels behind the EvoNorm layers' fast paths.

`evonorm_s_cpu` and `evonorm_b_cpu` are autograd Functions for CPU (impl="fast", the CPU default);
`evonorm_triton` holds the Triton kernels (impl="triton"), imported only on use because Triton is an
optional dependency. Every kernel computes the same function as the plain formulas in
`evonorm.layers._formula`, which also give their double backward.
"""
