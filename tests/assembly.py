"""Checks of the machine code numba generates for the kernels' hot loops:
packed (ymm/zmm) FMAs, no scalar FMA, nothing spilled to the stack. Used by
the conv2d and conv_transpose2d kernel tests (their slow set)."""

import re

import numba
import pytest

from jitnn.kernels import _config
from jitnn.kernels._config import jit


def fresh_asm(monkeypatch, name, run, *, module, driver_tables):
    """Compile kernel ``name`` of kernel module ``module`` and its drivers
    (the dicts named ``driver_tables`` there) in this process (the cache keeps
    no assembly) by running ``run`` with fresh dispatchers; return the assembly
    of every specialization of the kernel, and of every driver unless the
    kernel is standalone.

    A driver's object code embeds its own copy of the kernels it calls,
    optimized again with the driver, and that copy is what runs whenever the
    driver is loaded from the cache; a standalone kernel's drivers call its
    own code instead (kernels/_linking.py), which is what runs then.
    """
    original = getattr(module, name)
    standalone = isinstance(original, _config._StandaloneDispatcher)
    fresh = jit(cache=False, standalone=standalone)(original.py_func)
    monkeypatch.setattr(module, name, fresh)
    monkeypatch.setattr(module, "jit", lambda parallel=False, cache=True:
                        jit(parallel=parallel, cache=False))
    # the drivers' parallel compile (what runs on 2 threads), uncached
    monkeypatch.setattr(module, "parallel_kernel",
                        lambda function: jit(parallel=True, cache=False)(function))
    drivers = {}
    for table in driver_tables:
        monkeypatch.setattr(module, table, drivers)
    run()
    asms = dict(fresh.inspect_asm())
    for key, driver in ({} if standalone else drivers).items():
        for signature, asm in driver.inspect_asm().items():
            asms[(key, signature)] = asm
    assert asms if standalone else len(asms) >= 2
    return asms


# bounds checks (NUMBA_BOUNDSCHECK=1) put a branch on every load: no vectors;
# the checks read x86 assembly of AVX2 or AVX-512 FMAs, which a target without
# them (NUMBA_CPU_NAME=generic: SSE2, or AArch64) does not have
needs_packed_fma = pytest.mark.skipif(
    bool(numba.config.BOUNDSCHECK) or not (
        _config.TARGET_AVX2 or _config.TARGET_AVX512) or "fma" not in _config.TARGET_FEATURES,
    reason="NUMBA_BOUNDSCHECK=1 disables vectorization, or the target has no AVX2 FMA")


def _packed_fma(line):
    return "vfmadd" in line and "ps" in line.split()[0] and ("%ymm" in line or "%zmm" in line)


def _hot_loops(asm, min_fma):
    """Innermost FMA loops: bodies (a label up to the jump back to it) with at
    least ``min_fma`` packed FMAs, at least one line in five an FMA, and no
    compare-and-select: those are the epilogue's activations (polynomials,
    with their constants reloaded from the stack, and scalar ones for the
    lanes left over after the vectors), which are not the kernels' loops."""
    lines = asm.splitlines()
    where = {}
    loops = []
    for i, line in enumerate(lines):
        text = line.strip()
        if text.endswith(":") and not line[0].isspace():
            where[text[:-1]] = i
        elif text.startswith("j") and text.split()[-1] in where:
            start = where[text.split()[-1]]
            if sum(_packed_fma(b) for b in lines[start:i + 1]) >= min_fma:
                loops.append((start, i))
    inner = [(a, b) for a, b in loops
             if not any(a < c and d <= b for c, d in loops if (c, d) != (a, b))]
    # an FMA loop is mostly FMAs and loads (outer loops around small FMA
    # loops, like depthwise single pixels, are not)
    return [lines[a:b + 1] for a, b in inner
            if sum("vfmadd" in line for line in lines[a:b + 1]) * 5 >= b + 1 - a
            and not any(line.split()[0].startswith(("vcmp", "vblendv"))
                        for line in lines[a:b + 1] if line.split())]


_STACK_STORE = re.compile(r"^mov\w*\s+%\w+,\s*-?\d*\(%rsp\)$")


def check_packed_fma(asms, min_fma=12):
    """Each assembly of ``asms`` (what :func:`fresh_asm` returns) has a hot
    loop of at least ``min_fma`` packed FMAs, no scalar FMA in it and no spill."""
    for signature, asm in asms.items():
        hot = _hot_loops(asm, min_fma)
        assert hot, f"{signature}: no loop with {min_fma} packed ymm FMAs"
        scalar = [line for loop in hot for line in loop
                  if "vfmadd" in line and line.split()[0].endswith("ss")]
        assert not scalar, f"{signature}: scalar FMA in the kernel: {scalar[:3]}"
        # the hot loop keeps its vectors and pointers in registers: no vector
        # touches the stack and nothing is stored there (reloading a few
        # addresses is tolerated: the first layer reads 3 x 6 of them)
        for loop in hot:
            spills = [line for line in loop if "(%rsp)" in line
                      and ("%ymm" in line or "%zmm" in line
                           or _STACK_STORE.search(line.strip()))]
            assert not spills, f"{signature}: spills in the hot loop: {spills[:3]}"

