"""`jitnn demo` in quick mode: the table, the plan, the plot; no timing assertions."""

import importlib.util
import io

from jitnn import cli, demo


def test_demo_quick_prints_the_table_and_the_blocked_plan(tmp_path):
    out = io.StringIO()
    result = demo.run(quick=True, threads=1, plot=str(tmp_path / "demo.png"), out=out)
    text = out.getvalue()
    assert "| workload | policy | time ms | reorders |" in text
    rows = result["rows"]
    assert {(r["workload"], r["policy"]) for r in rows} == {
        (w, p) for w in ("seed chain (quick)", "bottleneck (quick)")
        for p in ("blocked", "eager", "plain")}
    by = {(r["workload"], r["policy"]): r for r in rows}
    seed = "seed chain (quick)"
    assert by[seed, "blocked"]["reorders"] == 2 and by[seed, "blocked"]["launches"] == 3
    assert by[seed, "eager"]["reorders"] == 2 and by[seed, "eager"]["launches"] == 6
    assert by[seed, "plain"]["reorders"] == 6
    assert by["bottleneck (quick)", "blocked"]["fused"] == 7    # 3 bn, add, 3 relu
    assert "all three policies give the same numbers" in text
    for row in rows:                          # time = op kernels + reorders + the runtime
        assert 0 < row["kernel_ms"] < row["ms"] and 0 <= row["runtime_share"] < 1
        rest = 1 - row["tax"] - row["kernel_ms"] / row["ms"]
        assert abs(row["runtime_share"] - max(0.0, rest)) < 1e-9
    assert max(r.get("max_diff", 0) for r in rows) < 1e-3
    assert "conv2d + relu" in result["explain"] and "reorder tax" in result["explain"]
    if importlib.util.find_spec("matplotlib") is not None:
        assert (tmp_path / "demo.png").read_bytes()[:4] == b"\x89PNG"
    else:
        assert "pip install matplotlib" in text and result["plot"] is None


def test_demo_command_line(tmp_path, capsys):
    assert cli.main(["demo", "--quick", "--threads", "1", "--no-plot"]) == 0
    text = capsys.readouterr().out
    assert "jitnn demo" in text and "speedup over plain" in text and "plot:" not in text
