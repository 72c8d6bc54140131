"""jitnn's Numba kernels (installed as ``jitnn.kernels``).

Plain functions on numpy arrays, destination-passing (they write into an
``out`` array the caller allocated), with no import of the jitnn runtime.
``_config`` holds the numba settings every kernel module applies first, and
the kernel cache; ``_linking`` the standalone kernels (compiled once, called
by a name every process gives them) and the recipes that make a kernel again
in another process (compile workers).
Their spec is the float64 reference of the op each serves
(``jitnn.registry.reference(name)``), which the tests compare them with.

Modules:

* ``conv2d/``: 2-D convolution (its ``__init__`` is the API; planning,
  direct, 1x1, depthwise and Winograd paths, register tiles);
* ``conv_transpose2d``: transposed convolution;
* ``matmul/``: matrix products (its ``__init__`` is the checked API;
  blocking, packing, tiles, drivers);
* ``layout`` (with ``layout_nhwc``, ``layout_simd``, ``layout_tuning``):
  activation reorders between plain and blocked tensors;
* ``filter_packing``: filters into the blocked layout the convolutions read;
* ``eltwise``, ``pool``, ``concat``: elementwise ops, pooling, channel
  concatenation; ``vmath``: the element-wise chain's vectorized math;
* ``epilogue``, ``simd``, ``stack``: activations and intrinsics they share;
* ``buffers``: 64-byte aligned allocation (``aligned_empty``).
"""
