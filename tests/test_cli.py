"""The command line."""

import subprocess
import sys

from jitnn import cli


def test_info_prints_every_fact(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    for label in ("CPU", "SIMD", "target", "block", "threads", "threading layer", "numba",
                  "LLVM", "kernel cache", "cache size"):
        assert label in out, label


def test_console_entry_point_runs():
    result = subprocess.run([sys.executable, "-m", "jitnn.cli", "info"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "block" in result.stdout


def test_no_command_prints_help(capsys):
    assert cli.main([]) == 2
    assert "info" in capsys.readouterr().out


def test_every_runtime_package_is_installed_by_pyproject():
    # An editable install finds any folder; a wheel only the listed packages.
    import pathlib
    import tomllib
    root = pathlib.Path(__file__).resolve().parent.parent
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {"jitnn" + "".join("." + part for part in path.parent.relative_to(root / "jitnn").parts)
             for path in (root / "jitnn").rglob("__init__.py")}
    # kernels/ is installed as jitnn.kernels, with its subpackages
    found |= {"jitnn.kernels" + "".join("." + part for part in
                                        path.parent.relative_to(root / "kernels").parts)
              for path in (root / "kernels").rglob("__init__.py")}
    assert found == listed
