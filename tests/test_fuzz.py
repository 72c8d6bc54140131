"""Property-based fuzzing with hypothesis: random programs of every op and
option (tests/programs.py) against the float64 references, under each policy
(and, in the slow run, the block this host does not pick), as graphs computed
twice, and with random bad calls (tests/bad_calls.py) in the middle that must
raise a jitnn error at the call and leave the program's numbers intact.

The programs' structure (which op, shapes, options, reads and drops) is drawn
from hypothesis, so a failure shrinks to a short program, which the failure
prints; the numbers in the tensors come from a drawn seed. The default run
tries a few hundred examples, derandomized so that CI sees the same ones;
``pytest -m slow`` tries thousands, random each run. A failure hypothesis
finds is fixed, and kept as a regression test of its own (as in
tests/test_hardening.py).
"""

from __future__ import annotations

import numpy as np
import pytest

hypothesis = pytest.importorskip(
    "hypothesis",
    reason="the fuzz suite needs hypothesis (in the test extra: pip install -e \".[test]\")")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from .bad_calls import bad_calls_2d, bad_calls_4d, expect_error  # noqa: E402
from .programs import CONTEXTS, draw_program, run_eager, run_graph  # noqa: E402


class HypothesisDraws:
    """What ``draw_program`` asks a numpy Generator for, drawn from
    hypothesis instead (so examples shrink); arrays of numbers (filters,
    constants) come from a numpy Generator seeded by a drawn ``seed``."""

    def __init__(self, data: st.DataObject):
        self.data = data
        self.seed = data.draw(st.integers(0, 2**16), label="numbers seed")
        self.numbers = np.random.default_rng(self.seed)

    def choice(self, options, size=None):
        if size is not None:                       # an array of choices: numbers
            return self.numbers.choice(options, size)
        return self.data.draw(st.sampled_from(list(options)))

    def integers(self, low, high=None):
        low, high = (0, low) if high is None else (low, high)
        return self.data.draw(st.integers(low, high - 1))

    def random(self):
        return self.data.draw(st.floats(0.0, 1.0, exclude_max=True))

    def standard_normal(self, shape=None):
        return self.numbers.standard_normal(shape)

    def uniform(self, low, high, shape=None):
        return self.numbers.uniform(low, high, shape)


def _program(data: st.DataObject, max_length: int = 10):
    draws = HypothesisDraws(data)
    length = data.draw(st.integers(1, max_length), label="length")
    return draw_program(draws, length=length)


def _settings(examples: int, slow: bool = False):
    return settings(max_examples=examples, deadline=None, database=None,
                    derandomize=not slow, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


#: the default run: a few hundred examples in all
EXAMPLES = 30
#: ``pytest -m slow``: thousands in all
SLOW_EXAMPLES = 400

DEFAULT_CONTEXTS = [name for name in CONTEXTS if name != "blocked-other-block"]


@pytest.mark.parametrize("context", DEFAULT_CONTEXTS)
@_settings(EXAMPLES)
@given(data=st.data())
def test_fuzz_programs_match_reference(context, data):
    run_eager(_program(data), context)


@_settings(EXAMPLES)
@given(data=st.data())
def test_fuzz_graphs_match_reference(data):
    run_graph(_program(data))


def _with_bad_calls(data: st.DataObject, context: str) -> None:
    """Run a program; between steps, hypothesis may make bad calls on live
    tensors, each of which must raise at the call."""
    program = _program(data)

    def bad_calls(ctx, tensors):
        for _ in range(data.draw(st.integers(0, 2), label="bad calls")):
            x = tensors[data.draw(st.sampled_from(sorted(tensors)))]
            calls = bad_calls_4d(x.shape) if x.ndim == 4 else bad_calls_2d(x.shape)
            index = data.draw(st.integers(0, len(calls) - 1), label="bad call")
            expect_error(*calls[index], x, f"#{index}")
    run_eager(program, context, between_steps=bad_calls)


@pytest.mark.parametrize("context", ["blocked", "eager", "blocked-pending3"])
@_settings(EXAMPLES)
@given(data=st.data())
def test_fuzz_bad_calls_leave_the_program_intact(context, data):
    _with_bad_calls(data, context)


@pytest.mark.slow
@pytest.mark.parametrize("context", list(CONTEXTS))
@_settings(SLOW_EXAMPLES, slow=True)
@given(data=st.data())
def test_fuzz_many_programs(context, data):
    program = _program(data, max_length=20)
    run_eager(program, context)
    if context == "blocked":
        run_graph(program)


@pytest.mark.slow
@pytest.mark.parametrize("context", ["blocked", "plain", "eager", "blocked-pending3"])
@_settings(SLOW_EXAMPLES, slow=True)
@given(data=st.data())
def test_fuzz_many_bad_calls(context, data):
    _with_bad_calls(data, context)
