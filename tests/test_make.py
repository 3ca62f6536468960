"""The two commands of a fresh clone: ``make run`` and ``make test`` set themselves up, and CI runs
exactly ``make test``. Checked with ``make -n`` (what make would run), not by installing."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed here")


def planned(target: str, venv: Path, backend: str | None = None) -> list[str]:
    # Run as from a shell, even when the suite itself runs under `make test` (a nested make
    # would print "Entering directory" lines).
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES")}
    env.pop("KERAS_BACKEND", None)
    if backend:
        env["KERAS_BACKEND"] = backend
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "-B", target, f"VENV={venv}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_make_run_sets_up_then_explains_the_example_shapes(tmp_path):
    venv = tmp_path / "venv"
    lines = planned("run", venv)
    assert lines[0] == f"python3 -m venv {venv}"
    assert any(f"{venv}/bin/python -m pip install" in line and '-e ".[cpu]"' in line for line in lines)
    explain = [line for line in lines if line.startswith(f"{venv}/bin/saliency explain ")]
    assert len(explain) == 1
    images = explain[0].split()[2:]
    expected = sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "examples" / "shapes").glob("*.png")
        if not p.name.endswith("_mask.png")
    )
    assert sorted(images) == expected and len(expected) == 5
    assert lines.index(explain[0]) > max(i for i, line in enumerate(lines) if "pip install" in line)


def test_make_run_on_jax_installs_jax_and_not_tensorflow(tmp_path):
    venv = tmp_path / "venv"
    lines = planned("run", venv, backend="jax")
    installs = [line for line in lines if "pip install" in line and "-e " in line]
    assert installs and all('-e ".[jax]"' in line for line in installs), installs
    assert any(line.startswith(f"{venv}/bin/saliency explain ") for line in lines)


def test_make_run_on_torch_installs_torch_and_not_tensorflow(tmp_path):
    venv = tmp_path / "venv"
    lines = planned("run", venv, backend="torch")
    installs = [line for line in lines if "pip install" in line and "-e " in line]
    assert installs and all('-e ".[torch]"' in line for line in installs), installs
    assert any(line.startswith(f"{venv}/bin/saliency explain ") for line in lines)


def test_make_test_sets_up_then_runs_the_suite_and_ci_runs_exactly_make_test(tmp_path):
    venv = tmp_path / "venv"
    lines = planned("test", venv)
    assert lines[-3:] == [
        f"KERAS_BACKEND=tensorflow {venv}/bin/python -m pytest -q",
        f"KERAS_BACKEND=jax {venv}/bin/python -m pytest -q tests/backends",
        f"KERAS_BACKEND=torch {venv}/bin/python -m pytest -q tests/backends",
    ]  # the suite on TensorFlow, then the backends' tests in a JAX process and in a PyTorch process
    assert lines[-6:-3] == [
        f"{venv}/bin/ruff check saliency_kit tests scripts",
        f"{venv}/bin/ruff format --check saliency_kit tests scripts",
        f"{venv}/bin/mypy",
    ]  # lint and type-check before the suite
    assert any("pip install" in line and '-e ".[cpu,test,ray,docs]"' in line for line in lines[:-1])
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1] == "exec make test"
    assert not [line for line in ci if "pytest" in line and not line.lstrip().startswith("#")]
