"""Plain float64 numpy reference for conv2d (NCHW, oihw, WebNN semantics).

Obviously correct rather than fast: one matrix product per kernel tap.
"""

import numpy as np

from jitnn.kernels.epilogue import activation_reference


def conv2d_reference(x, w, bias=None, residual=None, strides=(1, 1), dilations=(1, 1),
                     padding=(0, 0, 0, 0), groups=1, activation=0, param0=0.0, param1=0.0):
    """``act(conv(x, w) + bias + residual)`` in float64.

    ``x: (N, C, H, W)``, ``w: (O, C // groups, KH, KW)``, ``bias: (O,)``,
    ``residual: (N, O, OH, OW)``; ``padding`` is ``[top, bottom, left, right]``.
    """
    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    n, c, h, wd = x.shape
    o, gi, kh, kw = w.shape
    sh, sw = strides
    dh, dw = dilations
    pt, pb, pl, pr = padding
    oh = (h - ((kh - 1) * dh + 1) + pt + pb) // sh + 1
    ow = (wd - ((kw - 1) * dw + 1) + pl + pr) // sw + 1
    xp = np.zeros((n, c, h + pt + pb, wd + pl + pr))
    xp[:, :, pt:pt + h, pl:pl + wd] = x
    go = o // groups
    y = np.zeros((n, o, oh, ow))
    for g in range(groups):
        xs = xp[:, g * gi:(g + 1) * gi]
        ws = w[g * go:(g + 1) * go]
        for i in range(kh):
            for j in range(kw):
                r0, c0 = i * dh, j * dw
                patch = xs[:, :, r0:r0 + (oh - 1) * sh + 1:sh, c0:c0 + (ow - 1) * sw + 1:sw]
                y[:, g * go:(g + 1) * go] += np.einsum("nchw,oc->nohw", patch, ws[:, :, i, j])
    if bias is not None:
        y += np.asarray(bias, np.float64)[None, :, None, None]
    if residual is not None:
        y += np.asarray(residual, np.float64)
    return activation_reference(y, activation, param0, param1)
