"""Every ```` ```python ```` block of README.md and of the docs pages runs: one test per page, its
blocks run in order in one namespace (like a doctest), offline, on the shipped models, in a
temporary folder. A failing block fails its page's test, naming the page and the block's line.
Blocks that are not Python a reader runs here are fenced otherwise (``bash``, ``text``, ``toml``),
and the two that need what this machine does not have (a Ray cluster, a downloaded language
model) are fenced ``{.python .no-run}``, listed below."""

import json
import subprocess
import sys

import pytest
from blocks import ROOT, fences, pages, python_blocks

KNOWN = {"python", "bash", "text", "toml", "json", "{.python .no-run}"}
#: the Python a reader cannot run here, and why
NOT_RUN = {
    "docs/guide/batch.md": "ray_runner.run on a Ray cluster at address='auto'",
    "docs/guide/transformers.md": "CausalLM.from_preset('gpt2_base_en') downloads GPT-2",
}
PAGES = [path for path in pages() if python_blocks(path)]


def _name(path) -> str:
    return str(path.relative_to(ROOT))


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    """Each page's outcome: its ``failure`` (``None``, or the failing block's line and traceback)
    and ``seconds`` (one process runs them all)."""
    result = tmp_path_factory.mktemp("blocks") / "result.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "docs" / "blocks.py"), str(result), *map(_name, PAGES)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0 and result.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(result.read_text(encoding="utf-8"))


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_the_python_blocks_of_the_page_run(outcomes, page):
    failure = outcomes[_name(page)]["failure"]
    assert failure is None, (
        f"{_name(page)}:{failure['at']}, in the block at line {failure['line']}:\n{failure['error']}"
    )


def test_every_block_is_fenced_with_what_it_is():
    """A block without a language, or with one no reader would run, is not silently skipped."""
    unknown = [f"{_name(p)}:{line} {info!r}" for p in pages() for line, info, _ in fences(p) if info not in KNOWN]
    assert not unknown, unknown
    not_run = {_name(p) for p in pages() for _, info, _ in fences(p) if info == "{.python .no-run}"}
    assert not_run == set(NOT_RUN), not_run


def test_the_pages_have_python_to_run():
    """The collection finds the README's quick start and the guide's examples."""
    names = {_name(p) for p in PAGES}
    assert "README.md" in names and "docs/guide/python.md" in names and len(names) >= 10, names
