"""WebNN's conformance vectors (W3C Web Platform Tests, BSD-3-Clause; see
tests/data/wpt/README.md): the loader, and a harness that runs any case
through :class:`jitnn.GraphBuilder` the way WPT's ``webnn/resources/utils.js``
drives ``MLGraphBuilder``, with WPT's tolerances.

* :func:`float32_cases` / :func:`arguments`: one op's float32 cases as numpy
  arrays (the op tests: test_conv2d.py, test_matmul.py, ...).
* :func:`cases`, :func:`run_case`: every case of every file, built as WebNN
  builds it (tests/test_wpt_conformance.py).
* ``python -m tests.wpt --failures``: the cases that fail today, with their
  reasons, as the source of test_wpt_conformance.py's ``KNOWN_FAILURES``
  (paste it over the old dict); ``python -m tests.wpt --summary``: pass/fail
  counts per op.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

DATA = Path(__file__).parent / "data" / "wpt"

_OPTION_NAMES = {"inputLayout": "input_layout", "filterLayout": "filter_layout",
                 "outputPadding": "output_padding", "outputSizes": "output_sizes"}


def float32_cases(filename):
    """[(name, inputs {name: array}, operator, expected array)] of the float32 cases."""
    spec = json.loads((DATA / filename).read_text())
    cases = []
    for test in spec["tests"]:
        inputs = test["graph"]["inputs"]
        if any(v["descriptor"]["dataType"] != "float32" for v in inputs.values()):
            continue
        arrays = {name: np.array(v["data"], np.float32).reshape(v["descriptor"]["shape"])
                  for name, v in inputs.items()}
        (operator,) = test["graph"]["operators"]
        (expected,) = test["graph"]["expectedOutputs"].values()
        want = np.array(expected["data"], np.float32).reshape(expected["descriptor"]["shape"])
        cases.append((test["name"], arrays, operator, want))
    return cases


def arguments(operator, arrays):
    """Positional arrays and keyword options of a WPT operator, in jitnn's spelling;
    options naming a graph input (``bias``) are resolved to its array."""
    positional, options = [], {}
    for argument in operator["arguments"]:
        ((key, value),) = argument.items()
        if key == "options":
            for name, option in value.items():
                if isinstance(option, str) and option in arrays:
                    option = arrays[option]
                options[_OPTION_NAMES.get(name, name)] = option
        else:
            positional.append(arrays[value])
    return positional, options


# --- every case of every file ------------------------------------------------------------

#: the reason of every float16 case in KNOWN_FAILURES
FLOAT16 = "float16 is not a jitnn data type"

#: cases whose expected values WPT itself got wrong (tests/data/wpt/README.md):
#: they must fail whatever jitnn computes
WRONG_DATA = {
    ("l2_pool2d", "l2Pool2d float32 4D tensor options.roundingType=ceil"):
        "WPT's expected values are wrong: 4 of 18 (the windows past the right edge) are "
        "sums of squares without the square root",
    ("l2_pool2d", "l2Pool2d float32 4D tensor options.outputSizes ignores "
                  "options.roundingType=floor"):
        "WPT's expected values are wrong: 4 of 18 (the windows past the right edge) are "
        "sums of squares without the square root",
}

#: WebNN data types as numpy's (float16 never runs: see FLOAT16)
DTYPES = {"float32": np.float32, "int32": np.int32, "int64": np.int64, "uint32": np.uint32,
          "int8": np.int8, "uint8": np.uint8, "uint64": np.uint64}

_INF = math.inf
#: WPT's clamp cases with infinite or NaN bounds: the JSON conversion wrote
#: JavaScript's -Infinity, Infinity and NaN as null. The values of those
#: nulls, in order, per graph input, option and expected output, from WPT's
#: clamp.https.any.js (input [-Infinity, Infinity, -3e35, 2147483647, -2, 1, 0];
#: the option named by the case's name; the output follows from both)
_CLAMP_INPUT = (-_INF, _INF)
NON_FINITE = {
    ("clamp", "minValue as -Infinity"):
        {"clampInput": _CLAMP_INPUT, "minValue": (-_INF,), "clampOutput": _CLAMP_INPUT},
    ("clamp", "minValue as Infinity"):
        {"clampInput": _CLAMP_INPUT, "minValue": (_INF,), "clampOutput": (_INF,) * 7},
    ("clamp", "maxValue as -Infinity"):
        {"clampInput": _CLAMP_INPUT, "maxValue": (-_INF,), "clampOutput": (-_INF,) * 7},
    ("clamp", "maxValue as Infinity"):
        {"clampInput": _CLAMP_INPUT, "maxValue": (_INF,), "clampOutput": _CLAMP_INPUT},
    ("clamp", "minValue == maxValue"): {"clampInput": _CLAMP_INPUT},
    ("clamp", "minValue as NaN"):
        {"clampInput": _CLAMP_INPUT, "minValue": (math.nan,), "clampOutput": _CLAMP_INPUT},
    ("clamp", "maxValue as NaN"):
        {"clampInput": _CLAMP_INPUT, "maxValue": (math.nan,), "clampOutput": _CLAMP_INPUT},
}


class Case(NamedTuple):
    """One WPT test: its file (``wpt_relu.json``), op (the file's, ``relu``),
    name and graph (the JSON's ``graph``: inputs, operators, expectedOutputs)."""
    file: str
    op: str
    name: str
    graph: dict

    @property
    def id(self) -> str:
        return f"{self.file}::{self.name}"

    @property
    def key(self) -> tuple[str, str]:
        """Its key in KNOWN_FAILURES."""
        return (self.op, self.name)

    @property
    def float16(self) -> bool:
        descriptors = [v["descriptor"] for part in ("inputs", "expectedOutputs")
                       for v in self.graph[part].values()]
        return any(d["dataType"] == "float16" for d in descriptors)


def files() -> list[Path]:
    return sorted(DATA.glob("wpt_*.json"))


def cases(path: Path | str | None = None) -> list[Case]:
    """The cases of one file (a path or a name in tests/data/wpt), or of every file."""
    if path is None:
        return [case for p in files() for case in cases(p)]
    path = DATA / path if isinstance(path, str) else path
    spec = json.loads(path.read_text())
    op = path.stem[len("wpt_"):]
    return [Case(path.name, op, test["name"], test["graph"]) for test in spec["tests"]]


class CaseFailure(AssertionError):
    """A case that does not pass; its message is the reason, in one phrase."""


# --- values ------------------------------------------------------------------------------

_BIGINT = re.compile(r"^-?\d+n?$")          # JavaScript BigInts: "100n"; int64 data: "45"


def _number(value: Any, nulls: list) -> Any:
    if value is None:
        if not nulls:
            raise ValueError("a null the README's rules cannot resolve (see NON_FINITE)")
        return nulls.pop(0)
    if isinstance(value, str):
        if value in ("Infinity", "-Infinity", "NaN"):
            return float(value.replace("Infinity", "inf"))
        if _BIGINT.match(value):
            return int(value.rstrip("n"))
        raise ValueError(f"not a number: {value!r}")
    return value


def option_value(case: Case, name: str, value: Any) -> Any:
    """An option's value as WebNN reads it (BigInt strings as ints, nulls per NON_FINITE)."""
    if value is None or (isinstance(value, str) and (_BIGINT.match(value) or value in
                                                     ("Infinity", "-Infinity", "NaN"))):
        return _number(value, list(NON_FINITE.get(case.key, {}).get(name, ())))
    return value


def array(case: Case, name: str, resource: dict) -> np.ndarray:
    """A graph input's or expected output's values as a numpy array of its
    data type; one value for a larger shape fills it (WPT's large-input cases)."""
    descriptor = resource["descriptor"]
    kind, shape = descriptor["dataType"], tuple(descriptor["shape"])
    if kind not in DTYPES:
        raise CaseFailure(f"unsupported data type {kind}")
    data = resource["data"]
    nulls = list(NON_FINITE.get(case.key, {}).get(name, ()))
    values = [_number(v, nulls) for v in (data if isinstance(data, list) else [data])]
    dtype = DTYPES[kind]
    if len(values) == 1 and math.prod(shape) != 1:
        return np.full(shape, values[0], dtype)
    return np.array(values, dtype).reshape(shape)


# --- ULP ----------------------------------------------------------------------------------

#: the distance of values that must be equal and are not (NaN against a
#: number, an infinity against anything else): beyond every budget
FAR = 2 ** 40


def ulp_distance(a, b) -> np.ndarray:
    """The distance in float32 ULP of ``a`` and ``b`` elementwise (int64), as
    WPT's ulpDistance: the IEEE bit patterns as sign and magnitude, so that
    +0 and -0 are 0 apart and a crossing of zero adds both magnitudes. NaN is
    0 from NaN; infinities must be equal (FAR otherwise)."""
    a = np.asarray(a, np.float32)
    b = np.asarray(b, np.float32)

    def ordered(x: np.ndarray) -> np.ndarray:
        bits = x.view(np.int32).astype(np.int64)
        return np.where(bits < 0, -(bits & 0x7FFFFFFF), bits)
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    unequal_infinity = (np.isinf(a) | np.isinf(b)) & ~(nan_a | nan_b) & (a != b)
    distance = np.where(nan_a ^ nan_b, FAR, np.abs(ordered(a) - ordered(b)))
    distance = np.where(nan_a & nan_b, 0, distance)
    return np.where(unequal_infinity, FAR, distance)


# --- WPT's tolerances ---------------------------------------------------------------------
# From WPT's webnn/resources/utils.js (getPrecisionTolerance: one budget per
# operator of the graph, summed; the version the 2025-12-13 conformance files
# run with) and, for the files that pass their own function, from those files:
# cast.https.any.js (getCastPrecisionTolerance), abs.https.any.js,
# exp.https.any.js, layer_normalization.https.any.js (an absolute tolerance)
# and utils.js's getInstanceNormPrecisionTolerance. ceil, floor, neg, div, pow,
# sqrt and log: their files' functions, the same numbers as the PrecisionMetrics
# table of the older utils.js. Integer outputs are compared exactly (every
# WPT integer budget is 0).

#: float32 ULP budgets of the element-wise and fixed-budget ops (WebNN names)
ULP = {
    "argMax": 0, "argMin": 0, "batchNormalization": 6, "clamp": 0,
    "add": 1, "sub": 1, "mul": 1, "max": 0, "min": 0, "div": 2, "pow": 32,
    "elu": 18, "gelu": 18, "hardSigmoid": 2, "hardSwish": 4, "leakyRelu": 1, "linear": 2,
    "prelu": 1, "relu": 0, "sigmoid": 34, "softplus": 18, "softsign": 3, "tanh": 16,
    "abs": 0, "ceil": 0, "floor": 0, "neg": 0, "exp": 32, "sqrt": 1, "cast": 1,
    "instanceNormalization": 840, "maxPool2d": 0, "reduceMax": 0, "reduceMin": 0,
    # data movement and logical ops (utils.js's zeroULPToleranceOperatorList)
    **dict.fromkeys((
        "concat", "expand", "gather", "gatherElements", "gatherND", "identity", "pad",
        "reshape", "reverse", "scatterElements", "scatterND", "slice", "split", "tile",
        "transpose", "equal", "notEqual", "greater", "greaterOrEqual", "lesser",
        "lesserOrEqual", "logicalNot", "logicalAnd", "logicalOr", "logicalXor"), 0),
}
#: absolute tolerances (log.https.any.js, layer_normalization.https.any.js)
ATOL = {"log": 1 / 1024, "layerNormalization": 1 / 1024}
#: reductions: the budget from the number of reduced elements n (utils.js's
#: getReductionOperatorsPrecisionTolerance)
REDUCTION = {
    "reduceL1": lambda n: n, "reduceProduct": lambda n: n, "reduceSum": lambda n: n,
    "reduceL2": lambda n: 2 * n + 2, "reduceMean": lambda n: n + 2,
    "reduceLogSum": lambda n: n + 18, "reduceLogSumExp": lambda n: 2 * n + 18,
    "reduceSumSquare": lambda n: 2 * n,
}
# conv2d / convTranspose2d: kernel height, width in each filter layout (getConv2dPrecisionTolerance)
_FILTER_HW = {"oihw": (2, 3), "iohw": (2, 3), "hwio": (0, 1), "hwoi": (0, 1),
              "ohwi": (1, 2), "ihwo": (1, 2)}


def tolerance(op: str, shapes: list[tuple], options: dict, positional: list) -> tuple[str, float]:
    """("ULP", n) or ("ATOL", x): WPT's float32 budget for WebNN operator
    ``op`` given the shapes of its operand arguments (in order), its WebNN
    ``options`` and its other positional arguments."""
    if op in ATOL:
        return "ATOL", ATOL[op]
    if op in ("conv2d", "convTranspose2d"):
        x, w = shapes[0], shapes[1]
        channels = x[3] if options.get("inputLayout") == "nhwc" else x[1]
        default = "oihw" if op == "conv2d" else "iohw"
        h, k = _FILTER_HW[options.get("filterLayout", default)]
        return "ULP", w[h] * w[k] * (channels / options.get("groups", 1)) * 2
    if op == "matmul":
        return "ULP", shapes[0][-1] * 2
    if op == "gemm":
        width = shapes[0][0] if options.get("aTranspose") else shapes[0][1]
        budget = width * 2 + (options.get("alpha", 1.0) != 1.0)
        if options.get("c") is not None and options.get("beta", 1.0) != 0.0:
            budget += 1 + (options.get("beta", 1.0) != 1.0)
        return "ULP", budget
    if op == "softmax":
        axis = positional[0] if positional else 1          # WPT's default when absent
        return "ULP", shapes[0][axis] * 3 + 3
    if op in ("averagePool2d", "l2Pool2d"):
        x = shapes[0]
        window = options.get("windowDimensions") or (
            x[1:3] if options.get("layout") == "nhwc" else x[2:4])
        return "ULP", window[0] * window[1] + 2
    if op in REDUCTION:
        x = shapes[0]
        axes = options["axes"] if "axes" in options else range(len(x))
        return "ULP", REDUCTION[op](math.prod(x[a] for a in axes))
    if op in ULP:
        return "ULP", ULP[op]
    raise KeyError(f"no WPT tolerance known for {op}: add its rule to tests/wpt.py")


def graph_tolerance(budgets: list[tuple[str, float]]) -> tuple[str, float]:
    """One graph's tolerance from its operators' (WPT sums the ULP budgets;
    an absolute tolerance wins when an operator has one)."""
    atol = [value for metric, value in budgets if metric == "ATOL"]
    if atol:
        return "ATOL", sum(atol)
    return "ULP", sum(value for _, value in budgets)


def compare(name: str, got: np.ndarray, want: np.ndarray, metric: str, budget: float) -> None:
    """Raise CaseFailure unless ``got`` matches ``want``: integers exactly,
    floats within ``budget`` (ULP of float32, or absolute for ``metric`` "ATOL")."""
    if got.shape != want.shape:
        raise CaseFailure(f"{name}: shape {got.shape}, expected {want.shape}")
    got, want = got.reshape(-1), want.reshape(-1)
    if want.dtype.kind in "iu":
        distance = np.where(got == want, 0, FAR)
        unit = ""
    else:
        same = (got == want) | (np.isnan(got) & np.isnan(want))
        distance = np.zeros(got.shape, np.float64)
        differ = np.flatnonzero(~same)          # a large output: only the values that differ
        if metric == "ATOL":
            g, w = got[differ].astype(np.float64), want[differ].astype(np.float64)
            with np.errstate(invalid="ignore"):
                off = np.abs(g - w)             # inf or NaN where infinities differ
            distance[differ] = np.where(np.isfinite(off), off, FAR)
            unit = ""
        else:
            distance[differ] = ulp_distance(got[differ], want[differ])
            unit = " ULP"
    bad = distance > budget
    if bad.any():
        i = int(np.argmax(distance))
        at = f"at {i}: {got[i].item()!r}, expected {want[i].item()!r}"
        if want.dtype.kind in "iu":
            raise CaseFailure(f"{name}: {int(bad.sum())} of {bad.size} values differ ({at})")
        off = "far" if distance[i] >= FAR else f"{distance[i]:.3g}{unit}"
        raise CaseFailure(f"{name}: {int(bad.sum())} of {bad.size} values beyond "
                          f"{budget:g}{unit} (worst {at}, {off})")


# --- building a graph as WPT does ---------------------------------------------------------

def snake_case(name: str) -> str:
    """WebNN's camelCase as Python's snake_case: ``inputLayout`` -> ``input_layout``,
    ``reduceL1`` -> ``reduce_l1``, ``l2Pool2d`` -> ``l2_pool2d``, ``gatherND`` -> ``gather_nd``."""
    words = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", words).lower()


#: WebNN op names whose jitnn builder method is not their snake_case: WebNN's
#: element-wise ``max`` and ``min`` are jitnn's ``maximum`` and ``minimum``
#: (numpy's names; Python's max and min are reductions), and ``isNaN`` (mixed
#: case) is ``is_nan``. The registry says so too (each OpDef's ``webnn=``) and
#: builder_method() asks it first; test_wpt_conformance.py checks that every
#: registered op whose name is not mechanical is listed here.
ALIASES = {"max": "maximum", "min": "minimum", "isNaN": "is_nan"}


def builder_method(op: str) -> str:
    """The GraphBuilder method of WebNN operator ``op``: the registered op whose
    ``webnn`` name it is, else its alias (:data:`ALIASES`) or snake_case."""
    from jitnn import registry
    for definition in registry.ops():
        if definition.webnn == op:
            return definition.name
    return ALIASES.get(op) or snake_case(op)


def build(case: Case, ctx) -> tuple:
    """Build ``case``'s graph on ``ctx`` as WPT's buildAndExecuteGraph does;
    returns (graph, inputs {name: array}, expected {name: array}, tolerance).
    Raises CaseFailure, with the reason, where WebNN's call does not go through."""
    import jitnn
    from jitnn.graph import Operand
    if case.float16:
        raise CaseFailure("unsupported data type float16")
    resources = case.graph["inputs"]
    b = jitnn.GraphBuilder(ctx)
    operands: dict[str, Any] = {}          # graph inputs and constants made so far, by name
    values: dict[str, Any] = {}            # the operators' outputs, by name
    inputs: dict[str, np.ndarray] = {}

    def operand(name: str):
        if name in values:
            return values[name]
        if name not in operands:
            resource = resources[name]
            data = array(case, name, resource)
            try:
                if resource.get("constant"):
                    operands[name] = b.constant(data)
                else:
                    operands[name] = b.input(name, data.shape,
                                             dtype=resource["descriptor"]["dataType"])
                    inputs[name] = data
            except Exception as error:
                method = "constant" if resource.get("constant") else "input"
                raise CaseFailure(_phrase(f"GraphBuilder.{method}", error)) from error
        return operands[name]

    def is_value(item: Any) -> bool:
        return isinstance(item, str) and (item in resources or item in values)

    budgets = []
    for operator in case.graph["operators"]:
        op = operator["name"]
        positional, options, raw_options = [], {}, {}
        for argument in operator["arguments"]:
            ((key, value),) = argument.items()
            if key == "options":
                raw_options = value
                for name, option in value.items():
                    options[snake_case(name)] = (operand(option) if is_value(option)
                                                 else option_value(case, name, option))
            elif is_value(value):
                positional.append(operand(value))
            elif isinstance(value, list) and value and all(is_value(v) for v in value):
                positional.append([operand(v) for v in value])     # concat's inputs
            else:
                positional.append(value)
        method_name = builder_method(op)
        method = getattr(b, method_name, None)
        if method is None:
            raise CaseFailure(f"op not implemented: {method_name}")
        try:
            result = method(*positional, **options)
        except Exception as error:
            raise CaseFailure(_phrase(method_name, error)) from error
        names = operator["outputs"]
        if isinstance(names, list):
            if not isinstance(result, (list, tuple)) or len(result) != len(names):
                raise CaseFailure(f"{method_name} gave {type(result).__name__}, expected "
                                  f"{len(names)} operands")
            values.update(zip(names, result))
        else:
            values[names] = result
        shapes = [tuple(a.shape) for a in positional if isinstance(a, Operand)]
        plain = [a for a in positional if not isinstance(a, (Operand, list))]
        budgets.append(tolerance(op, shapes, raw_options, plain))

    expected, outputs = {}, {}
    for name, resource in case.graph["expectedOutputs"].items():
        want = array(case, name, resource)
        out = values.get(name)
        if out is None:
            raise CaseFailure(f"no operator computes the output {name!r}")
        if tuple(out.shape) != want.shape:
            raise CaseFailure(f"output {name} has shape {tuple(out.shape)}, expected "
                              f"{want.shape}")
        if np.dtype(out.dtype) != want.dtype:
            raise CaseFailure(f"output {name} is {np.dtype(out.dtype)}, expected {want.dtype}")
        expected[name], outputs[name] = want, out
    try:
        graph = b.build(outputs)
    except Exception as error:
        raise CaseFailure(_phrase("build", error)) from error
    return graph, inputs, expected, graph_tolerance(budgets)


_FLOAT_ONLY = re.compile(r"must have dtype float32, got an? (\w+) tensor")
_NO_SUCH_TYPE = re.compile(r"dtype must be one of .*, got '(\w+)'")


def _phrase(where: str, error: BaseException) -> str:
    """``error`` (raised by ``where``: an op, build, compute) as a short reason."""
    lines = str(error).strip().splitlines()
    message = lines[0] if lines else type(error).__name__
    if not isinstance(error, AssertionError) and type(error).__module__.split(".")[0] != "jitnn":
        message = f"{type(error).__name__}: {message}"      # a Python error, not jitnn's own
    found = _FLOAT_ONLY.search(message)
    if found:
        return f"{where}: {found.group(1)} inputs not supported yet (float32 only)"
    found = _NO_SUCH_TYPE.search(message)
    if found:
        return f"{found.group(1)} is not a jitnn data type"
    if message.startswith(f"{where}: "):
        message = message[len(where) + 2:]
    message = f"{where}: {message}"
    if len(message) > 100:                       # a long message: without its trailing hint
        message = re.sub(r"\s*\([^()]*\)$", "", message)
    return message if len(message) <= 90 else message[:87] + "..."


def run_case(case: Case, ctx) -> None:
    """Build, compute (``ctx.compute`` into arrays of the expected types and
    shapes) and compare every output; raises CaseFailure with the reason."""
    graph, inputs, expected, (metric, budget) = build(case, ctx)
    got = {name: np.zeros(want.shape, want.dtype) for name, want in expected.items()}
    try:
        ctx.compute(graph, inputs, got)
    except Exception as error:
        raise CaseFailure(_phrase("compute", error)) from error
    for name, want in expected.items():
        compare(name, got[name], want, metric, budget)


def failure_reason(case: Case, ctx) -> str | None:
    """Why ``case`` fails (the KNOWN_FAILURES reason), or None if it passes."""
    if case.key in WRONG_DATA:
        return WRONG_DATA[case.key]
    if case.float16:
        return FLOAT16
    try:
        run_case(case, ctx)
    except CaseFailure as failure:
        return str(failure)
    return None


# --- regenerating KNOWN_FAILURES ----------------------------------------------------------

def failures(ctx=None) -> dict[tuple[str, str], str]:
    """{(op, case name): reason} of every case that fails now."""
    import jitnn
    ctx = ctx or jitnn.Context()
    found = {}
    for case in cases():
        reason = failure_reason(case, ctx)
        if reason is not None:
            found[case.key] = reason
    return found


def failures_source(found: dict[tuple[str, str], str]) -> str:
    """``found`` as test_wpt_conformance.py's KNOWN_FAILURES, sorted and grouped by op."""
    lines = ["KNOWN_FAILURES = {"]
    op = None
    for key in sorted(found):
        if key[0] != op:
            op = key[0]
            lines.append(f"    # --- {op}")
        reason = "FLOAT16" if found[key] == FLOAT16 else repr(found[key])
        line = f"    {key!r}: {reason},"
        lines.extend([line] if len(line) <= 100 else [f"    {key!r}:", f"        {reason},"])
    lines.append("}")
    return "\n".join(lines)


#: the kinds of case summary() counts apart
KINDS = ("float32", "float16", "other types")


def kind(case: Case) -> str:
    """The case's kind: float32 (every input and output is), float16 (one is),
    else other types (integers, or a cast between types)."""
    types = {v["descriptor"]["dataType"] for part in ("inputs", "expectedOutputs")
             for v in case.graph[part].values()}
    return "float16" if "float16" in types else "float32" if types == {"float32"} \
        else "other types"


def summary(ctx=None) -> dict[str, dict[str, list[int]]]:
    """{op: {kind: [passed, failed]}} of every case (see :func:`kind`)."""
    import jitnn
    ctx = ctx or jitnn.Context()
    counts: dict[str, dict[str, list[int]]] = {}
    for case in cases():
        row = counts.setdefault(case.op, {k: [0, 0] for k in KINDS})
        row[kind(case)][failure_reason(case, ctx) is not None] += 1
    return counts


def main(argv: list[str]) -> int:
    if argv == ["--failures"]:
        print(failures_source(failures()))
        return 0
    if argv == ["--summary"]:
        counts = summary()
        counts["total"] = {k: [sum(row[k][i] for row in counts.values()) for i in (0, 1)]
                           for k in KINDS}
        print(f"{'op':24s}" + "".join(f"{k + ' pass/fail':>24s}" for k in KINDS))
        for op, row in counts.items():
            print(f"{op:24s}" + "".join(f"{row[k][0]:>18d} / {row[k][1]:<3d}" for k in KINDS))
        return 0
    print("usage: python -m tests.wpt --failures | --summary", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
