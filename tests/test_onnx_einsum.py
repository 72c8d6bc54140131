"""ONNX Einsum (jitnn/onnx/_convert_einsum.py) against numpy.einsum in float64:
the equations exporters write (batched products of attention, a linear
layer's ``"bid,jd->bij"``), transposes, sums, diagonals, ``...``, three
operands, constant operands; ONNX's own Einsum node tests in float32 (they
are float64 and bfloat16, which jitnn refuses: see test_onnx_conformance.py);
the ops each equation lowers to; broken equations refused at load time."""

from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX tests need onnx (pip install -e \".[test]\")")

from onnx import TensorProto, helper, numpy_helper

import jitnn
import jitnn.onnx
from tests.onnx_cases import node_cases


def einsum_model(equation: str, shapes, constant=(), seed: int = 0):
    """A one-node Einsum model; inputs at the positions in ``constant`` are
    initializers. Returns the model, its feed and every operand's array."""
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    names = [f"x{i}" for i in range(len(shapes))]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s))
              for i, (n, s) in enumerate(zip(names, shapes)) if i not in constant]
    inits = [numpy_helper.from_array(arrays[i], names[i]) for i in constant]
    node = helper.make_node("Einsum", names, ["y"], name="the_einsum", equation=equation)
    graph = helper.make_graph([node], "einsum", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feed = {n: a for i, (n, a) in enumerate(zip(names, arrays)) if i not in constant}
    return model, feed, arrays


def run(model, feed):
    """jitnn's output and the step labels of its plan."""
    converted = jitnn.onnx.prepare(model, jitnn.Context(num_threads=1))
    got = converted.run(feed)["y"]
    plan = jitnn.explain(next(iter(converted.dispatch(feed).values())))
    labels = [m.group(1) for m in re.finditer(r"^\s+\d+\s+(.+?)\s+\S+ -> \S+", plan, re.M)]
    return got, labels


def check(equation, shapes, constant=(), seed=0):
    model, feed, arrays = einsum_model(equation, shapes, constant, seed)
    got, labels = run(model, feed)
    want = np.einsum(equation.replace(" ", ""), *[a.astype(np.float64) for a in arrays])
    assert got.shape == want.shape, (got.shape, want.shape)
    scale = max(float(np.abs(want).max()), 1.0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * scale)
    return labels


@pytest.mark.parametrize("equation, shapes, ops", [
    # attention as exporters write it: scores and context, no transposes of the latter
    ("bhid,bhjd->bhij", [(2, 3, 5, 7), (2, 3, 9, 7)], ["transpose", "matmul"]),
    ("bhij,bhjd->bhid", [(2, 3, 5, 9), (2, 3, 9, 7)], ["matmul"]),
    ("bij,bjk->bik", [(3, 1, 17), (3, 17, 9)], ["matmul"]),
    # (the matmul reads through the reshape to 2-D, and the reshape back to 3-D
    # is taken into its epilogue)
    ("bid,jd->bij", [(2, 5, 7), (9, 7)], ["transpose", "matmul"]),
    ("ij->ji", [(3, 7)], ["transpose"]),
    ("ij->i", [(9, 17)], ["reduce_sum"]),
    ("ii->i", [(7, 7)], ["reshape", "slice"]),
    ("...ii->...i", [(3, 5, 5)], ["reshape", "slice"]),
    ("ij,ij->ij", [(3, 9), (3, 9)], ["mul"]),
    ("i,j->ij", [(3,), (17,)], ["reshape", "mul"]),
    ("ij", [(3, 4)], []),
    ("ji", [(3, 4)], ["transpose"]),
])
def test_exporter_equations_lower_to_few_ops(equation, shapes, ops):
    assert [label for label in check(equation, shapes)] == ops


@pytest.mark.parametrize("equation, shapes", [
    ("i,i", [(9,), (9,)]),
    ("i,i->", [(1,), (1,)]),
    ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]),              # broadcast batch axes
    ("abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 6)]),
    ("iij->j", [(3, 3, 4)]),
    ("ij,jk->", [(3, 4), (4, 5)]),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),          # a bilinear layer
    ("nchw,oc->nohw", [(2, 9, 3, 5), (17, 9)]),              # a 1x1 convolution
    ("b i d , j d -> b i j", [(1, 5, 7), (9, 7)]),
    ("bhqd,bhkd->bhqk", [(1, 1, 1, 1), (1, 1, 3, 1)]),
    ("ijk->kji", [(2, 3, 4)]),
    ("bij->", [(2, 3, 4)]),
])
def test_other_equations_match_numpy(equation, shapes):
    check(equation, shapes)


def test_a_constant_operand_is_arranged_at_load_time():
    """``"bid,jd->bij"`` with a constant weight: transposed once with numpy, no
    transpose at run time; all-constant Einsum folds."""
    labels = check("bid,jd->bij", [(2, 5, 7), (9, 7)], constant=(1,))
    assert "transpose" not in labels and labels.count("matmul") == 1, labels
    model, feed, arrays = einsum_model("ij,jk->ik", [(3, 4), (4, 5)], constant=(0, 1))
    converted = jitnn.onnx.prepare(model)
    np.testing.assert_allclose(converted.constant_outputs["y"], arrays[0] @ arrays[1],
                               rtol=1e-6)


def test_onnx_node_cases_in_float32():
    """ONNX's Einsum node tests (float64 in the suite) with their data in float32."""
    cases = [c for c in node_cases("Einsum") if c[2][0].dtype == np.float64
             and c[0] != "test_einsum_scalar"]
    assert len(cases) >= 5
    for name, node, inputs, outputs in cases:
        equation = node.attribute[0].s.decode()
        labels = check(equation, [a.shape for a in inputs])
        assert labels is not None, name


@pytest.mark.parametrize("equation, shapes, message", [
    ("ij,jk->ik", [(3, 4)], r"equation 'ij,jk->ik' has 2 input term\(s\) for 1 input"),
    ("ijk->i", [(3, 4)], r"term 'ijk' names 3 axes, its input has 2"),
    ("ij->k", [(3, 4)], r"output letter 'k' is in no input"),
    ("ij->ii", [(3, 4)], r"the output repeats a letter"),
    ("i1->i", [(3, 4)], r"may hold letters and one '...' only"),
    ("ij->i->j", [(3, 4)], r"more than one '->'"),
    ("ij,jk->ik", [(3, 4), (5, 6)], r"letter 'j' is on axes of sizes 4 and 5"),
    ("ii->i", [(3, 4)], r"letter 'i' is on axes of sizes 3 and 4"),
])
def test_broken_equations_are_refused_at_load(equation, shapes, message):
    model, _, _ = einsum_model(equation, shapes)
    with pytest.raises(jitnn.JitnnValueError, match=r"node 'the_einsum' \(Einsum\): .*"
                       + message):
        jitnn.onnx.prepare(model)


def test_a_summed_letter_that_broadcasts_is_refused_naming_the_equation():
    model, _, _ = einsum_model("ij,jk->ik", [(3, 1), (4, 5)])
    with pytest.raises(jitnn.onnx.UnsupportedError,
                       match=r"Einsum \(node 'the_einsum', opset 17\): equation 'ij,jk->ik': "
                             r"letter 'j' is summed over axes of sizes 1 and 4"):
        jitnn.onnx.prepare(model)


def test_integer_operands_are_refused_naming_the_equation():
    node = helper.make_node("Einsum", ["a", "b"], ["y"], name="the_einsum",
                            equation="ij,jk->ik")
    graph = helper.make_graph(
        [node], "einsum", [helper.make_tensor_value_info(n, TensorProto.INT64, [2, 2])
                           for n in ("a", "b")],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(jitnn.onnx.UnsupportedError,
                       match=r"Einsum \(node 'the_einsum', opset 17\): equation 'ij,jk->ik' "
                             r"on int64 tensors"):
        jitnn.onnx.prepare(model)
