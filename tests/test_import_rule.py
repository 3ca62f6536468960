"""Imports wait inside a function only for what is heavy to load.

A function may import a heavy third-party library (``HEAVY_LIBRARIES``), or one of the package's own
modules whose import loads one (a module that imports Keras at its top, say): that keeps ``import
saliency_kit``, ``saliency methods`` and the command line's ``--help`` quick and framework-free.
Everything else — the standard library, and the package's light modules — is imported at the top of
the module, where a reader looks for it.
"""

from __future__ import annotations

import ast
import pathlib
from collections.abc import Iterator

ROOT = pathlib.Path(__file__).resolve().parents[1]

HEAVY_LIBRARIES = {
    "tensorflow", "keras", "keras_hub", "matplotlib", "PIL", "skimage", "scipy", "ray", "torch", "jax",
    "IPython", "selenium", "tensorboard", "numpy", "tqdm",
}  # fmt: skip

#: Heavy libraries the package loads on ``import saliency_kit.cli`` anyway: a package module that
#: imports only these at its top gains nothing by waiting inside a function, so it is not heavy.
LOADED_AT_START = {"numpy", "PIL", "tqdm"}

#: Modules that still import light modules (the standard library, the package's own) inside
#: functions, each with its count when it was listed: the test fails if one grows, and a module with
#: none left must leave this table.
WAITING_FOR_TOP_LEVEL_IMPORTS: dict[str, int] = {}


def _modules(package: pathlib.Path) -> dict[str, pathlib.Path]:
    """``{dotted module name: path}`` of every module under ``package`` (a package's ``__init__``
    under the package's own name)."""
    modules = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _imports(name: str, path: pathlib.Path, modules: dict) -> Iterator[tuple[str, bool]]:
    """``(imported name, inside a function)`` for every import ``path`` runs (not those under ``if
    TYPE_CHECKING:``): relative imports resolved, ``from pkg import name`` naming the submodule
    ``pkg.name`` when it is one, and a package module named by the nearest module that exists."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def resolve(target: str) -> str:
        while target.startswith(package.split(".")[0] + ".") and target not in modules:
            target = target.rpartition(".")[0]
        return target

    def walk(node: ast.AST, in_function: bool) -> Iterator[tuple[str, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and getattr(child.test, "id", getattr(child.test, "attr", None)) == (
                "TYPE_CHECKING"
            ):
                for branch in child.orelse:
                    yield from walk(ast.Module(body=[branch], type_ignores=[]), in_function)
            elif isinstance(child, ast.Import):
                yield from ((resolve(alias.name), in_function) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - child.level + 1] + ([base] if base else []))
                for alias in child.names:
                    full = f"{base}.{alias.name}"
                    yield resolve(full if full in modules else base), in_function
            else:
                function = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                yield from walk(child, in_function or function)

    yield from walk(ast.parse(path.read_text(encoding="utf-8")), False)


def _parents(module: str) -> list[str]:
    """The packages Python imports before ``module``, the top package excepted (its ``__init__``
    imports lazily)."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(2, len(parts))]


def heavy_modules(package: pathlib.Path) -> set[str]:
    """The modules of ``package`` whose import loads a heavy library not loaded at start, through
    their own top-level imports or those of the modules (and packages) they import."""
    modules = _modules(package)
    top_level = {
        name: {target for target, inside in _imports(name, path, modules) if not inside}
        for name, path in modules.items()
    }
    loads = HEAVY_LIBRARIES - LOADED_AT_START
    heavy = {name for name, targets in top_level.items() if any(t.split(".")[0] in loads for t in targets)}
    grown = True
    while grown:
        before = len(heavy)
        heavy |= {
            name
            for name, targets in top_level.items()
            if any(t in heavy or set(_parents(t)) & heavy for t in targets if t in modules)
        }
        grown = len(heavy) > before
    return heavy


def light_imports_inside_functions(package: pathlib.Path) -> dict[str, list[str]]:
    """``{path relative to the package's parent: [light modules it imports inside functions]}``."""
    modules, heavy = _modules(package), heavy_modules(package)
    found = {}
    for name, path in sorted(modules.items()):
        light = [
            target
            for target, inside in _imports(name, path, modules)
            if inside
            and not (target in heavy or set(_parents(target)) & heavy)
            and not (target not in modules and target.split(".")[0] in HEAVY_LIBRARIES)
        ]
        if light:
            found[path.relative_to(package.parent).as_posix()] = light
    return found


def test_functions_import_only_heavy_modules_inside_themselves():
    found = light_imports_inside_functions(ROOT / "saliency_kit")
    grown = {
        path: targets for path, targets in found.items() if len(targets) > WAITING_FOR_TOP_LEVEL_IMPORTS.get(path, 0)
    }
    assert not grown, f"import these at the top of the module (they are light to load): {grown}"
    done = [path for path in WAITING_FOR_TOP_LEVEL_IMPORTS if path not in found]
    assert not done, f"no light imports inside functions left: remove them from WAITING_FOR_TOP_LEVEL_IMPORTS: {done}"


def test_the_import_rule_tells_heavy_from_light(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from . import model\n")
    (package / "sub" / "model.py").write_text("import keras\n")
    (package / "plain.py").write_text("import numpy\nfrom .sub import model\nif False:\n    pass\n")
    (package / "names.py").write_text("import json\n")
    (package / "user.py").write_text(
        "import json\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from . import names\n"
        "def f():\n    import keras\n    from matplotlib import pyplot\n    import numpy\n"
        "    from .sub import model\n    from . import plain\n    import json\n"
        "    def g():\n        from .names import x\n        from . import names\n"
        "    h = lambda: __import__('os')\n"
    )
    assert heavy_modules(package) == {"pkg.sub", "pkg.sub.model", "pkg.plain"}
    assert light_imports_inside_functions(package) == {"pkg/user.py": ["json", "pkg.names", "pkg.names"]}
