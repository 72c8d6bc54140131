"""Choosing a conv's algorithm by measurement (jitnn/tuning.py): a fake clock
decides which candidate wins, the decision is kept in a JSON file that a new
tuner (and a new process) reads back, a damaged file is ignored with one
warning, a file that cannot be written leaves the decisions in memory, and
whichever algorithm wins gives the float64 reference's numbers."""

import json
import subprocess
import sys
import warnings

import numpy as np
import pytest

import jitnn
from jitnn import cli, compile_pool, registry, tuning
from jitnn.kernels import _config
from jitnn.kernels import conv2d as conv_kernels

from .helpers import assert_close, random

C, HW = 16, 12                     # a 3x3 stride-1 conv with both candidates


class FakeClock:
    """Runs each candidate (so the kernels really run) and reports the
    seconds the test chose for it."""

    def __init__(self, **seconds):
        self.seconds = seconds
        self.calls: dict[str, int] = {}

    def __call__(self, name, run):
        run()
        self.calls[name] = self.calls.get(name, 0) + 1
        return self.seconds[name]


@pytest.fixture
def tune(monkeypatch, tmp_path):
    """Measuring on, into a file of this test's own; ``tune(**seconds)``
    installs a tuner timed by a FakeClock and returns it."""
    monkeypatch.setenv(tuning.ENV, "1")
    made = []

    def install(path=tmp_path / "tuning.json", writable=True, **seconds):
        made.append(tuning.Tuner(path, writable=writable, clock=FakeClock(**seconds),
                                 busy=lambda: False))
        tuning.use(made[-1])
        return made[-1]
    previous = tuning.use(None)
    # both candidates compiled first (a candidate the formula would not run
    # is timed only once it is compiled)
    for algorithm in ("direct", "winograd"):
        _conv_relu_residual(jitnn.Context(num_threads=1, conv_algorithm=algorithm))[0].numpy()
    yield install
    tuning.use(previous)


@pytest.fixture
def launched_paths(monkeypatch):
    """The paths of the conv launches run (candidates' runs, then the real one)."""
    paths = []
    original = conv_kernels.run_conv2d_launch

    def record(launch, *args):
        paths.append(launch.path)
        return original(launch, *args)
    monkeypatch.setattr(conv_kernels, "run_conv2d_launch", record)
    return paths


def _conv_relu_residual(ctx, seed=0):
    """conv2d + residual add + relu (the residual added in place: measuring
    must not add it twice), its inputs, and the float64 reference."""
    x = random((1, C, HW, HW), seed)
    w = random((C, C, 3, 3), seed + 1, 0.2)
    b = random((C,), seed + 2)
    r = random((1, C, HW, HW), seed + 3)
    y = jitnn.relu(jitnn.add(jitnn.conv2d(ctx.tensor(x), ctx.tensor(w), ctx.tensor(b),
                                          padding=1), ctx.tensor(r)))
    want = np.maximum(registry.reference("conv2d")(x, w, b, padding=1) + r, 0)
    return y, want


def _key(ctx):
    return tuning.conv2d_key(ctx.block, ctx.num_threads, "float32", 1, C, HW, HW, C, (3, 3),
                             (1, 1), (1, 1), (1, 1, 1, 1), 1)


@pytest.mark.parametrize("winner, loser", [("direct", "winograd"), ("winograd", "direct")])
def test_the_faster_candidate_runs_and_matches_the_reference(tune, launched_paths, winner,
                                                              loser):
    tuner = tune(**{winner: 1e-3, loser: 2e-3})
    ctx = jitnn.Context(num_threads=1)
    y, want = _conv_relu_residual(ctx)
    assert_close(y.numpy(), want, rtol=1e-4, atol=1e-4)
    # 3 ms a round: every round the budget allows, within the most rounds;
    # overturning the formula (Winograd) takes a second set of rounds
    rounds = min(tuning.MAX_ROUNDS, max(tuning.MIN_ROUNDS, int(tuning.BUDGET_S / 3e-3 + 0.999)))
    rounds *= 2 if winner == "direct" else 1
    assert tuner.clock.calls == {"direct": rounds, "winograd": rounds}
    assert launched_paths[-1] == winner and set(launched_paths[:-1]) == {"direct", "winograd"}
    decision = tuner.lookup(_key(ctx))
    assert decision.choice == winner and decision.formula == "winograd"
    assert decision.seconds == {winner: 1e-3, loser: 2e-3}
    text = jitnn.explain(y)
    assert f"algorithm: {winner}, measured on this host" in text
    assert ("winograd:36OI" in text) == (winner == "winograd")
    # the next run (a reused plan) runs the winner without measuring again
    launched_paths.clear()
    y2, want2 = _conv_relu_residual(ctx, seed=10)
    assert_close(y2.numpy(), want2, rtol=1e-4, atol=1e-4)
    assert launched_paths == [winner]
    assert sum(tuner.clock.calls.values()) == 2 * rounds


def test_the_formula_stands_within_the_margin(tune):
    tuner = tune(direct=1e-3, winograd=1e-3 * (1 + tuning.MARGIN / 2))
    ctx = jitnn.Context(num_threads=1)
    y, _ = _conv_relu_residual(ctx)
    y.numpy()
    assert tuner.lookup(_key(ctx)).choice == "winograd"


def test_a_second_set_of_rounds_must_agree_to_overturn_the_formula(tune):
    tuner = tune(direct=1e-3, winograd=2e-3)
    seconds = tuner.clock.seconds
    clock = tuner.clock

    first_set = min(tuning.MAX_ROUNDS, max(tuning.MIN_ROUNDS,
                                           int(tuning.BUDGET_S / 3e-3 + 0.999)))

    def burst(name, run):               # direct looks fast in the first set only
        if clock.calls.get("direct", 0) == first_set:
            seconds["direct"] = 1.0
        return clock(name, run)
    tuner.clock = burst
    key = "test key"
    runs = {"direct": lambda: None, "winograd": lambda: None}
    decision = tuner.measure(key, runs, "winograd")
    assert decision.choice == "winograd" and clock.calls["direct"] == first_set + \
        tuning.MIN_ROUNDS
    tuner.clock = clock
    seconds.update(direct=1e-3, winograd=2e-3)
    assert tuner.measure("other key", runs, "winograd").choice == "direct"


def test_widely_spread_timings_keep_the_formula_for_this_process_only(tune, tmp_path):
    tuner = tune(direct=1e-3, winograd=2e-3)
    clock = tuner.clock

    def busy(name, run):                # every other direct run 3x slower
        seconds = clock(name, run)
        return seconds * (3 if name == "direct" and clock.calls["direct"] % 2 else 1)
    tuner.clock = busy
    ctx = jitnn.Context(num_threads=1)
    y, want = _conv_relu_residual(ctx)
    assert_close(y.numpy(), want, rtol=1e-4, atol=1e-4)
    decision = tuner.lookup(_key(ctx))
    assert decision.choice == "winograd" and not decision.settled
    assert "the host was too busy to measure" in jitnn.explain(y)
    assert not (tmp_path / "tuning.json").exists()


def test_nothing_is_measured_while_other_work_shares_the_cores(tune, tmp_path, monkeypatch):
    tuner = tune(direct=1e-3, winograd=2e-3)
    tuner.busy = lambda: True
    ctx = jitnn.Context(num_threads=1)
    y, want = _conv_relu_residual(ctx)
    assert_close(y.numpy(), want, rtol=1e-4, atol=1e-4)
    assert tuner.clock.calls == {} and tuner.lookup(_key(ctx)) is None
    assert not (tmp_path / "tuning.json").exists()
    monkeypatch.setattr(tuning.os, "getloadavg", lambda: (99.0, 99.0, 99.0))
    assert tuning.host_busy()
    monkeypatch.setattr(tuning.os, "getloadavg", lambda: (0.1, 0.1, 0.1))
    assert not tuning.host_busy()


def test_the_file_is_read_back_by_a_new_tuner_and_a_new_process(tune, tmp_path,
                                                               launched_paths):
    path = tmp_path / "tuning.json"
    tune(direct=1e-3, winograd=2e-3)
    ctx = jitnn.Context(num_threads=1)
    _conv_relu_residual(ctx)[0].numpy()
    saved = json.loads(path.read_text())
    assert saved["format"] == tuning.FORMAT
    assert saved["decisions"][_key(ctx)]["choice"] == "direct"
    # a new tuner on the file (as in a new process): no measuring, direct runs
    fresh = tune(direct=5e-3, winograd=1e-3)
    launched_paths.clear()
    ctx2 = jitnn.Context(num_threads=1)
    y, want = _conv_relu_residual(ctx2, seed=5)
    assert_close(y.numpy(), want, rtol=1e-4, atol=1e-4)
    assert fresh.clock.calls == {} and launched_paths == ["direct"]
    code = ("import sys; from jitnn import tuning; "
            "d = tuning.Tuner(sys.argv[1]).lookup(sys.argv[2]); print(d.choice, d.formula)")
    result = subprocess.run([sys.executable, "-c", code, str(path), _key(ctx)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["direct", "winograd"]


def test_a_damaged_file_is_ignored_with_one_warning_and_rewritten(tune, tmp_path):
    path = tmp_path / "tuning.json"
    path.write_text('{"format": 1, "decisions": {"k": {"choice": ')
    tuner = tune(direct=2e-3, winograd=1e-3)
    with pytest.warns(RuntimeWarning, match="damaged tuning file") as caught:
        assert tuner.lookup("k") is None
        ctx = jitnn.Context(num_threads=1)
        y, want = _conv_relu_residual(ctx)
        assert_close(y.numpy(), want, rtol=1e-4, atol=1e-4)
    assert len([w for w in caught if "tuning" in str(w.message)]) == 1
    assert list(json.loads(path.read_text())["decisions"]) == [_key(ctx)]
    path.write_text(json.dumps({"format": 1, "decisions": {"k": {"choice": "x", "ms": {}}}}))
    with pytest.warns(RuntimeWarning, match="damaged"):
        assert tuning.Tuner(path).lookup("k") is None


def test_an_unwritable_file_keeps_the_decisions_in_memory(tune, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    tuner = tune(path=blocker / "tuning.json", direct=1e-3, winograd=2e-3)
    ctx = jitnn.Context(num_threads=1)
    with pytest.warns(RuntimeWarning, match="keeps its decisions in memory"):
        _conv_relu_residual(ctx)[0].numpy()
    assert tuner.lookup(_key(ctx)).choice == "direct" and not tuner.writable
    read_only = tune(path=tmp_path / "ro.json", writable=False, direct=1e-3, winograd=2e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _conv_relu_residual(jitnn.Context(num_threads=1))[0].numpy()
    assert read_only.lookup(_key(ctx)).choice == "direct"
    assert not (tmp_path / "ro.json").exists()


def test_off_switch_and_fixed_algorithms_measure_nothing(tune, monkeypatch):
    tuner = tune(direct=1e-3, winograd=2e-3)
    fixed = jitnn.Context(num_threads=1, conv_algorithm="winograd")
    y, _ = _conv_relu_residual(fixed)
    y.numpy()
    assert "(Context(conv_algorithm='winograd'))" in jitnn.explain(y)
    monkeypatch.setenv(tuning.ENV, "0")
    y, want = _conv_relu_residual(jitnn.Context(num_threads=1))
    assert_close(y.numpy(), want, rtol=1e-4, atol=1e-4)
    assert "algorithm: winograd by formula (JITNN_TUNE=0: not measured)" in jitnn.explain(y)
    assert tuner.clock.calls == {} and tuner.summary()[0] == 0
    assert "off (JITNN_TUNE=0)" in tuning.status()


def test_a_scouted_run_runs_both_candidates_and_decides_nothing(tune):
    tuner = tune(direct=1e-3, winograd=2e-3)
    ctx = jitnn.Context(num_threads=1)
    y, _ = _conv_relu_residual(ctx)
    pending = jitnn.explain(y)
    assert "winograd by formula, not measured yet (direct or winograd: timed at a first run " \
        "that has both compiled)" in pending
    compile_pool.scout(y.numpy)
    assert tuner.summary()[0] == 0 and tuner.clock.calls == {}


def test_a_candidate_without_compiled_code_is_not_timed(tune, monkeypatch, tmp_path):
    tuner = tune(direct=1e-3, winograd=2e-3)
    scouted = []

    def uncompiled(run):                # as if direct had no code yet
        scouted.append(run)
        return ["a kernel to compile"]
    monkeypatch.setattr(compile_pool, "scout", uncompiled)
    ctx = jitnn.Context(num_threads=1)
    y, want = _conv_relu_residual(ctx)
    assert_close(y.numpy(), want, rtol=1e-4, atol=1e-4)
    assert len(scouted) == 1 and tuner.clock.calls == {} and tuner.summary()[0] == 0
    assert "winograd by formula, not measured yet" in jitnn.explain(y)
    assert not (tmp_path / "tuning.json").exists()


def test_single_candidate_shapes_say_so(tune):
    tuner = tune(direct=1e-3, winograd=2e-3)
    ctx = jitnn.Context(num_threads=1)
    y = jitnn.conv2d(ctx.tensor(random((1, C, 8, 8))), ctx.tensor(random((C, C, 3, 3), 1)),
                     padding=1, strides=2)
    y.numpy()
    assert "algorithm: direct (the only one for this shape)" in jitnn.explain(y)
    assert tuner.clock.calls == {}


def test_info_and_explain_report_the_decisions(tune, tmp_path, capsys):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    tuner = tune(direct=1e-3, winograd=3e-3)
    w = numpy_helper.from_array(random((C, C, 3, 3), 1, 0.2), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, HW, HW])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C, HW, HW])], [w])
    path = tmp_path / "conv.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert cli.main(["explain", str(path), "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "algorithm: direct, measured on this host: direct 1.000 ms, winograd 3.000 ms " \
           "(formula: winograd)" in out
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("conv tuning"))
    assert str(tuner.path) in line and "1 conv algorithm decision(s)" in line
    assert f"(1 for {_config.TARGET_CPU})" in line


def test_candidates_are_direct_and_winograd_where_winograd_applies():
    candidates = conv_kernels.plan.conv2d_candidates
    base = dict(path="direct", kernel=(3, 3), strides=(1, 1), dilations=(1, 1), groups=1,
                in_channels=64, out_channels=64, batch=1, out_h=56, out_w=56, block=8)
    assert candidates(**base) == ("direct", "winograd")
    # few channels: the formula says direct, measuring may say otherwise
    assert candidates(**dict(base, in_channels=4)) == ("direct", "winograd")
    for change in (dict(kernel=(5, 5)), dict(strides=(2, 2)), dict(dilations=(2, 2)),
                   dict(groups=2), dict(path="1x1", kernel=(1, 1)),
                   dict(in_channels=2048, out_channels=2048, out_h=224, out_w=224)):
        assert candidates(**dict(base, **change)) == (), change
