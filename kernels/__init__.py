"""jitnn's Numba kernels (installed as ``jitnn.kernels``).

Plain functions on numpy arrays, destination-passing (they write into an
``out`` array the caller allocated), with no import of the jitnn runtime.
``_config`` holds the numba settings every kernel module applies first.
"""
