"""Load the WebNN conformance vectors (W3C Web Platform Tests, BSD-3-Clause;
see tests/data/wpt/README.md) for the float32 cases of one operation."""

import json
from pathlib import Path

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
