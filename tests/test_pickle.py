"""Pickling: a Graph (its ops and constants), a prepared ONNX model and an
ONNX backend rep pickle without their compiled kernels and give the same
answers after unpickling, here and in a spawned process; a Context pickles
as its arguments; a Tensor as its values; builders and operands refuse."""

from __future__ import annotations

import copy
import multiprocessing
import os
import pickle

import numpy as np
import pytest

import jitnn
from tests import workers


def _round_trip(value):
    return pickle.loads(pickle.dumps(value))


def test_a_builder_graph_round_trips_and_gives_the_same_answers():
    graph = workers.small_graph()
    inputs = workers.small_graph_inputs()
    expected = workers.run_graph(graph, inputs)
    again = _round_trip(graph)
    assert again is not graph and again.context is jitnn.default_context()
    assert repr(again) == repr(graph)
    assert again.input_dtypes == graph.input_dtypes and again.output_dtypes == graph.output_dtypes
    got = workers.run_graph(again, inputs)
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
    for _ in range(2):                                           # replays as any graph
        computed = workers.compute_graph(again, inputs)
    for name in expected:
        np.testing.assert_array_equal(computed[name], expected[name], err_msg=name)


def test_a_pickle_holds_values_not_plans_or_packed_filters():
    graph = workers.small_graph()
    inputs = workers.small_graph_inputs()
    before = len(pickle.dumps(graph))
    workers.compute_graph(graph, inputs)                 # plans, packs, keeps the program
    assert graph._programs
    assert len(pickle.dumps(graph)) == before
    assert not _round_trip(graph)._programs


def test_a_graph_and_its_context_pickled_apart_meet_again():
    ctx = jitnn.Context(num_threads=1, policy="eager")
    graph = workers.small_graph(ctx)
    ctx_again, graph_again = _round_trip(ctx), _round_trip(graph)
    assert graph_again.context is ctx_again is not ctx
    assert (ctx_again.num_threads, ctx_again.policy) == (1, "eager")
    inputs = workers.small_graph_inputs()
    expected = workers.run_graph(graph, inputs)
    got = workers.run_graph(graph_again, inputs)
    np.testing.assert_array_equal(got["pool"], expected["pool"])


def test_a_context_pickles_as_its_arguments():
    assert _round_trip(jitnn.default_context()) is jitnn.default_context()
    # threads and block not given: the receiver's own defaults, not the sender's
    default_threads = jitnn.Context(conv_algorithm="direct")
    assert pickle.loads(pickle.dumps(default_threads)) is _round_trip(default_threads)
    _, (arguments,) = default_threads.__reduce__()
    assert arguments["num_threads"] is None and arguments["block"] is None
    assert arguments["conv_algorithm"] == "direct"
    _, (arguments,) = jitnn.Context(num_threads=1, block=8).__reduce__()
    assert (arguments["num_threads"], arguments["block"]) == (1, 8)
    ctx = jitnn.Context(num_threads=1)
    assert copy.copy(ctx) is ctx and copy.deepcopy([ctx])[0] is ctx
    graph = workers.small_graph()
    assert copy.deepcopy(graph) is graph


def test_builders_operands_and_placeholders_refuse_with_a_reason():
    b = jitnn.GraphBuilder()
    x = b.input("x", (2, 2))
    with pytest.raises(jitnn.JitnnTypeError, match=r"GraphBuilder: a builder does not pickle"):
        pickle.dumps(b)
    with pytest.raises(jitnn.JitnnTypeError, match=r"Operand: .* pickle the Graph"):
        pickle.dumps(x)
    with pytest.raises(jitnn.JitnnTypeError, match=r"placeholder has no values"):
        pickle.dumps(x._placeholder)
    with pytest.raises(jitnn.JitnnTypeError, match=r"shape context cannot be pickled"):
        pickle.dumps(b._shape_ctx)


def test_a_pickle_of_another_format_is_refused():
    function, (description,) = workers.small_graph().__reduce__()
    with pytest.raises(jitnn.JitnnValueError, match=r"format 99, this jitnn reads format 1"):
        function({**description, "format": 99})


def test_prepared_onnx_models_round_trip():
    import jitnn.onnx
    import jitnn.onnx.backend
    image, expected = workers.model_case()
    model = jitnn.onnx.prepare(workers.MODEL)
    again = _round_trip(model)
    assert again.ctx is again.graph.context is jitnn.default_context()
    assert (again.inputs, again.outputs, again.jitnn_ops) == \
        (model.inputs, model.outputs, model.jitnn_ops)
    np.testing.assert_array_equal(workers.run_model(again, image),
                                  workers.run_model(model, image))
    rep = jitnn.onnx.backend.prepare(workers.MODEL)
    first = workers.run_backend_rep(rep, image)
    data = pickle.dumps(rep)
    assert len(data) < 1.2 * os.path.getsize(workers.MODEL)     # no conversions inside
    np.testing.assert_array_equal(workers.run_backend_rep(pickle.loads(data), image), first)
    np.testing.assert_allclose(first, expected, rtol=1e-4, atol=1e-4)


def test_a_spawned_process_rebuilds_and_runs_what_it_is_sent():
    """The receiving process has none of the sender's objects: it builds the
    graph again from the pickle, its kernels from the disk cache."""
    import jitnn.onnx
    import jitnn.onnx.backend
    image, expected = workers.model_case()
    graph, inputs = workers.small_graph(), workers.small_graph_inputs()
    here = workers.run_graph(graph, inputs)
    eager = jitnn.Context(num_threads=1, policy="eager")
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        there = pool.apply(workers.run_graph, (graph, inputs))
        logits = pool.apply(workers.run_model, (jitnn.onnx.prepare(workers.MODEL), image))
        rep_logits = pool.apply(workers.run_backend_rep,
                                (jitnn.onnx.backend.prepare(workers.MODEL), image))
        default_facts = pool.apply(workers.context_facts, (jitnn.default_context(),))
        facts = pool.apply(workers.context_facts, (eager,))
        facts_again = pool.apply(workers.context_facts, (eager,))
    for name in here:
        np.testing.assert_array_equal(there[name], here[name], err_msg=name)
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(rep_logits, logits)
    assert default_facts[3] is True                      # the child's default context
    assert facts[:4] == (1, "eager", "auto", False)
    assert facts_again[4] == facts[4]                    # (the same child)
