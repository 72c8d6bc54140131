"""jitnn: CPU neural-network kernels on blocked layouts, in pure Python (Numba)."""
