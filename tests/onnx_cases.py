"""ONNX's own test data as external oracles: node test cases built in memory
(``onnx.backend.test.case.node``) and the PyTorch-converted models shipped in
the onnx package. Tests that use these skip when onnx is not installed (it is
in the ``test`` extra, so the README's test command installs it)."""

import functools
import glob
import os
import warnings

import numpy as np


@functools.lru_cache(maxsize=None)
def _all_node_cases():
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings():  # the case generators overflow casts on purpose
        warnings.simplefilter("ignore")
        # One call for every op: the collector caches a module-level list on
        # its first call, so a second call with another op would see the first.
        return tuple(collect_testcases(None))


def node_cases(op_type):
    """[(name, node, inputs, expected outputs)] for ONNX node tests of op_type."""
    cases = []
    for case in _all_node_cases():
        graph = case.model.graph
        if len(graph.node) != 1 or graph.node[0].op_type != op_type:
            continue
        for inputs, outputs in case.data_sets:
            cases.append((case.name, graph.node[0], list(inputs), list(outputs)))
    return cases


def attributes(node):
    import onnx
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def pytorch_converted(prefix):
    """[(name, model, inputs, outputs)] of onnx's pytorch-converted test models."""
    import onnx
    from onnx import numpy_helper
    root = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data",
                        "pytorch-converted")
    cases = []
    for folder in sorted(glob.glob(os.path.join(root, prefix + "*"))):
        model = onnx.load(os.path.join(folder, "model.onnx"))
        for data_set in sorted(glob.glob(os.path.join(folder, "test_data_set_*"))):
            def read(kind):
                files = sorted(glob.glob(os.path.join(data_set, f"{kind}_*.pb")))
                return [numpy_helper.to_array(onnx.load_tensor(f)) for f in files]
            cases.append((os.path.basename(folder), model, read("input"), read("output")))
    return cases


def initializers(model):
    from onnx import numpy_helper
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def as_float32(array):
    return np.asarray(array, np.float32)
