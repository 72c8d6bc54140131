"""WebNN's conformance suite: every case of every file in tests/data/wpt (W3C
Web Platform Tests, see tests/data/wpt/README.md), built with
jitnn.GraphBuilder exactly the way WPT's webnn/resources/utils.js drives
MLGraphBuilder, computed with ctx.compute and compared with WPT's tolerances
(tests/wpt.py: the harness, the tolerance rules and where each comes from).

Every case either passes or is in :data:`KNOWN_FAILURES` (at the end of this
module) with its reason, and then must fail: a listed case that starts passing
fails the test too ("now passes: remove it from KNOWN_FAILURES"), so the list
stays true. Regenerate the list after a change to the runtime with

    python -m tests.wpt --failures      # prints the new KNOWN_FAILURES; paste it below

and see the counts per op with ``python -m tests.wpt --summary``.
"""

import math
import re
from pathlib import Path

import numpy as np
import pytest

import jitnn
from jitnn import registry
from tests import wpt
from tests.wpt import FLOAT16

CASES = wpt.cases()

#: a case with more elements than this in one input or output (WPT's "large
#: inputs" add: 6000 x 6000, 144 MB per array, a few seconds) runs under
#: ``pytest -m slow`` only (a float16 one is refused at once: it always runs)
LARGE = 1 << 20


def _size(case: wpt.Case) -> int:
    return max(math.prod(v["descriptor"]["shape"]) for part in ("inputs", "expectedOutputs")
               for v in case.graph[part].values())


def _param(case: wpt.Case):
    marks = [pytest.mark.slow] if _size(case) > LARGE and not case.float16 else []
    return pytest.param(case, id=case.id, marks=marks)


@pytest.fixture(scope="module")
def ctx():
    """One context for every case."""
    return jitnn.Context()


@pytest.mark.parametrize("case", [_param(case) for case in CASES])
def test_case(case, ctx):
    reason = KNOWN_FAILURES.get(case.key)
    if reason is None:
        wpt.run_case(case, ctx)
        return
    with pytest.raises(wpt.CaseFailure):
        wpt.run_case(case, ctx)
        pytest.fail(f"{case.id} now passes: remove it from KNOWN_FAILURES (listed as: {reason})")


# --- the suite covers every file, every case, and its lists stay true -----------------------

def test_every_file_is_run():
    files = {path.name for path in wpt.DATA.glob("*.json")}
    assert len(files) == 60
    assert {case.file for case in CASES} == files
    for path in wpt.files():
        assert wpt.cases(path), f"{path.name} has no case"


def _readme_table() -> dict[str, tuple[int, int]]:
    """{file: (cases, float32 cases)} from tests/data/wpt/README.md's table."""
    text = (wpt.DATA / "README.md").read_text()
    rows = re.findall(r"^\| (wpt_\w+\.json) \| \w+ \| (\d+) \| (\d+) \|$", text, re.MULTILINE)
    return {name: (int(total), int(float32)) for name, total, float32 in rows}


def test_case_counts_match_the_readme():
    table = _readme_table()
    assert set(table) == {path.name for path in wpt.files()}
    for path in wpt.files():
        cases = wpt.cases(path)
        # the README counts a case as float32 when its name says so
        counted = (len(cases), sum("float32" in case.name for case in cases))
        assert counted == table[path.name], f"{path.name}: {counted}, README {table[path.name]}"
    assert sum(total for total, _ in table.values()) == len(CASES) == 1551


def test_known_failures_name_existing_cases():
    stale = sorted(set(KNOWN_FAILURES) - {case.key for case in CASES})
    assert not stale, f"KNOWN_FAILURES names cases that do not exist: {stale}"


def test_float16_and_wrong_data_are_listed_with_their_reasons():
    for case in CASES:
        if case.float16:
            assert KNOWN_FAILURES.get(case.key) == FLOAT16, case.id
    for key, reason in wpt.WRONG_DATA.items():
        assert KNOWN_FAILURES.get(key) == reason, key


def test_known_failures_are_in_the_generated_form():
    """The dict below is what ``python -m tests.wpt --failures`` prints for it
    (sorted, grouped by op): pasting a new list is the way to change it."""
    source = Path(__file__).read_text()
    start = source.index("\nKNOWN_FAILURES = {\n") + 1
    listed = source[start:source.index("\n}\n", start) + 2]
    assert listed == wpt.failures_source(KNOWN_FAILURES), \
        "KNOWN_FAILURES is not in its generated form: run python -m tests.wpt --failures"


# --- the harness: names, tolerances, ULP --------------------------------------------------

def test_op_and_option_names_are_snake_case():
    assert wpt.snake_case("inputLayout") == "input_layout"
    assert wpt.snake_case("keepDimensions") == "keep_dimensions"
    assert wpt.snake_case("convTranspose2d") == "conv_transpose2d"
    assert wpt.snake_case("reduceLogSumExp") == "reduce_log_sum_exp"
    assert wpt.snake_case("lesserOrEqual") == "lesser_or_equal"
    assert wpt.snake_case("reduceL1") == "reduce_l1"
    assert wpt.snake_case("l2Pool2d") == "l2_pool2d"
    assert wpt.builder_method("max") == "maximum"
    assert wpt.builder_method("reduceMean") == "reduce_mean"


def test_aliases_are_the_registrys():
    """ALIASES lists every registered op whose WebNN name is not its jitnn
    name in snake_case, as the registry names it (builder_method asks the
    registry first; an alias may name an op that is not registered yet)."""
    renamed = {op.webnn: op.name for op in registry.ops()
               if op.webnn and wpt.snake_case(op.webnn) != op.name}
    assert renamed.items() <= wpt.ALIASES.items(), \
        f"document these in tests/wpt.py's ALIASES: {renamed.items() - wpt.ALIASES.items()}"
    for webnn, name in wpt.ALIASES.items():
        assert wpt.snake_case(webnn) != name, f"{webnn} -> {name} is mechanical: no alias"


def test_ulp_distance():
    f = np.float32
    one_up = np.nextafter(f(1), f(2))
    got = np.array([1, one_up, 0.0, -0.0, np.nan, np.inf, -np.inf, 1e-45, np.nan, np.inf], f)
    want = np.array([1, 1, -0.0, 0.0, np.nan, np.inf, -np.inf, -1e-45, 1, np.finfo(f).max], f)
    distance = wpt.ulp_distance(got, want)
    assert distance.tolist()[:8] == [0, 1, 0, 0, 0, 0, 0, 2]
    assert distance[8] >= wpt.FAR and distance[9] >= wpt.FAR      # NaN, inf: never close
    assert wpt.ulp_distance(f(1.5), f(1.5)) == 0                    # 0-d arrays too


def test_compare_keeps_the_budget():
    f = np.float32
    want = np.array([1.0, -2.0, 3.0], f)
    three_up = want.copy()
    three_up[1] = np.nextafter(np.nextafter(np.nextafter(want[1], f(-3)), f(-3)), f(-3))
    wpt.compare("y", three_up, want, "ULP", 3)
    with pytest.raises(wpt.CaseFailure, match=r"1 of 3 values beyond 2 ULP"):
        wpt.compare("y", three_up, want, "ULP", 2)
    with pytest.raises(wpt.CaseFailure, match="values differ"):
        wpt.compare("y", np.array([1, 2], np.int64), np.array([1, 3], np.int64), "ULP", 1000)
    wpt.compare("y", want + f(5e-4), want, "ATOL", 1 / 1024)
    with pytest.raises(wpt.CaseFailure, match="shape"):
        wpt.compare("y", want[:2], want, "ULP", 0)


def test_tolerances_follow_wpt():
    conv = wpt.tolerance("conv2d", [(1, 5, 5, 4), (3, 3, 2, 6)],
                         {"inputLayout": "nhwc", "filterLayout": "hwio", "groups": 2}, [])
    assert conv == ("ULP", 3 * 3 * (4 / 2) * 2)
    assert wpt.tolerance("convTranspose2d", [(1, 3, 4, 4), (3, 2, 5, 5)], {}, []) == \
        ("ULP", 5 * 5 * 3 * 2)
    assert wpt.tolerance("matmul", [(2, 3, 7), (7, 4)], {}, []) == ("ULP", 14)
    assert wpt.tolerance("softmax", [(3, 5)], {}, [1]) == ("ULP", 18)
    assert wpt.tolerance("averagePool2d", [(1, 2, 4, 6)], {}, []) == ("ULP", 26)
    assert wpt.tolerance("l2Pool2d", [(1, 4, 6, 2)], {"layout": "nhwc"}, []) == ("ULP", 26)
    assert wpt.tolerance("reduceSum", [(2, 3, 4)], {}, []) == ("ULP", 24)
    assert wpt.tolerance("reduceL2", [(2, 3, 4)], {"axes": [0, 2]}, []) == ("ULP", 18)
    assert wpt.tolerance("reduceLogSumExp", [(2, 3)], {"axes": []}, []) == ("ULP", 20)
    assert wpt.tolerance("reduceMax", [(2, 3)], {}, []) == ("ULP", 0)
    assert wpt.tolerance("layerNormalization", [(2, 3)], {}, []) == ("ATOL", 1 / 1024)
    assert wpt.tolerance("sigmoid", [(2, 3)], {}, []) == ("ULP", 34)
    assert wpt.graph_tolerance([("ULP", 1), ("ULP", 34)]) == ("ULP", 35)
    with pytest.raises(KeyError, match="no WPT tolerance"):
        wpt.tolerance("someNewOp", [(1,)], {}, [])


def test_values_as_webnn_reads_them():
    case = next(c for c in CASES if c.key == ("clamp", "minValue as Infinity"))
    x = wpt.array(case, "clampInput", case.graph["inputs"]["clampInput"])
    assert x.dtype == np.float32 and x[:2].tolist() == [-np.inf, np.inf]
    assert wpt.option_value(case, "minValue", None) == np.inf
    y = wpt.array(case, "clampOutput", case.graph["expectedOutputs"]["clampOutput"])
    assert np.all(y == np.inf)
    big = next(c for c in CASES if c.key == ("clamp", "clamp int64 1D tensor with bigint max"))
    assert wpt.array(big, "clampInput", big.graph["inputs"]["clampInput"])[1] == 9007199254740995
    assert wpt.option_value(big, "maxValue", "9007199254740992n") == 9007199254740992
    large = next(c for c in CASES if c.key == ("add", "add float32 large inputs"))
    a = wpt.array(large, "inputA", {"data": 1.5, "descriptor": {"shape": [3, 4],
                                                               "dataType": "float32"}})
    assert a.shape == (3, 4) and np.all(a == 1.5)


# --- the cases that fail today, and why ---------------------------------------------------
# Generated by `python -m tests.wpt --failures` (paste its output over this
# dict); FLOAT16 and the l2_pool2d cases of tests.wpt.WRONG_DATA stay listed
# whatever the runtime does.

KNOWN_FAILURES = {
    # --- abs
    ('abs', 'abs float16 1D constant tensor'): FLOAT16,
    ('abs', 'abs float16 1D tensor'): FLOAT16,
    ('abs', 'abs float16 2D tensor'): FLOAT16,
    ('abs', 'abs float16 3D tensor'): FLOAT16,
    ('abs', 'abs float16 4D tensor'): FLOAT16,
    ('abs', 'abs float16 5D tensor'): FLOAT16,
    ('abs', 'abs float16 6D tensor'): FLOAT16,
    ('abs', 'abs float16 negative 0D scalar'): FLOAT16,
    ('abs', 'abs float16 positive 0D scalar'): FLOAT16,
    # --- add
    ('add', 'add float16 1D constant tensors'): FLOAT16,
    ('add', 'add float16 1D tensors'): FLOAT16,
    ('add', 'add float16 2D tensors'): FLOAT16,
    ('add', 'add float16 3D tensors'): FLOAT16,
    ('add', 'add float16 4D tensors'): FLOAT16,
    ('add', 'add float16 5D tensors'): FLOAT16,
    ('add', 'add float16 broadcast 1D to 4D'): FLOAT16,
    ('add', 'add float16 broadcast 2D to 4D'): FLOAT16,
    ('add', 'add float16 broadcast 3D to 4D'): FLOAT16,
    ('add', 'add float16 broadcast 4D to 4D'): FLOAT16,
    ('add', 'add float16 large inputs'): FLOAT16,
    # --- batch_normalization
    ('batch_normalization', 'batchNormalization float16 1D tensor options.axis=0'): FLOAT16,
    ('batch_normalization', 'batchNormalization float16 2D tensor (mean and variance are non-constant) default options'):
        FLOAT16,
    ('batch_normalization', 'batchNormalization float16 2D tensor default options'): FLOAT16,
    ('batch_normalization', 'batchNormalization float16 3D tensor default options'): FLOAT16,
    ('batch_normalization', 'batchNormalization float16 4D NCHW tensor options.axis=1'): FLOAT16,
    ('batch_normalization', 'batchNormalization float16 4D NCHW tensor options.bias'): FLOAT16,
    ('batch_normalization', 'batchNormalization float16 4D NCHW tensor options.epsilon'): FLOAT16,
    ('batch_normalization', 'batchNormalization float16 4D NCHW tensor options.scale'): FLOAT16,
    ('batch_normalization', 'batchNormalization float16 4D NHWC tensor all options'): FLOAT16,
    ('batch_normalization', 'batchNormalization float16 4D NHWC tensor options.axis=3'): FLOAT16,
    ('batch_normalization', 'batchNormalization float16 4D tensor default options'): FLOAT16,
    ('batch_normalization', 'batchNormalization float16 5D tensor default options'): FLOAT16,
    # --- cast
    ('cast', 'cast float16 4D tensor to float32'): FLOAT16,
    ('cast', 'cast float16 4D tensor to int32'): FLOAT16,
    ('cast', 'cast float16 4D tensor to int64'): FLOAT16,
    ('cast', 'cast float16 4D tensor to int8'): FLOAT16,
    ('cast', 'cast float16 4D tensor to uint32'): FLOAT16,
    ('cast', 'cast float16 4D tensor to uint8'): FLOAT16,
    ('cast', 'cast float32 4D tensor to float16'): FLOAT16,
    ('cast', 'cast int32 4D tensor to float16'): FLOAT16,
    ('cast', 'cast int64 4D tensor to float16'): FLOAT16,
    ('cast', 'cast int8 4D tensor to float16'): FLOAT16,
    ('cast', 'cast uint32 4D tensor to float16'): FLOAT16,
    ('cast', 'cast uint8 4D tensor to float16'): FLOAT16,
    # --- ceil
    ('ceil', 'ceil float16 0D scalar'): FLOAT16,
    ('ceil', 'ceil float16 1D constant tensor'): FLOAT16,
    ('ceil', 'ceil float16 1D tensor'): FLOAT16,
    ('ceil', 'ceil float16 2D tensor'): FLOAT16,
    ('ceil', 'ceil float16 3D tensor'): FLOAT16,
    ('ceil', 'ceil float16 4D tensor'): FLOAT16,
    ('ceil', 'ceil float16 5D tensor'): FLOAT16,
    # --- clamp
    ('clamp', 'clamp float16 0D tensor default options'): FLOAT16,
    ('clamp', 'clamp float16 1D constant tensor default options'): FLOAT16,
    ('clamp', 'clamp float16 1D tensor'): FLOAT16,
    ('clamp', 'clamp float16 1D tensor default options'): FLOAT16,
    ('clamp', 'clamp float16 1D tensor default options.minValue and specified options.maxValue=0.0'):
        FLOAT16,
    ('clamp', 'clamp float16 1D tensor specified both positive options.minValue and options.maxValue'):
        FLOAT16,
    ('clamp', 'clamp float16 2D tensor default options'): FLOAT16,
    ('clamp', 'clamp float16 2D tensor default options.maxValue and specified positive options.minValue'):
        FLOAT16,
    ('clamp', 'clamp float16 2D tensor specified options.minValue=0.0 and positive options.maxValue'):
        FLOAT16,
    ('clamp', 'clamp float16 3D tensor default options'): FLOAT16,
    ('clamp', 'clamp float16 3D tensor default options.maxValue and specified options.minValue=0.0'):
        FLOAT16,
    ('clamp', 'clamp float16 3D tensor default options.minValue and specified positive options.maxValue'):
        FLOAT16,
    ('clamp', 'clamp float16 3D tensor specified negative options.minValue and positive options.maxValue'):
        FLOAT16,
    ('clamp', 'clamp float16 4D tensor default options'): FLOAT16,
    ('clamp', 'clamp float16 4D tensor default options.maxValue and specified negative options.minValue'):
        FLOAT16,
    ('clamp', 'clamp float16 4D tensor specified negative options.minValue and options.maxValue=0.0'):
        FLOAT16,
    ('clamp', 'clamp float16 5D tensor default options'): FLOAT16,
    ('clamp', 'clamp float16 5D tensor default options.minValue and specified negative options.maxValue'):
        FLOAT16,
    ('clamp', 'clamp float16 5D tensor specified both negative options.minValue and options.maxValue'):
        FLOAT16,
    ('clamp', 'clamp uint64 1D tensor with Number min and max'): 'uint64 is not a jitnn data type',
    ('clamp', 'clamp uint64 1D tensor with bigint max'): 'uint64 is not a jitnn data type',
    # --- concat
    ('concat', 'concat four float16 1D tensors of different 1st dimension along axis 0'): FLOAT16,
    ('concat', 'concat four float16 1D tensors of same 1st dimension along axis 0'): FLOAT16,
    ('concat', 'concat four float16 2D tensors of same others dimensions except different 2nd dimension along axis 1'):
        FLOAT16,
    ('concat', 'concat four float16 2D tensors of same shape along axis 0'): FLOAT16,
    ('concat', 'concat four float16 3D tensors of same others dimensions except different 2nd dimension along axis 1'):
        FLOAT16,
    ('concat', 'concat four float16 4D tensors of same others dimensions except different 4th dimension along axis 3'):
        FLOAT16,
    ('concat', 'concat four float16 5D tensors of same shape along axis 0'): FLOAT16,
    ('concat', 'concat three float16 1D tensors of different 1st dimension along axis 0'): FLOAT16,
    ('concat', 'concat three float16 2D tensors of same shape along axis 1'): FLOAT16,
    ('concat', 'concat three float16 3D tensors of same shape along axis 2'): FLOAT16,
    ('concat', 'concat three float16 4D tensors of same others dimensions except different 3rd dimension along axis 2'):
        FLOAT16,
    ('concat', 'concat three float16 4D tensors of same shape along axis 1'): FLOAT16,
    ('concat', 'concat three float16 5D tensors of same others dimensions except different 3rd dimension along axis 2'):
        FLOAT16,
    ('concat', 'concat two float16 1D tensors of same shape along axis 0'): FLOAT16,
    ('concat', 'concat two float16 2D tensors of same others dimensions except different 1st dimension along axis 0'):
        FLOAT16,
    ('concat', 'concat two float16 2D tensors of same others dimensions except different 2nd dimension along axis 1'):
        FLOAT16,
    ('concat', 'concat two float16 2D tensors of same shape along axis 0'): FLOAT16,
    ('concat', 'concat two float16 3D tensors of same others dimensions except different 1st dimension along axis 0'):
        FLOAT16,
    ('concat', 'concat two float16 4D tensors of same others dimensions except different 1st dimension along axis 0'):
        FLOAT16,
    ('concat', 'concat two float16 5D tensors of same others dimensions except different 2nd dimension along axis 1'):
        FLOAT16,
    ('concat', 'concat two float16 5D tensors of same others dimensions except different 4th dimension along axis 3'):
        FLOAT16,
    ('concat', 'concat two float16 5D tensors of same others dimensions except different 5th dimension along axis 4'):
        FLOAT16,
    # --- conv2d
    ('conv2d', 'conv2d float16 4D both input and filter constant tensors default options'): FLOAT16,
    ('conv2d', 'conv2d float16 4D both input and filter non-constant tensors default options'):
        FLOAT16,
    ('conv2d', 'conv2d float16 4D input and filter tensors 1D options.bias'): FLOAT16,
    ('conv2d', 'conv2d float16 4D input and filter tensors all options'): FLOAT16,
    ('conv2d', 'conv2d float16 4D input and filter tensors default options'): FLOAT16,
    ('conv2d', 'conv2d float16 4D input and filter tensors options.dilations'): FLOAT16,
    ('conv2d', "conv2d float16 4D input and filter tensors options.filterLayout='hwio'"): FLOAT16,
    ('conv2d', "conv2d float16 4D input and filter tensors options.filterLayout='ihwo'"): FLOAT16,
    ('conv2d', "conv2d float16 4D input and filter tensors options.filterLayout='ohwi'"): FLOAT16,
    ('conv2d', "conv2d float16 4D input and filter tensors options.filterLayout='oihw'"): FLOAT16,
    ('conv2d', "conv2d float16 4D input and filter tensors options.inputLayout='nchw'"): FLOAT16,
    ('conv2d', "conv2d float16 4D input and filter tensors options.inputLayout='nhwc'"): FLOAT16,
    ('conv2d', "conv2d float16 4D input and filter tensors options.inputLayout='nhwc' and options.filterLayout='hwio'"):
        FLOAT16,
    ('conv2d', "conv2d float16 4D input and filter tensors options.inputLayout='nhwc' and options.filterLayout='ihwo'"):
        FLOAT16,
    ('conv2d', "conv2d float16 4D input and filter tensors options.inputLayout='nhwc' and options.filterLayout='ohwi'"):
        FLOAT16,
    ('conv2d', "conv2d float16 4D input and filter tensors options.inputLayout='nhwc' and options.filterLayout='oihw'"):
        FLOAT16,
    ('conv2d', 'conv2d float16 4D input and filter tensors options.padding'): FLOAT16,
    ('conv2d', 'conv2d float16 4D input and filter tensors options.strides'): FLOAT16,
    ('conv2d', 'conv2d float16 4D input and filter tensors, both negative input tensor and options.bias'):
        FLOAT16,
    ('conv2d', 'depthwise conv2d float16 4D input and filter tensors options.groups= input_channels'):
        FLOAT16,
    # --- conv_transpose2d
    ('conv_transpose2d', 'convTranspose2d float16 4D both input and filter constant tensors default options'):
        FLOAT16,
    ('conv_transpose2d', 'convTranspose2d float16 4D both input and filter non-constant tensors default options'):
        FLOAT16,
    ('conv_transpose2d', 'convTranspose2d float16 4D input and filter tensors default options'):
        FLOAT16,
    ('conv_transpose2d', 'convTranspose2d float16 4D input and filter tensors options.bias'):
        FLOAT16,
    ('conv_transpose2d', 'convTranspose2d float16 4D input and filter tensors options.dilations'):
        FLOAT16,
    ('conv_transpose2d', 'convTranspose2d float16 4D input and filter tensors options.filterLayout=hwoi'):
        FLOAT16,
    ('conv_transpose2d', 'convTranspose2d float16 4D input and filter tensors options.filterLayout=iohw'):
        FLOAT16,
    ('conv_transpose2d', 'convTranspose2d float16 4D input and filter tensors options.filterLayout=ohwi'):
        FLOAT16,
    ('conv_transpose2d', 'convTranspose2d float16 4D input and filter tensors options.inputLayout=nchw'):
        FLOAT16,
    ('conv_transpose2d', 'convTranspose2d float16 4D input and filter tensors options.inputLayout=nhwc'):
        FLOAT16,
    ('conv_transpose2d', 'convTranspose2d float16 4D input and filter tensors options.inputLayout=nhwc options.filterLayout=hwoi'):
        FLOAT16,
    ('conv_transpose2d', 'convTranspose2d float16 4D input and filter tensors options.inputLayout=nhwc options.filterLayout=iohw'):
        FLOAT16,
    ('conv_transpose2d', 'convTranspose2d float16 4D input and filter tensors options.inputLayout=nhwc options.filterLayout=ohwi'):
        FLOAT16,
    ('conv_transpose2d', 'convTranspose2d float16 4D input and filter tensors options.outputPadding'):
        FLOAT16,
    ('conv_transpose2d', 'convTranspose2d float16 4D input and filter tensors options.outputSizes'):
        FLOAT16,
    ('conv_transpose2d', 'convTranspose2d float16 4D input and filter tensors options.padding'):
        FLOAT16,
    ('conv_transpose2d', 'convTranspose2d float16 4D input and filter tensors options.strides'):
        FLOAT16,
    ('conv_transpose2d', 'convTranspose2d float16 4D input and filter tensors, both negative input tensor and options.bias'):
        FLOAT16,
    ('conv_transpose2d', 'convTranspose2d float16 input tensors options.padding is the same upper padding'):
        FLOAT16,
    # --- div
    ('div', 'div float16 1D constant tensors'): FLOAT16,
    ('div', 'div float16 1D tensors'): FLOAT16,
    ('div', 'div float16 2D tensors'): FLOAT16,
    ('div', 'div float16 3D tensors'): FLOAT16,
    ('div', 'div float16 4D tensors'): FLOAT16,
    ('div', 'div float16 5D tensors'): FLOAT16,
    ('div', 'div float16 broadcast 1D to 4D'): FLOAT16,
    ('div', 'div float16 broadcast 2D to 4D'): FLOAT16,
    ('div', 'div float16 broadcast 3D to 4D'): FLOAT16,
    ('div', 'div float16 broadcast 4D to 4D'): FLOAT16,
    # --- elu
    ('elu', 'elu float16 1D constant tensor default options'): FLOAT16,
    ('elu', 'elu float16 1D tensor default options'): FLOAT16,
    ('elu', 'elu float16 2D tensor default options'): FLOAT16,
    ('elu', 'elu float16 3D tensor default options'): FLOAT16,
    ('elu', 'elu float16 4D tensor default options'): FLOAT16,
    ('elu', 'elu float16 4D tensor negative options.alpha'): FLOAT16,
    ('elu', 'elu float16 4D tensor positive options.alpha'): FLOAT16,
    ('elu', 'elu float16 5D tensor default options'): FLOAT16,
    ('elu', 'elu float16 negative 0D scalar default options'): FLOAT16,
    ('elu', 'elu float16 positive 0D scalar default options'): FLOAT16,
    # --- equal
    ('equal', 'equal float16 0D scalar'): FLOAT16,
    ('equal', 'equal float16 1D constant tensors'): FLOAT16,
    ('equal', 'equal float16 1D tensors'): FLOAT16,
    ('equal', 'equal float16 2D tensors'): FLOAT16,
    ('equal', 'equal float16 3D tensors'): FLOAT16,
    ('equal', 'equal float16 4D tensors'): FLOAT16,
    ('equal', 'equal float16 5D tensors'): FLOAT16,
    ('equal', 'equal float16 broadcast 0D to 4D'): FLOAT16,
    ('equal', 'equal float16 broadcast 1D to 4D'): FLOAT16,
    ('equal', 'equal float16 broadcast 2D to 4D'): FLOAT16,
    ('equal', 'equal float16 broadcast 3D to 4D'): FLOAT16,
    ('equal', 'equal float16 broadcast 4D to 4D'): FLOAT16,
    # --- exp
    ('exp', 'exp float16 0D scalar'): FLOAT16,
    ('exp', 'exp float16 1D constant tensor'): FLOAT16,
    ('exp', 'exp float16 1D tensor'): FLOAT16,
    ('exp', 'exp float16 2D tensor'): FLOAT16,
    ('exp', 'exp float16 3D tensor'): FLOAT16,
    ('exp', 'exp float16 4D tensor'): FLOAT16,
    ('exp', 'exp float16 5D tensor'): FLOAT16,
    # --- expand
    ('expand', 'expand float16 0D scalar to 1D'): FLOAT16,
    ('expand', 'expand float16 0D scalar to 2D'): FLOAT16,
    ('expand', 'expand float16 0D scalar to 3D'): FLOAT16,
    ('expand', 'expand float16 0D scalar to 4D'): FLOAT16,
    ('expand', 'expand float16 0D scalar to 5D'): FLOAT16,
    ('expand', 'expand float16 1D constant tensor to 1D'): FLOAT16,
    ('expand', 'expand float16 1D tensor to 1D'): FLOAT16,
    ('expand', 'expand float16 1D tensor to 2D'): FLOAT16,
    ('expand', 'expand float16 1D tensor to 3D'): FLOAT16,
    ('expand', 'expand float16 1D tensor to 4D'): FLOAT16,
    ('expand', 'expand float16 1D tensor to 5D'): FLOAT16,
    ('expand', 'expand float16 2D tensor to 2D (1st dimension)'): FLOAT16,
    ('expand', 'expand float16 2D tensor to 2D (2nd dimension)'): FLOAT16,
    ('expand', 'expand float16 2D tensor to 2D (all dimensions)'): FLOAT16,
    ('expand', 'expand float16 2D tensor to 3D'): FLOAT16,
    ('expand', 'expand float16 2D tensor to 4D'): FLOAT16,
    ('expand', 'expand float16 2D tensor to 5D'): FLOAT16,
    ('expand', 'expand float16 3D tensor to 3D'): FLOAT16,
    ('expand', 'expand float16 3D tensor to 4D'): FLOAT16,
    ('expand', 'expand float16 3D tensor to 5D'): FLOAT16,
    ('expand', 'expand float16 4D tensor to 4D'): FLOAT16,
    ('expand', 'expand float16 4D tensor to 5D'): FLOAT16,
    # --- floor
    ('floor', 'floor float16 0D scalar'): FLOAT16,
    ('floor', 'floor float16 1D constant tensor'): FLOAT16,
    ('floor', 'floor float16 1D tensor'): FLOAT16,
    ('floor', 'floor float16 2D tensor'): FLOAT16,
    ('floor', 'floor float16 3D tensor'): FLOAT16,
    ('floor', 'floor float16 4D tensor'): FLOAT16,
    ('floor', 'floor float16 5D tensor'): FLOAT16,
    # --- gather
    ('gather', 'gather float16 1D tensor and int32 0D scalar indices default options'): FLOAT16,
    ('gather', 'gather float16 1D tensor and int32 1D indices default options'): FLOAT16,
    ('gather', 'gather float16 1D tensor and int32 2D indices default options'): FLOAT16,
    ('gather', 'gather float16 1D tensor and int32 3D indices default options'): FLOAT16,
    ('gather', 'gather float16 1D tensor and int32 4D indices default options'): FLOAT16,
    ('gather', 'gather float16 1D tensor and int64 0D scalar indices default options'): FLOAT16,
    ('gather', 'gather float16 1D tensor and uint32 0D scalar indices default options'): FLOAT16,
    ('gather', 'gather float16 2D tensor and 0D scalar indices default options'): FLOAT16,
    ('gather', 'gather float16 2D tensor and 1D indices default options'): FLOAT16,
    ('gather', 'gather float16 2D tensor and 2D indices default options'): FLOAT16,
    ('gather', 'gather float16 2D tensor and 3D indices default options'): FLOAT16,
    ('gather', 'gather float16 2D tensor and 4D indices default options'): FLOAT16,
    ('gather', 'gather float16 2D tensor and int32 0D negative indices default options'): FLOAT16,
    ('gather', 'gather float16 3D tensor and 1D indices options.axis=1'): FLOAT16,
    ('gather', 'gather float16 3D tensor and 2D indices default options'): FLOAT16,
    ('gather', 'gather float16 3D tensor and 2D indices options.axis=2'): FLOAT16,
    ('gather', 'gather float16 4D tensor and 2D indices default options'): FLOAT16,
    ('gather', 'gather float16 4D tensor and 2D indices explict options.axis=0'): FLOAT16,
    ('gather', 'gather float16 5D tensor and 0D scalar indices options.axis=4'): FLOAT16,
    ('gather', 'gather float16 5D tensor and 1D indices default options'): FLOAT16,
    # --- gelu
    ('gelu', 'gelu float16 0D scalar'): FLOAT16,
    ('gelu', 'gelu float16 1D tensor'): FLOAT16,
    ('gelu', 'gelu float16 2D tensor'): FLOAT16,
    ('gelu', 'gelu float16 3D tensor'): FLOAT16,
    ('gelu', 'gelu float16 4D tensor'): FLOAT16,
    ('gelu', 'gelu float16 5D tensor'): FLOAT16,
    # --- greater
    ('greater', 'greater float16 0D scalar'): FLOAT16,
    ('greater', 'greater float16 1D constant tensors'): FLOAT16,
    ('greater', 'greater float16 1D tensors'): FLOAT16,
    ('greater', 'greater float16 2D tensors'): FLOAT16,
    ('greater', 'greater float16 3D tensors'): FLOAT16,
    ('greater', 'greater float16 4D tensors'): FLOAT16,
    ('greater', 'greater float16 5D tensors'): FLOAT16,
    ('greater', 'greater float16 broadcast 0D to 4D'): FLOAT16,
    ('greater', 'greater float16 broadcast 1D to 4D'): FLOAT16,
    ('greater', 'greater float16 broadcast 2D to 4D'): FLOAT16,
    ('greater', 'greater float16 broadcast 3D to 4D'): FLOAT16,
    ('greater', 'greater float16 broadcast 4D to 4D'): FLOAT16,
    # --- greater_or_equal
    ('greater_or_equal', 'greaterOrEqual float16 0D scalar'): FLOAT16,
    ('greater_or_equal', 'greaterOrEqual float16 1D constant tensors'): FLOAT16,
    ('greater_or_equal', 'greaterOrEqual float16 1D tensors'): FLOAT16,
    ('greater_or_equal', 'greaterOrEqual float16 2D tensors'): FLOAT16,
    ('greater_or_equal', 'greaterOrEqual float16 3D tensors'): FLOAT16,
    ('greater_or_equal', 'greaterOrEqual float16 4D tensors'): FLOAT16,
    ('greater_or_equal', 'greaterOrEqual float16 5D tensors'): FLOAT16,
    ('greater_or_equal', 'greaterOrEqual float16 broadcast 0D to 4D'): FLOAT16,
    ('greater_or_equal', 'greaterOrEqual float16 broadcast 1D to 4D'): FLOAT16,
    ('greater_or_equal', 'greaterOrEqual float16 broadcast 2D to 4D'): FLOAT16,
    ('greater_or_equal', 'greaterOrEqual float16 broadcast 3D to 4D'): FLOAT16,
    ('greater_or_equal', 'greaterOrEqual float16 broadcast 4D to 4D'): FLOAT16,
    # --- hard_sigmoid
    ('hard_sigmoid', 'hardSigmoid float16 negative 4D tensor all options (positive options.alpha and negative options.beta)'):
        FLOAT16,
    ('hard_sigmoid', 'hardSigmoid float16 negative 4D tensor specified all options (negative options.alpha and positive options.beta)'):
        FLOAT16,
    ('hard_sigmoid', 'hardSigmoid float16 negative 4D tensor specified negative options.alpha default options.beta'):
        FLOAT16,
    ('hard_sigmoid', 'hardSigmoid float16 negative 4D tensor specified negative options.beta default options.alpha'):
        FLOAT16,
    ('hard_sigmoid', 'hardSigmoid float16 positive 0D tensor default options'): FLOAT16,
    ('hard_sigmoid', 'hardSigmoid float16 positive 1D constant tensor default options'): FLOAT16,
    ('hard_sigmoid', 'hardSigmoid float16 positive 1D tensor default options'): FLOAT16,
    ('hard_sigmoid', 'hardSigmoid float16 positive 2D tensor default options'): FLOAT16,
    ('hard_sigmoid', 'hardSigmoid float16 positive 3D tensor default options'): FLOAT16,
    ('hard_sigmoid', 'hardSigmoid float16 positive 4D tensor default options'): FLOAT16,
    ('hard_sigmoid', 'hardSigmoid float16 positive 4D tensor specified all options (negative options.alpha and negative options.beta)'):
        FLOAT16,
    ('hard_sigmoid', 'hardSigmoid float16 positive 4D tensor specified all options (positive options.alpha and positive options.beta)'):
        FLOAT16,
    ('hard_sigmoid', 'hardSigmoid float16 positive 4D tensor specified positive options.alpha default options.beta'):
        FLOAT16,
    ('hard_sigmoid', 'hardSigmoid float16 positive 4D tensor specified positive options.beta default options.alpha'):
        FLOAT16,
    ('hard_sigmoid', 'hardSigmoid float16 positive 5D tensor default options'): FLOAT16,
    # --- hard_swish
    ('hard_swish', 'hardSwish float16 0D tensor'): FLOAT16,
    ('hard_swish', 'hardSwish float16 1D constant tensor'): FLOAT16,
    ('hard_swish', 'hardSwish float16 1D tensor'): FLOAT16,
    ('hard_swish', 'hardSwish float16 2D tensor'): FLOAT16,
    ('hard_swish', 'hardSwish float16 3D tensor'): FLOAT16,
    ('hard_swish', 'hardSwish float16 4D tensor'): FLOAT16,
    ('hard_swish', 'hardSwish float16 5D tensor'): FLOAT16,
    # --- instance_normalization
    ('instance_normalization', 'instanceNormalization float16 4D tensor all options'): FLOAT16,
    ('instance_normalization', 'instanceNormalization float16 4D tensor default options'): FLOAT16,
    ('instance_normalization', "instanceNormalization float16 4D tensor explicit options.layout='nchw'"):
        FLOAT16,
    ('instance_normalization', 'instanceNormalization float16 4D tensor options.bias'): FLOAT16,
    ('instance_normalization', 'instanceNormalization float16 4D tensor options.epsilon'): FLOAT16,
    ('instance_normalization', "instanceNormalization float16 4D tensor options.layout='nhwc'"):
        FLOAT16,
    ('instance_normalization', 'instanceNormalization float16 4D tensor options.scale'): FLOAT16,
    # --- l2_pool2d
    ('l2_pool2d', 'l2Pool2d float32 4D tensor options.outputSizes ignores options.roundingType=floor'):
        "WPT's expected values are wrong: 4 of 18 (the windows past the right edge) are sums of squares without the square root",
    ('l2_pool2d', 'l2Pool2d float32 4D tensor options.roundingType=ceil'):
        "WPT's expected values are wrong: 4 of 18 (the windows past the right edge) are sums of squares without the square root",
    # --- layer_normalization
    ('layer_normalization', 'layerNormalization float16 2D tensor default options'): FLOAT16,
    ('layer_normalization', 'layerNormalization float16 3D tensor default options'): FLOAT16,
    ('layer_normalization', 'layerNormalization float16 4D tensor all options'): FLOAT16,
    ('layer_normalization', 'layerNormalization float16 4D tensor default options'): FLOAT16,
    ('layer_normalization', 'layerNormalization float16 4D tensor options.axes=[2]'): FLOAT16,
    ('layer_normalization', 'layerNormalization float16 4D tensor options.bias'): FLOAT16,
    ('layer_normalization', 'layerNormalization float16 4D tensor options.bias and options.axes=[3, 1, 2]'):
        FLOAT16,
    ('layer_normalization', 'layerNormalization float16 4D tensor options.epsilon'): FLOAT16,
    ('layer_normalization', 'layerNormalization float16 4D tensor options.scale'): FLOAT16,
    ('layer_normalization', 'layerNormalization float16 4D tensor options.scale and options.axes=[0, 2]'):
        FLOAT16,
    ('layer_normalization', 'layerNormalization float16 5D tensor default options'): FLOAT16,
    # --- leaky_relu
    ('leaky_relu', 'leakyRelu float16 0D tensor default options'): FLOAT16,
    ('leaky_relu', 'leakyRelu float16 1D constant tensor default options'): FLOAT16,
    ('leaky_relu', 'leakyRelu float16 1D tensor default options'): FLOAT16,
    ('leaky_relu', 'leakyRelu float16 1D tensor negative options.alpha'): FLOAT16,
    ('leaky_relu', 'leakyRelu float16 2D tensor default options'): FLOAT16,
    ('leaky_relu', 'leakyRelu float16 2D tensor positive options.alpha'): FLOAT16,
    ('leaky_relu', 'leakyRelu float16 3D tensor default options'): FLOAT16,
    ('leaky_relu', 'leakyRelu float16 4D tensor default options'): FLOAT16,
    ('leaky_relu', 'leakyRelu float16 5D tensor default options'): FLOAT16,
    ('leaky_relu', 'leakyRelu float16 5D tensor options.alpha=0.0'): FLOAT16,
    # --- lesser
    ('lesser', 'lesser float16 0D scalar'): FLOAT16,
    ('lesser', 'lesser float16 1D constant tensors'): FLOAT16,
    ('lesser', 'lesser float16 1D tensors'): FLOAT16,
    ('lesser', 'lesser float16 2D tensors'): FLOAT16,
    ('lesser', 'lesser float16 3D tensors'): FLOAT16,
    ('lesser', 'lesser float16 4D tensors'): FLOAT16,
    ('lesser', 'lesser float16 5D tensors'): FLOAT16,
    ('lesser', 'lesser float16 broadcast 0D to 4D'): FLOAT16,
    ('lesser', 'lesser float16 broadcast 1D to 4D'): FLOAT16,
    ('lesser', 'lesser float16 broadcast 2D to 4D'): FLOAT16,
    ('lesser', 'lesser float16 broadcast 3D to 4D'): FLOAT16,
    ('lesser', 'lesser float16 broadcast 4D to 4D'): FLOAT16,
    # --- lesser_or_equal
    ('lesser_or_equal', 'lesserOrEqual float16 0D scalar'): FLOAT16,
    ('lesser_or_equal', 'lesserOrEqual float16 1D constant tensors'): FLOAT16,
    ('lesser_or_equal', 'lesserOrEqual float16 1D tensors'): FLOAT16,
    ('lesser_or_equal', 'lesserOrEqual float16 2D tensors'): FLOAT16,
    ('lesser_or_equal', 'lesserOrEqual float16 3D tensors'): FLOAT16,
    ('lesser_or_equal', 'lesserOrEqual float16 4D tensors'): FLOAT16,
    ('lesser_or_equal', 'lesserOrEqual float16 5D tensors'): FLOAT16,
    ('lesser_or_equal', 'lesserOrEqual float16 broadcast 0D to 4D'): FLOAT16,
    ('lesser_or_equal', 'lesserOrEqual float16 broadcast 1D to 4D'): FLOAT16,
    ('lesser_or_equal', 'lesserOrEqual float16 broadcast 2D to 4D'): FLOAT16,
    ('lesser_or_equal', 'lesserOrEqual float16 broadcast 3D to 4D'): FLOAT16,
    ('lesser_or_equal', 'lesserOrEqual float16 broadcast 4D to 4D'): FLOAT16,
    # --- linear
    ('linear', 'linear float16 0D tensor default options'): FLOAT16,
    ('linear', 'linear float16 1D constant tensor default options'): FLOAT16,
    ('linear', 'linear float16 1D tensor default options'): FLOAT16,
    ('linear', 'linear float16 2D tensor default options'): FLOAT16,
    ('linear', 'linear float16 3D tensor default options'): FLOAT16,
    ('linear', 'linear float16 4D tensor default options'): FLOAT16,
    ('linear', 'linear float16 4D tensor specified options.alpha and default options.beta'):
        FLOAT16,
    ('linear', 'linear float16 5D tensor default options'): FLOAT16,
    ('linear', 'linear float16 negative 4D tensor all options (positive options.alpha and negative options.beta)'):
        FLOAT16,
    ('linear', 'linear float16 negative 4D tensor specified negative options.beta and default options.alpha'):
        FLOAT16,
    ('linear', 'linear float16 positive 4D tensor all options (negative options.alpha and negative options.beta)'):
        FLOAT16,
    ('linear', 'linear float16 positive 4D tensor all options (positive options.alpha and positive options.beta)'):
        FLOAT16,
    ('linear', 'linear float16 positive 4D tensor specified positive options.beta and default options.alpha'):
        FLOAT16,
    # --- log
    ('log', 'log float16 positive 0D scalar'): FLOAT16,
    ('log', 'log float16 positive 1D constant tensor'): FLOAT16,
    ('log', 'log float16 positive 1D tensor'): FLOAT16,
    ('log', 'log float16 positive 2D tensor'): FLOAT16,
    ('log', 'log float16 positive 3D tensor'): FLOAT16,
    ('log', 'log float16 positive 4D tensor'): FLOAT16,
    ('log', 'log float16 positive 5D tensor'): FLOAT16,
    # --- matmul
    ('matmul', 'matmul float16 2D and 2D tensors'): FLOAT16,
    ('matmul', 'matmul float16 3D and 2D tensors'): FLOAT16,
    ('matmul', 'matmul float16 3D and 3D (broadcast) tensors'): FLOAT16,
    ('matmul', 'matmul float16 3D and 3D tensors'): FLOAT16,
    ('matmul', 'matmul float16 4D and 3D tensors'): FLOAT16,
    ('matmul', 'matmul float16 4D and 4D (broadcast) tensors'): FLOAT16,
    ('matmul', 'matmul float16 4D and 4D tensors'): FLOAT16,
    ('matmul', 'matmul float16 5D and 2D tensors'): FLOAT16,
    ('matmul', 'matmul float16 5D and 5D tensors, broadcast the leftmost dimensions of inputB'):
        FLOAT16,
    ('matmul', 'matmul float16 5D and 5D tensors, broadcast the two leftmost dimensions of inputB'):
        FLOAT16,
    # --- max
    ('max', 'max float16 1D constant tensors'): FLOAT16,
    ('max', 'max float16 1D tensors'): FLOAT16,
    ('max', 'max float16 2D tensors'): FLOAT16,
    ('max', 'max float16 3D tensors'): FLOAT16,
    ('max', 'max float16 4D tensors'): FLOAT16,
    ('max', 'max float16 5D tensors'): FLOAT16,
    ('max', 'max float16 broadcast 1D to 4D'): FLOAT16,
    ('max', 'max float16 broadcast 2D to 4D'): FLOAT16,
    ('max', 'max float16 broadcast 3D to 4D'): FLOAT16,
    ('max', 'max float16 broadcast 4D to 4D'): FLOAT16,
    # --- min
    ('min', 'min float16 1D constant tensors'): FLOAT16,
    ('min', 'min float16 1D tensors'): FLOAT16,
    ('min', 'min float16 2D tensors'): FLOAT16,
    ('min', 'min float16 3D tensors'): FLOAT16,
    ('min', 'min float16 4D tensors'): FLOAT16,
    ('min', 'min float16 5D tensors'): FLOAT16,
    ('min', 'min float16 broadcast 1D to 4D'): FLOAT16,
    ('min', 'min float16 broadcast 2D to 4D'): FLOAT16,
    ('min', 'min float16 broadcast 3D to 4D'): FLOAT16,
    ('min', 'min float16 broadcast 4D to 4D'): FLOAT16,
    # --- mul
    ('mul', 'mul float16 1D constant tensors'): FLOAT16,
    ('mul', 'mul float16 1D tensors'): FLOAT16,
    ('mul', 'mul float16 2D tensors'): FLOAT16,
    ('mul', 'mul float16 3D tensors'): FLOAT16,
    ('mul', 'mul float16 4D tensors'): FLOAT16,
    ('mul', 'mul float16 5D tensors'): FLOAT16,
    ('mul', 'mul float16 broadcast 1D to 4D'): FLOAT16,
    ('mul', 'mul float16 broadcast 2D to 4D'): FLOAT16,
    ('mul', 'mul float16 broadcast 3D to 4D'): FLOAT16,
    ('mul', 'mul float16 broadcast 4D to 4D'): FLOAT16,
    # --- neg
    ('neg', 'neg float16 1D constant tensor'): FLOAT16,
    ('neg', 'neg float16 1D tensor'): FLOAT16,
    ('neg', 'neg float16 2D tensor'): FLOAT16,
    ('neg', 'neg float16 3D tensor'): FLOAT16,
    ('neg', 'neg float16 4D tensor'): FLOAT16,
    ('neg', 'neg float16 5D tensor'): FLOAT16,
    ('neg', 'neg float16 negative 0D scalar'): FLOAT16,
    ('neg', 'neg float16 positive 0D scalar'): FLOAT16,
    # --- pow
    ('pow', 'pow (sqrt) float16 4D positive base tensor and broadcastable 0D integer exponent scalar'):
        FLOAT16,
    ('pow', 'pow (square) float16 4D base tensor and broadcastable 0D integer exponent scalar'):
        FLOAT16,
    ('pow', 'pow float16 1D base tensor and 1D integer exponent tensor'): FLOAT16,
    ('pow', 'pow float16 2D base tensor and 2D integer exponent tensor'): FLOAT16,
    ('pow', 'pow float16 3D base tensor and 3D integer exponent tensor'): FLOAT16,
    ('pow', 'pow float16 4D base tensor and 4D integer exponent tensor'): FLOAT16,
    ('pow', 'pow float16 4D base tensor and broadcastable 2D integer exponent tensor'): FLOAT16,
    ('pow', 'pow float16 4D base tensor and broadcastable 3D integer exponent tensor'): FLOAT16,
    ('pow', 'pow float16 5D base tensor and 5D integer exponent tensor'): FLOAT16,
    ('pow', 'pow float16 constant 1D base tensor and 1D integer exponent tensor'): FLOAT16,
    # --- reduce_l1
    ('reduce_l1', 'reduceL1 float16 0D constant tensor default options'): FLOAT16,
    ('reduce_l1', 'reduceL1 float16 0D constant tensor empty axes'): FLOAT16,
    ('reduce_l1', 'reduceL1 float16 0D tensor default options'): FLOAT16,
    ('reduce_l1', 'reduceL1 float16 0D tensor empty axes'): FLOAT16,
    ('reduce_l1', 'reduceL1 float16 1D constant tensor all positive default options'): FLOAT16,
    ('reduce_l1', 'reduceL1 float16 1D tensor all negative default options'): FLOAT16,
    ('reduce_l1', 'reduceL1 float16 1D tensor all negative integers default options'): FLOAT16,
    ('reduce_l1', 'reduceL1 float16 1D tensor all positive default options'): FLOAT16,
    ('reduce_l1', 'reduceL1 float16 1D tensor all positive integers default options'): FLOAT16,
    ('reduce_l1', 'reduceL1 float16 2D tensor default options'): FLOAT16,
    ('reduce_l1', 'reduceL1 float16 3D tensor default options'): FLOAT16,
    ('reduce_l1', 'reduceL1 float16 3D tensor options.axes'): FLOAT16,
    ('reduce_l1', 'reduceL1 float16 3D tensor options.keepDimensions=false'): FLOAT16,
    ('reduce_l1', 'reduceL1 float16 3D tensor options.keepDimensions=true'): FLOAT16,
    ('reduce_l1', 'reduceL1 float16 4D tensor default options'): FLOAT16,
    ('reduce_l1', 'reduceL1 float16 4D tensor options.axes'): FLOAT16,
    ('reduce_l1', 'reduceL1 float16 4D tensor options.axes with options.keepDimensions=false'):
        FLOAT16,
    ('reduce_l1', 'reduceL1 float16 4D tensor options.axes with options.keepDimensions=true'):
        FLOAT16,
    ('reduce_l1', 'reduceL1 float16 4D tensor options.keepDimensions=false'): FLOAT16,
    ('reduce_l1', 'reduceL1 float16 4D tensor options.keepDimensions=true'): FLOAT16,
    ('reduce_l1', 'reduceL1 float16 5D tensor default options'): FLOAT16,
    # --- reduce_l2
    ('reduce_l2', 'reduceL2 float16 0D constant tensor default options'): FLOAT16,
    ('reduce_l2', 'reduceL2 float16 0D constant tensor empty axes'): FLOAT16,
    ('reduce_l2', 'reduceL2 float16 0D tensor default options'): FLOAT16,
    ('reduce_l2', 'reduceL2 float16 0D tensor empty axes'): FLOAT16,
    ('reduce_l2', 'reduceL2 float16 1D constant tensor all positive default options'): FLOAT16,
    ('reduce_l2', 'reduceL2 float16 1D tensor all negative default options'): FLOAT16,
    ('reduce_l2', 'reduceL2 float16 1D tensor all negative integers default options'): FLOAT16,
    ('reduce_l2', 'reduceL2 float16 1D tensor all positive default options'): FLOAT16,
    ('reduce_l2', 'reduceL2 float16 1D tensor all positive integers default options'): FLOAT16,
    ('reduce_l2', 'reduceL2 float16 2D tensor default options'): FLOAT16,
    ('reduce_l2', 'reduceL2 float16 3D tensor default options'): FLOAT16,
    ('reduce_l2', 'reduceL2 float16 3D tensor options.axes'): FLOAT16,
    ('reduce_l2', 'reduceL2 float16 3D tensor options.keepDimensions=false'): FLOAT16,
    ('reduce_l2', 'reduceL2 float16 3D tensor options.keepDimensions=true'): FLOAT16,
    ('reduce_l2', 'reduceL2 float16 4D tensor default options'): FLOAT16,
    ('reduce_l2', 'reduceL2 float16 4D tensor options.axes'): FLOAT16,
    ('reduce_l2', 'reduceL2 float16 4D tensor options.axes with options.keepDimensions=false'):
        FLOAT16,
    ('reduce_l2', 'reduceL2 float16 4D tensor options.axes with options.keepDimensions=true'):
        FLOAT16,
    ('reduce_l2', 'reduceL2 float16 4D tensor options.keepDimensions=false'): FLOAT16,
    ('reduce_l2', 'reduceL2 float16 4D tensor options.keepDimensions=true'): FLOAT16,
    ('reduce_l2', 'reduceL2 float16 5D tensor default options'): FLOAT16,
    # --- reduce_log_sum
    ('reduce_log_sum', 'reduceLogSum float16 0D constant tensor default options'): FLOAT16,
    ('reduce_log_sum', 'reduceLogSum float16 0D constant tensor empty axes'): FLOAT16,
    ('reduce_log_sum', 'reduceLogSum float16 0D tensor default options'): FLOAT16,
    ('reduce_log_sum', 'reduceLogSum float16 0D tensor empty axes'): FLOAT16,
    ('reduce_log_sum', 'reduceLogSum float16 1D constant tensor all non-negative default options'):
        FLOAT16,
    ('reduce_log_sum', 'reduceLogSum float16 1D tensor all non-negative default options'): FLOAT16,
    ('reduce_log_sum', 'reduceLogSum float16 1D tensor all non-negative integers default options'):
        FLOAT16,
    ('reduce_log_sum', 'reduceLogSum float16 2D tensor default options'): FLOAT16,
    ('reduce_log_sum', 'reduceLogSum float16 3D tensor default options'): FLOAT16,
    ('reduce_log_sum', 'reduceLogSum float16 3D tensor options.axes'): FLOAT16,
    ('reduce_log_sum', 'reduceLogSum float16 3D tensor options.keepDimensions=false'): FLOAT16,
    ('reduce_log_sum', 'reduceLogSum float16 3D tensor options.keepDimensions=true'): FLOAT16,
    ('reduce_log_sum', 'reduceLogSum float16 4D tensor default options'): FLOAT16,
    ('reduce_log_sum', 'reduceLogSum float16 4D tensor options.axes'): FLOAT16,
    ('reduce_log_sum', 'reduceLogSum float16 4D tensor options.axes with options.keepDimensions=false'):
        FLOAT16,
    ('reduce_log_sum', 'reduceLogSum float16 4D tensor options.axes with options.keepDimensions=true'):
        FLOAT16,
    ('reduce_log_sum', 'reduceLogSum float16 4D tensor options.keepDimensions=false'): FLOAT16,
    ('reduce_log_sum', 'reduceLogSum float16 4D tensor options.keepDimensions=true'): FLOAT16,
    ('reduce_log_sum', 'reduceLogSum float16 5D tensor default options'): FLOAT16,
    # --- reduce_log_sum_exp
    ('reduce_log_sum_exp', 'reduceLogSumExp float16 0D constant tensor default options'): FLOAT16,
    ('reduce_log_sum_exp', 'reduceLogSumExp float16 0D constant tensor empty axes'): FLOAT16,
    ('reduce_log_sum_exp', 'reduceLogSumExp float16 0D tensor default options'): FLOAT16,
    ('reduce_log_sum_exp', 'reduceLogSumExp float16 0D tensor empty axes'): FLOAT16,
    ('reduce_log_sum_exp', 'reduceLogSumExp float16 1D constant tensor all positive default options'):
        FLOAT16,
    ('reduce_log_sum_exp', 'reduceLogSumExp float16 1D tensor all negative default options'):
        FLOAT16,
    ('reduce_log_sum_exp', 'reduceLogSumExp float16 1D tensor all negative integers default options'):
        FLOAT16,
    ('reduce_log_sum_exp', 'reduceLogSumExp float16 1D tensor all positive default options'):
        FLOAT16,
    ('reduce_log_sum_exp', 'reduceLogSumExp float16 1D tensor all positive integers default options'):
        FLOAT16,
    ('reduce_log_sum_exp', 'reduceLogSumExp float16 2D tensor default options'): FLOAT16,
    ('reduce_log_sum_exp', 'reduceLogSumExp float16 3D tensor default options'): FLOAT16,
    ('reduce_log_sum_exp', 'reduceLogSumExp float16 3D tensor options.axes'): FLOAT16,
    ('reduce_log_sum_exp', 'reduceLogSumExp float16 3D tensor options.keepDimensions=false'):
        FLOAT16,
    ('reduce_log_sum_exp', 'reduceLogSumExp float16 3D tensor options.keepDimensions=true'):
        FLOAT16,
    ('reduce_log_sum_exp', 'reduceLogSumExp float16 4D tensor default options'): FLOAT16,
    ('reduce_log_sum_exp', 'reduceLogSumExp float16 4D tensor options.axes'): FLOAT16,
    ('reduce_log_sum_exp', 'reduceLogSumExp float16 4D tensor options.axes with options.keepDimensions=false'):
        FLOAT16,
    ('reduce_log_sum_exp', 'reduceLogSumExp float16 4D tensor options.axes with options.keepDimensions=true'):
        FLOAT16,
    ('reduce_log_sum_exp', 'reduceLogSumExp float16 4D tensor options.keepDimensions=false'):
        FLOAT16,
    ('reduce_log_sum_exp', 'reduceLogSumExp float16 4D tensor options.keepDimensions=true'):
        FLOAT16,
    ('reduce_log_sum_exp', 'reduceLogSumExp float16 5D tensor default options'): FLOAT16,
    # --- reduce_max
    ('reduce_max', 'reduceMax float16 0D constant tensor default options'): FLOAT16,
    ('reduce_max', 'reduceMax float16 0D constant tensor empty axes'): FLOAT16,
    ('reduce_max', 'reduceMax float16 0D tensor default options'): FLOAT16,
    ('reduce_max', 'reduceMax float16 0D tensor empty axes'): FLOAT16,
    ('reduce_max', 'reduceMax float16 1D constant tensor default options'): FLOAT16,
    ('reduce_max', 'reduceMax float16 1D tensor default options'): FLOAT16,
    ('reduce_max', 'reduceMax float16 2D tensor default options'): FLOAT16,
    ('reduce_max', 'reduceMax float16 3D tensor default options'): FLOAT16,
    ('reduce_max', 'reduceMax float16 3D tensor options.axes'): FLOAT16,
    ('reduce_max', 'reduceMax float16 3D tensor options.keepDimensions=false'): FLOAT16,
    ('reduce_max', 'reduceMax float16 3D tensor options.keepDimensions=true'): FLOAT16,
    ('reduce_max', 'reduceMax float16 4D tensor default options'): FLOAT16,
    ('reduce_max', 'reduceMax float16 4D tensor options.axes'): FLOAT16,
    ('reduce_max', 'reduceMax float16 4D tensor options.axes with options.keepDimensions=false'):
        FLOAT16,
    ('reduce_max', 'reduceMax float16 4D tensor options.axes with options.keepDimensions=true'):
        FLOAT16,
    ('reduce_max', 'reduceMax float16 4D tensor options.keepDimensions=false'): FLOAT16,
    ('reduce_max', 'reduceMax float16 4D tensor options.keepDimensions=true'): FLOAT16,
    ('reduce_max', 'reduceMax float16 5D tensor default options'): FLOAT16,
    # --- reduce_mean
    ('reduce_mean', 'reduceMean float16 0D constant tensor default options'): FLOAT16,
    ('reduce_mean', 'reduceMean float16 0D constant tensor empty axes'): FLOAT16,
    ('reduce_mean', 'reduceMean float16 0D tensor default options'): FLOAT16,
    ('reduce_mean', 'reduceMean float16 0D tensor empty axes'): FLOAT16,
    ('reduce_mean', 'reduceMean float16 1D constant tensor all positive default options'): FLOAT16,
    ('reduce_mean', 'reduceMean float16 1D tensor all negative default options'): FLOAT16,
    ('reduce_mean', 'reduceMean float16 1D tensor all negative integers default options'): FLOAT16,
    ('reduce_mean', 'reduceMean float16 1D tensor all positive default options'): FLOAT16,
    ('reduce_mean', 'reduceMean float16 1D tensor all positive integers default options'): FLOAT16,
    ('reduce_mean', 'reduceMean float16 2D tensor default options'): FLOAT16,
    ('reduce_mean', 'reduceMean float16 3D tensor default options'): FLOAT16,
    ('reduce_mean', 'reduceMean float16 3D tensor options.axes'): FLOAT16,
    ('reduce_mean', 'reduceMean float16 3D tensor options.keepDimensions=false'): FLOAT16,
    ('reduce_mean', 'reduceMean float16 3D tensor options.keepDimensions=true'): FLOAT16,
    ('reduce_mean', 'reduceMean float16 4D tensor default options'): FLOAT16,
    ('reduce_mean', 'reduceMean float16 4D tensor options.axes'): FLOAT16,
    ('reduce_mean', 'reduceMean float16 4D tensor options.axes with options.keepDimensions=false'):
        FLOAT16,
    ('reduce_mean', 'reduceMean float16 4D tensor options.axes with options.keepDimensions=true'):
        FLOAT16,
    ('reduce_mean', 'reduceMean float16 4D tensor options.keepDimensions=false'): FLOAT16,
    ('reduce_mean', 'reduceMean float16 4D tensor options.keepDimensions=true'): FLOAT16,
    ('reduce_mean', 'reduceMean float16 5D tensor default options'): FLOAT16,
    # --- reduce_min
    ('reduce_min', 'reduceMin float16 0D constant tensor default options'): FLOAT16,
    ('reduce_min', 'reduceMin float16 0D constant tensor empty axes'): FLOAT16,
    ('reduce_min', 'reduceMin float16 0D tensor default options'): FLOAT16,
    ('reduce_min', 'reduceMin float16 0D tensor empty axes'): FLOAT16,
    ('reduce_min', 'reduceMin float16 1D constant tensor default options'): FLOAT16,
    ('reduce_min', 'reduceMin float16 1D tensor default options'): FLOAT16,
    ('reduce_min', 'reduceMin float16 2D tensor default options'): FLOAT16,
    ('reduce_min', 'reduceMin float16 3D tensor default options'): FLOAT16,
    ('reduce_min', 'reduceMin float16 3D tensor options.axes'): FLOAT16,
    ('reduce_min', 'reduceMin float16 3D tensor options.keepDimensions=false'): FLOAT16,
    ('reduce_min', 'reduceMin float16 3D tensor options.keepDimensions=true'): FLOAT16,
    ('reduce_min', 'reduceMin float16 4D tensor default options'): FLOAT16,
    ('reduce_min', 'reduceMin float16 4D tensor options.axes'): FLOAT16,
    ('reduce_min', 'reduceMin float16 4D tensor options.axes with options.keepDimensions=false'):
        FLOAT16,
    ('reduce_min', 'reduceMin float16 4D tensor options.axes with options.keepDimensions=true'):
        FLOAT16,
    ('reduce_min', 'reduceMin float16 4D tensor options.keepDimensions=false'): FLOAT16,
    ('reduce_min', 'reduceMin float16 4D tensor options.keepDimensions=true'): FLOAT16,
    ('reduce_min', 'reduceMin float16 5D tensor default options'): FLOAT16,
    # --- reduce_product
    ('reduce_product', 'reduceProduct float16 0D constant tensor default options'): FLOAT16,
    ('reduce_product', 'reduceProduct float16 0D constant tensor empty axes'): FLOAT16,
    ('reduce_product', 'reduceProduct float16 0D tensor default options'): FLOAT16,
    ('reduce_product', 'reduceProduct float16 0D tensor empty axes'): FLOAT16,
    ('reduce_product', 'reduceProduct float16 1D constant tensor default options'): FLOAT16,
    ('reduce_product', 'reduceProduct float16 1D tensor default options'): FLOAT16,
    ('reduce_product', 'reduceProduct float16 2D tensor default options'): FLOAT16,
    ('reduce_product', 'reduceProduct float16 3D tensor default options'): FLOAT16,
    ('reduce_product', 'reduceProduct float16 3D tensor options.axes'): FLOAT16,
    ('reduce_product', 'reduceProduct float16 3D tensor options.keepDimensions=false'): FLOAT16,
    ('reduce_product', 'reduceProduct float16 3D tensor options.keepDimensions=true'): FLOAT16,
    ('reduce_product', 'reduceProduct float16 4D tensor default options'): FLOAT16,
    ('reduce_product', 'reduceProduct float16 4D tensor options.axes'): FLOAT16,
    ('reduce_product', 'reduceProduct float16 4D tensor options.axes with options.keepDimensions=false'):
        FLOAT16,
    ('reduce_product', 'reduceProduct float16 4D tensor options.axes with options.keepDimensions=true'):
        FLOAT16,
    ('reduce_product', 'reduceProduct float16 4D tensor options.keepDimensions=false'): FLOAT16,
    ('reduce_product', 'reduceProduct float16 4D tensor options.keepDimensions=true'): FLOAT16,
    ('reduce_product', 'reduceProduct float16 5D tensor default options'): FLOAT16,
    # --- reduce_sum
    ('reduce_sum', 'reduceSum float16 0D constant tensor default options'): FLOAT16,
    ('reduce_sum', 'reduceSum float16 0D constant tensor empty axes'): FLOAT16,
    ('reduce_sum', 'reduceSum float16 0D tensor default options'): FLOAT16,
    ('reduce_sum', 'reduceSum float16 0D tensor empty axes'): FLOAT16,
    ('reduce_sum', 'reduceSum float16 1D constant tensor all positive default options'): FLOAT16,
    ('reduce_sum', 'reduceSum float16 1D tensor all negative default options'): FLOAT16,
    ('reduce_sum', 'reduceSum float16 1D tensor all negative integers default options'): FLOAT16,
    ('reduce_sum', 'reduceSum float16 1D tensor all positive default options'): FLOAT16,
    ('reduce_sum', 'reduceSum float16 1D tensor all positive integers default options'): FLOAT16,
    ('reduce_sum', 'reduceSum float16 2D tensor default options'): FLOAT16,
    ('reduce_sum', 'reduceSum float16 3D tensor default options'): FLOAT16,
    ('reduce_sum', 'reduceSum float16 3D tensor options.axes'): FLOAT16,
    ('reduce_sum', 'reduceSum float16 3D tensor options.keepDimensions=false'): FLOAT16,
    ('reduce_sum', 'reduceSum float16 3D tensor options.keepDimensions=true'): FLOAT16,
    ('reduce_sum', 'reduceSum float16 4D tensor default options'): FLOAT16,
    ('reduce_sum', 'reduceSum float16 4D tensor options.axes'): FLOAT16,
    ('reduce_sum', 'reduceSum float16 4D tensor options.axes with options.keepDimensions=false'):
        FLOAT16,
    ('reduce_sum', 'reduceSum float16 4D tensor options.axes with options.keepDimensions=true'):
        FLOAT16,
    ('reduce_sum', 'reduceSum float16 4D tensor options.keepDimensions=false'): FLOAT16,
    ('reduce_sum', 'reduceSum float16 4D tensor options.keepDimensions=true'): FLOAT16,
    ('reduce_sum', 'reduceSum float16 5D tensor default options'): FLOAT16,
    # --- reduce_sum_square
    ('reduce_sum_square', 'reduceSumSquare float16 0D constant tensor default options'): FLOAT16,
    ('reduce_sum_square', 'reduceSumSquare float16 0D constant tensor empty axes'): FLOAT16,
    ('reduce_sum_square', 'reduceSumSquare float16 0D tensor default options'): FLOAT16,
    ('reduce_sum_square', 'reduceSumSquare float16 0D tensor empty axes'): FLOAT16,
    ('reduce_sum_square', 'reduceSumSquare float16 1D constant tensor all positive default options'):
        FLOAT16,
    ('reduce_sum_square', 'reduceSumSquare float16 1D tensor all negative default options'):
        FLOAT16,
    ('reduce_sum_square', 'reduceSumSquare float16 1D tensor all negative integers default options'):
        FLOAT16,
    ('reduce_sum_square', 'reduceSumSquare float16 1D tensor all positive default options'):
        FLOAT16,
    ('reduce_sum_square', 'reduceSumSquare float16 1D tensor all positive integers default options'):
        FLOAT16,
    ('reduce_sum_square', 'reduceSumSquare float16 1D tensor with empty axes'): FLOAT16,
    ('reduce_sum_square', 'reduceSumSquare float16 2D tensor default options'): FLOAT16,
    ('reduce_sum_square', 'reduceSumSquare float16 3D tensor default options'): FLOAT16,
    ('reduce_sum_square', 'reduceSumSquare float16 3D tensor options.axes'): FLOAT16,
    ('reduce_sum_square', 'reduceSumSquare float16 3D tensor options.keepDimensions=false'):
        FLOAT16,
    ('reduce_sum_square', 'reduceSumSquare float16 3D tensor options.keepDimensions=true'): FLOAT16,
    ('reduce_sum_square', 'reduceSumSquare float16 4D tensor default options'): FLOAT16,
    ('reduce_sum_square', 'reduceSumSquare float16 4D tensor options.axes'): FLOAT16,
    ('reduce_sum_square', 'reduceSumSquare float16 4D tensor options.axes with options.keepDimensions=false'):
        FLOAT16,
    ('reduce_sum_square', 'reduceSumSquare float16 4D tensor options.axes with options.keepDimensions=true'):
        FLOAT16,
    ('reduce_sum_square', 'reduceSumSquare float16 4D tensor options.keepDimensions=false'):
        FLOAT16,
    ('reduce_sum_square', 'reduceSumSquare float16 4D tensor options.keepDimensions=true'): FLOAT16,
    ('reduce_sum_square', 'reduceSumSquare float16 5D tensor default options'): FLOAT16,
    # --- relu
    ('relu', 'relu float16 0D tensor'): FLOAT16,
    ('relu', 'relu float16 1D constant tensor'): FLOAT16,
    ('relu', 'relu float16 1D tensor'): FLOAT16,
    ('relu', 'relu float16 2D tensor'): FLOAT16,
    ('relu', 'relu float16 3D tensor'): FLOAT16,
    ('relu', 'relu float16 4D tensor'): FLOAT16,
    ('relu', 'relu float16 5D tensor'): FLOAT16,
    # --- reshape
    ('reshape', 'reshape (flatten) float16 3D tensor to 2D'): FLOAT16,
    ('reshape', 'reshape (flatten) float16 4D to 2D'): FLOAT16,
    ('reshape', 'reshape (flatten) float16 4D to 2D exclusive 1st dimension'): FLOAT16,
    ('reshape', 'reshape (flatten) float16 4D to 2D exclusive 4th dimension'): FLOAT16,
    ('reshape', 'reshape (squeeze) float16 2D tensor by eliminating 1st dimension'): FLOAT16,
    ('reshape', 'reshape (squeeze) float16 2D tensor by eliminating one dimension'): FLOAT16,
    ('reshape', 'reshape (squeeze) float16 3D tensor by eliminating 2nd and 3rd dimensions'):
        FLOAT16,
    ('reshape', 'reshape (squeeze) float16 3D tensor by eliminating one dimension'): FLOAT16,
    ('reshape', 'reshape (squeeze) float16 3D tensor by eliminating two dimensions'): FLOAT16,
    ('reshape', 'reshape (squeeze) float16 4D tensor by eliminating 1st and 4th dimensions'):
        FLOAT16,
    ('reshape', 'reshape (squeeze) float16 4D tensor by eliminating all dimensions'): FLOAT16,
    ('reshape', 'reshape (squeeze) float16 4D tensor by eliminating two dimensions'): FLOAT16,
    ('reshape', 'reshape (squeeze) float16 5D tensor by eliminating 1st, 2nd and 5th dimensions'):
        FLOAT16,
    ('reshape', 'reshape (squeeze) float16 5D tensor by eliminating 2nd and 3rd dimensions'):
        FLOAT16,
    ('reshape', 'reshape (squeeze) float16 5D tensor by eliminating four dimensions'): FLOAT16,
    ('reshape', 'reshape (unsqueeze) float16 0D tensor to 4D'): FLOAT16,
    ('reshape', 'reshape (unsqueeze) float16 1D tensor by adding 2nd and 3rd dimensions'): FLOAT16,
    ('reshape', 'reshape (unsqueeze) float16 1D tensor by adding one dimension'): FLOAT16,
    ('reshape', 'reshape (unsqueeze) float16 1D tensor by adding two dimensions'): FLOAT16,
    ('reshape', 'reshape (unsqueeze) float16 1D tensor to 5D'): FLOAT16,
    ('reshape', 'reshape (unsqueeze) float16 2D tensor by adding 1st and 4th dimensions'): FLOAT16,
    ('reshape', 'reshape (unsqueeze) float16 2D tensor by adding 1st dimension'): FLOAT16,
    ('reshape', 'reshape (unsqueeze) float16 2D tensor by adding one dimension'): FLOAT16,
    ('reshape', 'reshape (unsqueeze) float16 2D tensor by adding two dimensions'): FLOAT16,
    ('reshape', 'reshape (unsqueeze) float16 3D tensor by adding 2nd and 3rd dimensions'): FLOAT16,
    ('reshape', 'reshape (unsqueeze) float16 4D tensor by adding 2nd dimension'): FLOAT16,
    ('reshape', 'reshape (unsqueeze) float16 5D tensor by adding 4th dimension'): FLOAT16,
    ('reshape', 'reshape float16 constant tensor to a new shape (reorder all dimensions)'): FLOAT16,
    ('reshape', 'reshape float16 tensor to 1D tensor'): FLOAT16,
    ('reshape', 'reshape float16 tensor to a new shape (4D to 4D)'): FLOAT16,
    ('reshape', 'reshape float16 tensor to a new shape (extend dimensions)'): FLOAT16,
    ('reshape', 'reshape float16 tensor to a new shape (reduce dimensions)'): FLOAT16,
    ('reshape', 'reshape float16 tensor to a new shape (reorder all dimensions)'): FLOAT16,
    # --- sigmoid
    ('sigmoid', 'sigmoid float16 0D tensor'): FLOAT16,
    ('sigmoid', 'sigmoid float16 1D constant tensor'): FLOAT16,
    ('sigmoid', 'sigmoid float16 1D tensor'): FLOAT16,
    ('sigmoid', 'sigmoid float16 2D tensor'): FLOAT16,
    ('sigmoid', 'sigmoid float16 3D tensor'): FLOAT16,
    ('sigmoid', 'sigmoid float16 4D tensor'): FLOAT16,
    ('sigmoid', 'sigmoid float16 5D tensor'): FLOAT16,
    # --- slice
    ('slice', 'slice float16 1D constant tensor'): FLOAT16,
    ('slice', 'slice float16 1D tensor'): FLOAT16,
    ('slice', 'slice float16 2D tensor'): FLOAT16,
    ('slice', 'slice float16 2D tensor with strides'): FLOAT16,
    ('slice', 'slice float16 3D tensor'): FLOAT16,
    ('slice', 'slice float16 3D tensor with strides'): FLOAT16,
    ('slice', 'slice float16 4D tensor'): FLOAT16,
    ('slice', 'slice float16 4D tensor with strides'): FLOAT16,
    ('slice', 'slice float16 5D tensor'): FLOAT16,
    # --- softmax
    ('softmax', 'softmax float16 2D constant tensor all positive'): FLOAT16,
    ('softmax', 'softmax float16 2D tensor all negative'): FLOAT16,
    ('softmax', 'softmax float16 2D tensor all positive'): FLOAT16,
    ('softmax', 'softmax float16 4D tensor'): FLOAT16,
    # --- split
    ('split', 'split float16 1D constant tensor number splits default options'): FLOAT16,
    ('split', 'split float16 1D tensor number splits default options'): FLOAT16,
    ('split', 'split float16 2D tensor number splits default options'): FLOAT16,
    ('split', 'split float16 3D tensor number splits default options'): FLOAT16,
    ('split', 'split float16 4D tensor array splits default options'): FLOAT16,
    ('split', 'split float16 4D tensor number splits default options'): FLOAT16,
    ('split', 'split float16 4D tensor number splits options.axis'): FLOAT16,
    ('split', 'split float16 5D tensor array splits=[2, 4] options.axis=0'): FLOAT16,
    ('split', 'split float16 5D tensor array splits=[3, 3] options.axis=2'): FLOAT16,
    ('split', 'split float16 5D tensor number splits default options'): FLOAT16,
    # --- sqrt
    ('sqrt', 'sqrt float16 0D scalar'): FLOAT16,
    ('sqrt', 'sqrt float16 1D constant tensor'): FLOAT16,
    ('sqrt', 'sqrt float16 1D tensor'): FLOAT16,
    ('sqrt', 'sqrt float16 2D tensor'): FLOAT16,
    ('sqrt', 'sqrt float16 3D tensor'): FLOAT16,
    ('sqrt', 'sqrt float16 4D tensor'): FLOAT16,
    ('sqrt', 'sqrt float16 5D tensor'): FLOAT16,
    # --- sub
    ('sub', 'sub float16 1D constant tensors'): FLOAT16,
    ('sub', 'sub float16 1D tensors'): FLOAT16,
    ('sub', 'sub float16 2D tensors'): FLOAT16,
    ('sub', 'sub float16 3D tensors'): FLOAT16,
    ('sub', 'sub float16 4D tensors'): FLOAT16,
    ('sub', 'sub float16 5D tensors'): FLOAT16,
    ('sub', 'sub float16 broadcast 1D to 4D'): FLOAT16,
    ('sub', 'sub float16 broadcast 2D to 4D'): FLOAT16,
    ('sub', 'sub float16 broadcast 3D to 4D'): FLOAT16,
    ('sub', 'sub float16 broadcast 4D to 4D'): FLOAT16,
    ('sub', 'sub uint64 4D tensors'): 'uint64 is not a jitnn data type',
    # --- tanh
    ('tanh', 'tanh float16 1D constant tensor'): FLOAT16,
    ('tanh', 'tanh float16 1D tensor'): FLOAT16,
    ('tanh', 'tanh float16 2D tensor'): FLOAT16,
    ('tanh', 'tanh float16 3D tensor'): FLOAT16,
    ('tanh', 'tanh float16 4D tensor'): FLOAT16,
    ('tanh', 'tanh float16 5D tensor'): FLOAT16,
    # --- transpose
    ('transpose', 'transpose float16 1D constant tensor default options'): FLOAT16,
    ('transpose', 'transpose float16 1D tensor default options'): FLOAT16,
    ('transpose', 'transpose float16 1D tensor options.permutation'): FLOAT16,
    ('transpose', 'transpose float16 3D tensor default options'): FLOAT16,
    ('transpose', 'transpose float16 5D tensor default options'): FLOAT16,
    ('transpose', 'transpose float16 5D tensor options.permutation'): FLOAT16,
}
