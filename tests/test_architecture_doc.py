"""docs/architecture.md stays true: every file path and every dotted name it mentions resolves.

Paths (anything in backticks ending in ``.py``, ``.toml``, ``.html``, ``.keras``, ``.md`` or ``/``)
are relative to ``saliency_kit/`` unless they start with ``tests/``, ``scripts/``, ``docs/`` or
``pretrained_configs/`` (the model configs, at the repository's top level);
``NAME`` stands for any file (at least one must match) and ``*`` is a glob. Dotted names
(``api.explain``, ``propagation.composites.register``, ``cli.main.COMMANDS``) are looked up from
``saliency_kit``: the longest importable module, then attributes.
"""

from __future__ import annotations

import importlib
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
PATH = re.compile(r"^[\w./*-]+(\.py|\.toml|\.html|\.keras|\.md|/)$")
DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")


def _quoted() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # the data-flow drawing
    return sorted({token for token in re.findall(r"`([^`]+)`", text)})


def _paths() -> list[str]:
    return [token for token in _quoted() if PATH.match(token)]


def _names() -> list[str]:
    packages = {
        p.stem if p.is_file() else p.name for p in (ROOT / "saliency_kit").iterdir() if not p.name.startswith("_")
    }
    names = []
    for token in _quoted():
        token = token.split("(")[0]
        if DOTTED.match(token) and not PATH.match(token) and token.split(".")[0] in packages:
            names.append(token)
    return names


def test_the_doc_names_paths_and_names():
    assert len(_paths()) > 40 and len(_names()) > 40, (_paths(), _names())


@pytest.mark.parametrize("path", _paths())
def test_every_path_resolves(path):
    top = ("tests", "scripts", "docs", "saliency_kit", "pretrained_configs")
    base = ROOT if path.split("/")[0] in top else ROOT / "saliency_kit"
    pattern = path.replace("NAME", "*").rstrip("/")
    matches = [p for p in base.glob(pattern) if not p.name.startswith("__pycache__")]
    assert matches, f"docs/architecture.md names {path!r}, which does not exist under {base.relative_to(ROOT) or '.'}"


@pytest.mark.parametrize("name", _names())
def test_every_dotted_name_resolves(name):
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value = importlib.import_module("saliency_kit." + ".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            assert hasattr(value, attribute), f"docs/architecture.md names {name!r}: no {attribute!r}"
            value = getattr(value, attribute)
        return
    pytest.fail(f"docs/architecture.md names {name!r}, whose module does not exist")


def test_the_module_map_lists_every_module():
    """Every module of the package is named in the doc (a file, or its folder's ``NAME.py``)."""
    mentioned = set()
    for path in _paths():
        base = ROOT / "saliency_kit"
        mentioned |= {p.resolve() for p in base.glob(path.replace("NAME", "*").rstrip("/"))}
    missing = []
    for module in sorted((ROOT / "saliency_kit").rglob("*.py")):
        if module.name == "__init__.py" and module.parent != ROOT / "saliency_kit":
            continue
        if (
            module.resolve() in mentioned
            or module.parent.resolve() in mentioned
            or module.name in ("__init__.py", "__main__.py")
        ):
            continue
        missing.append(str(module.relative_to(ROOT)))
    assert not missing, f"modules docs/architecture.md does not mention: {missing}"
