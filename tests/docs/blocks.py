"""The fenced code blocks of README.md and the docs pages, and a runner that executes a page's
Python blocks in order in one namespace, like a doctest.

``python tests/docs/blocks.py RESULT.json PAGE...`` runs each page in a fresh namespace and a
fresh temporary folder (``examples/`` linked into it, so the pages' relative paths work and
anything they write stays there) and writes, per page, its ``failure`` (``null``, or the failing
block's line and traceback) and the ``seconds`` it took. One process runs every page: TensorFlow
is imported once, and whatever the pages register (a method, a composite, an input kind) stays out
of the test process."""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^(?P<indent> *)(?P<ticks>`{3,})(?P<info>[^`]*)$")


def fences(path: Path) -> list[tuple[int, str, str]]:
    """Every fenced block of ``path``: ``(line of its opening fence, info string, code)``."""
    found, lines = [], path.read_text(encoding="utf-8").splitlines()
    number = 0
    while number < len(lines):
        opening = FENCE.match(lines[number])
        if not opening:
            number += 1
            continue
        indent, ticks, start = opening["indent"], opening["ticks"], number
        body = []
        number += 1
        while number < len(lines) and lines[number].strip() != ticks:
            line = lines[number]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            number += 1
        found.append((start + 1, opening["info"].strip(), "\n".join(body) + "\n"))
        number += 1
    return found


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """The blocks fenced ```` ```python ```` (the ones a reader copies and runs)."""
    return [(line, code) for line, info, code in fences(path) if info == "python"]


def pages() -> list[Path]:
    """README.md and every markdown page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def run_page(path: Path) -> dict | None:
    """Run ``path``'s Python blocks in order; ``None``, or the failing block's line and error."""
    namespace: dict = {"__name__": "__main__"}
    with tempfile.TemporaryDirectory() as folder:
        os.symlink(ROOT / "examples", Path(folder) / "examples")
        os.chdir(folder)
        try:
            for line, code in python_blocks(path):
                name = f"{path.relative_to(ROOT)}:{line}"
                try:
                    exec(compile(code, name, "exec"), namespace)
                except BaseException as error:  # noqa: BLE001 - any failure of a block is reported, with its line
                    inside = [
                        frame.lineno for frame in traceback.extract_tb(error.__traceback__) if frame.filename == name
                    ]
                    where = line + inside[-1] if inside else line  # the page's line that raised (the fence is `line`)
                    return {"line": line, "at": where, "error": traceback.format_exc(limit=-6)}
        finally:
            os.chdir(ROOT)
    return None


def main(argv: list[str]) -> int:
    os.environ.setdefault("MPLBACKEND", "Agg")
    sys.path.insert(0, str(ROOT))
    result = {}
    for name in argv[1:]:
        start = time.monotonic()
        failure = run_page(ROOT / name)
        result[name] = {"failure": failure, "seconds": round(time.monotonic() - start, 1)}
        Path(argv[0]).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
