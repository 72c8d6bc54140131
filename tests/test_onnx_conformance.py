"""ONNX conformance through the jitnn ONNX frontend (``jitnn.onnx.backend``).

Two external oracles: ONNX's node tests for the ops the frontend covers
(built in memory by ``onnx.backend.test.case.node``, see tests/onnx_cases.py)
and the models shipped in the onnx package: the PyTorch-generated ones
(``onnx/backend/test/data/pytorch-converted`` and ``pytorch-operator``) and
those of the sequence ops (``simple/test_sequence_model*``).
Every case either passes (ONNX's tolerances: the case's rtol/atol for node
tests, rtol 1e-3 / atol 1e-7 for the PyTorch models, dtypes equal) or is in
:data:`UNSUPPORTED` with its reason, and then must fail with a clear
``jitnn.onnx.UnsupportedError`` at load time: a listed case that starts
passing fails the test too, so the list stays true. docs/onnx.md has the counts.
"""

import glob
import os
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX tests need onnx (in the test extra: pip install -e \".[test]\")")

import jitnn.onnx  # noqa: E402
from jitnn.onnx import backend  # noqa: E402

#: the ONNX ops whose node tests run here (the frontend's op list)
OP_TYPES = (
    "Conv", "ConvTranspose", "Gemm", "MatMul", "Relu", "Clip", "Sigmoid", "Tanh", "LeakyRelu",
    "HardSigmoid", "HardSwish", "Add", "Sub", "Mul", "Div", "Sum", "Max", "Min", "Mean",
    "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "BatchNormalization",
    "Concat", "Flatten", "Reshape", "Transpose", "Softmax", "LRN", "Dropout", "Identity",
    "Constant", "ConstantOfShape", "Shape", "Gather", "Unsqueeze", "Squeeze", "Cast", "CastLike",
    "LogSoftmax",
    "Slice", "Split", "Expand", "Tile", "Pad", "Range",
    "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin",
    "Erf", "Pow", "Sqrt", "Exp", "Log", "Sin", "Cos", "Tan", "Abs", "Neg", "Ceil", "Floor",
    "Reciprocal", "Sign", "Round", "IsNaN", "IsInf", "Mod",
    "Not", "And", "Or", "Xor", "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual",
    "Where", "Elu", "Selu", "Softplus", "Softsign", "PRelu", "Gelu",
    "Resize", "LayerNormalization", "InstanceNormalization", "GroupNormalization", "CumSum",
    "Trilu",
    "GatherElements", "GatherND", "ScatterElements", "ScatterND", "Einsum", "OneHot",
    "LSTM", "GRU", "RNN", "GridSample", "TopK", "Col2Im", "EyeLike",
    "DepthToSpace", "SpaceToDepth",
    "If", "Loop", "Scan", "SequenceInsert", "SplitToSequence",
)

#: reason -> the cases (``node/<test>``, ``pytorch-converted/<dir>``,
#: ``pytorch-operator/<dir>``) that jitnn does not run
UNSUPPORTED = {
    'float8 / float4 / int4 / int2 data types': (
        'node/test_cast_FLOAT4E2M1_to_FLOAT',
        'node/test_cast_FLOAT4E2M1_to_FLOAT16',
        'node/test_cast_FLOAT8E4M3FNUZ_to_FLOAT',
        'node/test_cast_FLOAT8E4M3FNUZ_to_FLOAT16',
        'node/test_cast_FLOAT8E4M3FN_to_FLOAT',
        'node/test_cast_FLOAT8E4M3FN_to_FLOAT16',
        'node/test_cast_FLOAT8E5M2FNUZ_to_FLOAT',
        'node/test_cast_FLOAT8E5M2FNUZ_to_FLOAT16',
        'node/test_cast_FLOAT8E5M2_to_FLOAT',
        'node/test_cast_FLOAT8E5M2_to_FLOAT16',
        'node/test_cast_FLOAT_to_FLOAT4E2M1',
        'node/test_cast_FLOAT_to_FLOAT8E4M3FN',
        'node/test_cast_FLOAT_to_FLOAT8E4M3FNUZ',
        'node/test_cast_FLOAT_to_FLOAT8E5M2',
        'node/test_cast_FLOAT_to_FLOAT8E5M2FNUZ',
        'node/test_cast_FLOAT_to_INT2',
        'node/test_cast_FLOAT_to_INT4',
        'node/test_cast_FLOAT_to_UINT2',
        'node/test_cast_FLOAT_to_UINT4',
        'node/test_cast_INT2_to_FLOAT',
        'node/test_cast_INT2_to_FLOAT16',
        'node/test_cast_INT2_to_INT8',
        'node/test_cast_INT4_to_FLOAT',
        'node/test_cast_INT4_to_FLOAT16',
        'node/test_cast_INT4_to_INT8',
        'node/test_cast_UINT2_to_FLOAT',
        'node/test_cast_UINT2_to_FLOAT16',
        'node/test_cast_UINT2_to_UINT8',
        'node/test_cast_UINT4_to_FLOAT',
        'node/test_cast_UINT4_to_FLOAT16',
        'node/test_cast_UINT4_to_UINT8',
        'node/test_cast_e8m0_FLOAT8E8M0_to_FLOAT',
        'node/test_cast_e8m0_FLOAT8E8M0_to_FLOAT16',
        'node/test_cast_e8m0_FLOAT_to_FLOAT8E8M0',
        'node/test_cast_no_saturate_FLOAT_to_FLOAT8E4M3FN',
        'node/test_cast_no_saturate_FLOAT_to_FLOAT8E4M3FNUZ',
        'node/test_cast_no_saturate_FLOAT_to_FLOAT8E5M2',
        'node/test_cast_no_saturate_FLOAT_to_FLOAT8E5M2FNUZ',
        'node/test_castlike_FLOAT4E2M1_to_FLOAT',
        'node/test_castlike_FLOAT4E2M1_to_FLOAT16',
        'node/test_castlike_FLOAT4E2M1_to_FLOAT16_expanded',
        'node/test_castlike_FLOAT4E2M1_to_FLOAT_expanded',
        'node/test_castlike_FLOAT8E4M3FNUZ_to_FLOAT',
        'node/test_castlike_FLOAT8E4M3FNUZ_to_FLOAT16',
        'node/test_castlike_FLOAT8E4M3FNUZ_to_FLOAT16_expanded',
        'node/test_castlike_FLOAT8E4M3FNUZ_to_FLOAT_expanded',
        'node/test_castlike_FLOAT8E4M3FN_to_FLOAT',
        'node/test_castlike_FLOAT8E4M3FN_to_FLOAT16',
        'node/test_castlike_FLOAT8E4M3FN_to_FLOAT16_expanded',
        'node/test_castlike_FLOAT8E4M3FN_to_FLOAT_expanded',
        'node/test_castlike_FLOAT8E5M2FNUZ_to_FLOAT',
        'node/test_castlike_FLOAT8E5M2FNUZ_to_FLOAT16',
        'node/test_castlike_FLOAT8E5M2FNUZ_to_FLOAT16_expanded',
        'node/test_castlike_FLOAT8E5M2FNUZ_to_FLOAT_expanded',
        'node/test_castlike_FLOAT8E5M2_to_FLOAT',
        'node/test_castlike_FLOAT8E5M2_to_FLOAT16',
        'node/test_castlike_FLOAT8E5M2_to_FLOAT16_expanded',
        'node/test_castlike_FLOAT8E5M2_to_FLOAT_expanded',
        'node/test_castlike_FLOAT_to_FLOAT4E2M1',
        'node/test_castlike_FLOAT_to_FLOAT4E2M1_expanded',
        'node/test_castlike_FLOAT_to_FLOAT8E4M3FN',
        'node/test_castlike_FLOAT_to_FLOAT8E4M3FNUZ',
        'node/test_castlike_FLOAT_to_FLOAT8E4M3FNUZ_expanded',
        'node/test_castlike_FLOAT_to_FLOAT8E4M3FN_expanded',
        'node/test_castlike_FLOAT_to_FLOAT8E5M2',
        'node/test_castlike_FLOAT_to_FLOAT8E5M2FNUZ',
        'node/test_castlike_FLOAT_to_FLOAT8E5M2FNUZ_expanded',
        'node/test_castlike_FLOAT_to_FLOAT8E5M2_expanded',
        'node/test_castlike_FLOAT_to_INT2',
        'node/test_castlike_FLOAT_to_INT2_expanded',
        'node/test_castlike_FLOAT_to_INT4',
        'node/test_castlike_FLOAT_to_INT4_expanded',
        'node/test_castlike_FLOAT_to_UINT2',
        'node/test_castlike_FLOAT_to_UINT2_expanded',
        'node/test_castlike_FLOAT_to_UINT4',
        'node/test_castlike_FLOAT_to_UINT4_expanded',
        'node/test_castlike_INT2_to_FLOAT',
        'node/test_castlike_INT2_to_FLOAT16',
        'node/test_castlike_INT2_to_FLOAT16_expanded',
        'node/test_castlike_INT2_to_FLOAT_expanded',
        'node/test_castlike_INT2_to_INT8',
        'node/test_castlike_INT2_to_INT8_expanded',
        'node/test_castlike_INT4_to_FLOAT',
        'node/test_castlike_INT4_to_FLOAT16',
        'node/test_castlike_INT4_to_FLOAT16_expanded',
        'node/test_castlike_INT4_to_FLOAT_expanded',
        'node/test_castlike_INT4_to_INT8',
        'node/test_castlike_INT4_to_INT8_expanded',
        'node/test_castlike_UINT2_to_FLOAT',
        'node/test_castlike_UINT2_to_FLOAT16',
        'node/test_castlike_UINT2_to_FLOAT16_expanded',
        'node/test_castlike_UINT2_to_FLOAT_expanded',
        'node/test_castlike_UINT2_to_UINT8',
        'node/test_castlike_UINT2_to_UINT8_expanded',
        'node/test_castlike_UINT4_to_FLOAT',
        'node/test_castlike_UINT4_to_FLOAT16',
        'node/test_castlike_UINT4_to_FLOAT16_expanded',
        'node/test_castlike_UINT4_to_FLOAT_expanded',
        'node/test_castlike_UINT4_to_UINT8',
        'node/test_castlike_UINT4_to_UINT8_expanded',
        'node/test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FN',
        'node/test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FNUZ',
        'node/test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FNUZ_expanded',
        'node/test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FN_expanded',
        'node/test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2',
        'node/test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2FNUZ',
        'node/test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2FNUZ_expanded',
        'node/test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2_expanded',
    ),
    'float16 data (jitnn computes in float32 and rejects other float types rather than round silently)': (
        'node/test_cast_FLOAT16_to_DOUBLE',
        'node/test_cast_FLOAT16_to_FLOAT',
        'node/test_cast_FLOAT16_to_FLOAT4E2M1',
        'node/test_cast_FLOAT16_to_FLOAT8E4M3FN',
        'node/test_cast_FLOAT16_to_FLOAT8E4M3FNUZ',
        'node/test_cast_FLOAT16_to_FLOAT8E5M2',
        'node/test_cast_FLOAT16_to_FLOAT8E5M2FNUZ',
        'node/test_cast_FLOAT16_to_INT2',
        'node/test_cast_FLOAT16_to_INT4',
        'node/test_cast_FLOAT16_to_UINT2',
        'node/test_cast_FLOAT16_to_UINT4',
        'node/test_cast_e8m0_FLOAT16_to_FLOAT8E8M0',
        'node/test_cast_no_saturate_FLOAT16_to_FLOAT8E4M3FN',
        'node/test_cast_no_saturate_FLOAT16_to_FLOAT8E4M3FNUZ',
        'node/test_cast_no_saturate_FLOAT16_to_FLOAT8E5M2',
        'node/test_cast_no_saturate_FLOAT16_to_FLOAT8E5M2FNUZ',
        'node/test_castlike_FLOAT16_to_DOUBLE',
        'node/test_castlike_FLOAT16_to_DOUBLE_expanded',
        'node/test_castlike_FLOAT16_to_FLOAT',
        'node/test_castlike_FLOAT16_to_FLOAT4E2M1',
        'node/test_castlike_FLOAT16_to_FLOAT4E2M1_expanded',
        'node/test_castlike_FLOAT16_to_FLOAT8E4M3FN',
        'node/test_castlike_FLOAT16_to_FLOAT8E4M3FNUZ',
        'node/test_castlike_FLOAT16_to_FLOAT8E4M3FNUZ_expanded',
        'node/test_castlike_FLOAT16_to_FLOAT8E4M3FN_expanded',
        'node/test_castlike_FLOAT16_to_FLOAT8E5M2',
        'node/test_castlike_FLOAT16_to_FLOAT8E5M2FNUZ',
        'node/test_castlike_FLOAT16_to_FLOAT8E5M2FNUZ_expanded',
        'node/test_castlike_FLOAT16_to_FLOAT8E5M2_expanded',
        'node/test_castlike_FLOAT16_to_FLOAT_expanded',
        'node/test_castlike_FLOAT16_to_INT2',
        'node/test_castlike_FLOAT16_to_INT2_expanded',
        'node/test_castlike_FLOAT16_to_INT4',
        'node/test_castlike_FLOAT16_to_INT4_expanded',
        'node/test_castlike_FLOAT16_to_UINT2',
        'node/test_castlike_FLOAT16_to_UINT2_expanded',
        'node/test_castlike_FLOAT16_to_UINT4',
        'node/test_castlike_FLOAT16_to_UINT4_expanded',
        'node/test_castlike_FLOAT_to_FLOAT16',
        'node/test_castlike_FLOAT_to_FLOAT16_expanded',
        'node/test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FN',
        'node/test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FNUZ',
        'node/test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FNUZ_expanded',
        'node/test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FN_expanded',
        'node/test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2',
        'node/test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2FNUZ',
        'node/test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2FNUZ_expanded',
        'node/test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2_expanded',
        'node/test_isinf_float16',
        'node/test_isnan_float16',
        'node/test_max_float16',
        'node/test_min_float16',
        'node/test_mod_float16_mixed_sign_fmod_0',
        'node/test_mod_float_edge_cases_fmod_0_float16',
        'node/test_mod_mixed_sign_float16',
        'node/test_range_float16_type_positive_delta',
    ),
    'float64 / bfloat16 data (jitnn computes in float32 and rejects other float types rather than round silently)': (
        'node/test_cast_BFLOAT16_to_FLOAT',
        'node/test_cast_DOUBLE_to_FLOAT',
        'node/test_cast_DOUBLE_to_FLOAT16',
        'node/test_castlike_BFLOAT16_to_FLOAT',
        'node/test_castlike_BFLOAT16_to_FLOAT_expanded',
        'node/test_castlike_DOUBLE_to_FLOAT',
        'node/test_castlike_DOUBLE_to_FLOAT16',
        'node/test_castlike_DOUBLE_to_FLOAT16_expanded',
        'node/test_castlike_DOUBLE_to_FLOAT_expanded',
        'node/test_castlike_FLOAT_to_BFLOAT16',
        'node/test_castlike_FLOAT_to_BFLOAT16_expanded',
        'node/test_castlike_FLOAT_to_DOUBLE',
        'node/test_castlike_FLOAT_to_DOUBLE_expanded',
        'node/test_einsum_batch_diagonal',
        'node/test_einsum_batch_matmul',
        'node/test_einsum_batch_matmul_bfloat16',
        'node/test_einsum_inner_prod',
        'node/test_einsum_scalar',
        'node/test_einsum_sum',
        'node/test_einsum_sum_bfloat16',
        'node/test_einsum_transpose',
        'node/test_einsum_transpose_bfloat16',
        'node/test_cumsum_1d',
        'node/test_cumsum_1d_exclusive',
        'node/test_cumsum_1d_reverse',
        'node/test_cumsum_1d_reverse_exclusive',
        'node/test_cumsum_2d_axis_0',
        'node/test_cumsum_2d_axis_1',
        'node/test_cumsum_2d_negative_axis',
        'node/test_max_float64',
        'node/test_min_float64',
        'node/test_mod_float64_mixed_sign_fmod_0',
        'node/test_mod_float_edge_cases_fmod_0_float64',
        'node/test_mod_mixed_sign_float64',
        'node/test_onehot_with_bfloat16_values',
        'node/test_range_bfloat16_type_positive_delta',
        'node/test_reduce_log_sum_exp_default_axes_keepdims_example',
        'node/test_reduce_log_sum_exp_default_axes_keepdims_random',
        'node/test_reduce_log_sum_exp_do_not_keepdims_example',
        'node/test_reduce_log_sum_exp_do_not_keepdims_random',
        'node/test_reduce_log_sum_exp_keepdims_example',
        'node/test_reduce_log_sum_exp_keepdims_random',
        'node/test_reduce_log_sum_exp_negative_axes_keepdims_example',
        'node/test_reduce_log_sum_exp_negative_axes_keepdims_random',
        'pytorch-operator/test_operator_add_broadcast',
        'pytorch-operator/test_operator_add_size1_broadcast',
        'pytorch-operator/test_operator_add_size1_right_broadcast',
        'pytorch-operator/test_operator_add_size1_singleton_broadcast',
        'pytorch-operator/test_operator_addconstant',
        'simple/test_sequence_model7',
    ),
    "ScatterElements / ScatterND with a reduction (add, mul, max, min): jitnn's scatters replace": (
        'node/test_scatter_elements_with_duplicate_indices',
        'node/test_scatter_elements_with_reduction_max',
        'node/test_scatter_elements_with_reduction_min',
        'node/test_scatter_elements_with_reduction_mul',
        'node/test_scatternd_add',
        'node/test_scatternd_max',
        'node/test_scatternd_max_with_element_indices',
        'node/test_scatternd_min',
        'node/test_scatternd_min_with_element_indices',
        'node/test_scatternd_multiply',
    ),
    'random Dropout (training mode): jitnn runs inference': (
        'node/test_training_dropout',
        'node/test_training_dropout_default',
        'node/test_training_dropout_default_mask',
        'node/test_training_dropout_mask',
        'node/test_training_dropout_zero_ratio',
        'node/test_training_dropout_zero_ratio_mask',
    ),
    'a Cast to float16 / float64 / bfloat16 (jitnn computes in float32 and rejects other float types rather than round silently)': (
        'node/test_cast_FLOAT_to_BFLOAT16',
        'node/test_cast_FLOAT_to_DOUBLE',
        'node/test_cast_FLOAT_to_FLOAT16',
    ),
    'opset 1 models (jitnn loads opset 6 and newer)': (
        'node/test_not_2d',
        'node/test_not_3d',
        'node/test_not_4d',
    ),
    'string data': (
        'node/test_equal_string',
        'node/test_equal_string_broadcast',
    ),
    'GridSample: bicubic sampling and volumes (jitnn samples 2-D grids bilinearly or by the nearest pixel)': (
        'node/test_gridsample_bicubic',
        'node/test_gridsample_bicubic_align_corners_0_additional_1',
        'node/test_gridsample_bicubic_align_corners_1_additional_1',
        'node/test_gridsample_volumetric_bilinear_align_corners_0',
        'node/test_gridsample_volumetric_bilinear_align_corners_1',
        'node/test_gridsample_volumetric_nearest_align_corners_0',
        'node/test_gridsample_volumetric_nearest_align_corners_1',
    ),
    'sequence and optional graph inputs and outputs (jitnn keeps sequences while loading)': (
        'node/test_identity_opt',
        'node/test_identity_sequence',
        'node/test_if_opt',
        'node/test_if_seq',
        'node/test_loop13_seq',
        'node/test_loop16_seq_none',
        'node/test_sequence_insert_at_back',
        'node/test_sequence_insert_at_front',
        'node/test_split_to_sequence_1',
        'node/test_split_to_sequence_2',
        'node/test_split_to_sequence_nokeepdims',
    ),
    "Scan before opset 9 (its batched form with sequence_lens)": (
        'node/test_scan_sum',
    ),
    "MaxPool's Indices output": (
        'node/test_maxpool_with_argmax_2d_precomputed_pads',
        'node/test_maxpool_with_argmax_2d_precomputed_strides',
    ),
}

UNSUPPORTED_CASES = {case: reason for reason, cases in UNSUPPORTED.items() for case in cases}


def _node_cases():
    from tests.onnx_cases import _all_node_cases
    cases = {}
    for case in _all_node_cases():
        graph = case.model.graph
        if len(graph.node) != 1 or graph.node[0].op_type not in OP_TYPES:
            continue
        for k, (inputs, outputs) in enumerate(case.data_sets):
            name = f"node/{case.name}" + (f"_{k}" if k else "")
            cases[name] = (lambda case=case: case.model, list(inputs), list(outputs),
                           case.rtol, case.atol)
    return cases


def _pytorch_cases():
    """The PyTorch models, and ONNX's models of the sequence ops (``simple``'s
    ``test_sequence_model*``: SequenceEmpty, SequenceConstruct, SequenceAt,
    SequenceErase, SequenceLength, ConcatFromSequence have no one-node tests)."""
    from onnx import numpy_helper
    root = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
    cases = {}
    for kind, pattern in (("pytorch-converted", "test_*"), ("pytorch-operator", "test_*"),
                          ("simple", "test_sequence_model*")):
        for folder in sorted(glob.glob(os.path.join(root, kind, pattern))):
            for k, data_set in enumerate(sorted(glob.glob(os.path.join(folder,
                                                                       "test_data_set_*")))):
                def read(prefix, data_set=data_set):
                    files = sorted(glob.glob(os.path.join(data_set, f"{prefix}_*.pb")))
                    return [numpy_helper.to_array(onnx.load_tensor(f)) for f in files]
                name = f"{kind}/{os.path.basename(folder)}" + (f"_{k}" if k else "")
                cases[name] = (lambda path=os.path.join(folder, "model.onnx"): onnx.load(path),
                               read("input"), read("output"), 1e-3, 1e-7)
    return cases


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    CASES = {**_node_cases(), **_pytorch_cases()}


def run_case(name):
    """Run one case through the backend; returns the number of jitnn ops its
    graph had (0: every output was folded at load time). Raises on a mismatch."""
    load_model, inputs, expected, rtol, atol = CASES[name]
    rep = backend.prepare(load_model())
    outputs = rep.run(inputs)
    assert len(outputs) == len(expected)
    for got, want in zip(outputs, expected):
        np.testing.assert_equal(got.dtype, want.dtype)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    feed = dict(zip(rep.input_names, (np.asarray(a) for a in inputs)))
    return rep.converted(feed).jitnn_ops


@pytest.mark.parametrize("name", sorted(CASES))
def test_conformance_case(name):
    reason = UNSUPPORTED_CASES.get(name)
    if reason is None:
        run_case(name)
        return
    with pytest.raises(jitnn.onnx.UnsupportedError):
        run_case(name)
        pytest.fail(f"{name} is listed as unsupported ({reason}) but passes: remove it "
                    "from UNSUPPORTED")


def test_unsupported_list_names_existing_cases():
    stale = sorted(set(UNSUPPORTED_CASES) - set(CASES))
    assert not stale, f"UNSUPPORTED names cases that do not exist: {stale}"


def test_every_op_type_has_node_cases():
    ops = {CASES[name][0]().graph.node[0].op_type for name in CASES if name.startswith("node/")}
    assert ops == set(OP_TYPES)


def summary():
    """Pass counts per suite (``python -m tests.test_onnx_conformance``)."""
    counts = {}
    for name in sorted(CASES):
        suite = name.split("/")[0]
        row = counts.setdefault(suite, {"cases": 0, "passed": 0, "folded": 0, "unsupported": 0})
        row["cases"] += 1
        if name in UNSUPPORTED_CASES:
            row["unsupported"] += 1
            continue
        ops = run_case(name)
        row["passed"] += 1
        row["folded"] += ops == 0
    return counts


if __name__ == "__main__":
    for suite, row in summary().items():
        print(f"{suite}: {row['cases']} cases, {row['passed']} pass ({row['folded']} of them "
              f"folded at load time, no jitnn op), {row['unsupported']} unsupported")
