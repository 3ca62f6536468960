"""The repository's own habits: it refers to nothing outside itself, and no module grows past a size
a reader can hold (a file over the limit is split at its seams)."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
MAX_LINES = 450

# Written in pieces so that this file does not match itself.
OUTSIDE = re.compile(
    "|".join(
        [
            r"API" + r"\.md",  # a contract file that is not in the repository
            "\u00a7",  # its section signs
            r"\bissue[- ]?#?\d+",  # an issue tracker's numbers
            r"\bthe " + r"issue's\b",
        ]
    ),
    re.IGNORECASE,
)


def _sources():
    for name in ("README.md", "Makefile", "pyproject.toml"):
        yield ROOT / name
    for folder in ("saliency_kit", "pretrained_configs", "tests", "scripts", "docs"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in (".py", ".toml", ".html", ".md", ".txt") and path.is_file():
                yield path


def test_no_file_refers_to_anything_outside_the_repository():
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in _sources()
        if path.suffix != ".txt"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not found, "\n".join(found)


#: Modules still over the limit, each with its length when it was listed: the test fails if one
#: grows, and once one is under the limit it must leave this table.
WAITING_FOR_A_SPLIT: dict[str, int] = {}


def test_no_module_is_longer_than_the_limit():
    lengths = {
        str(path.relative_to(ROOT)): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted((ROOT / "saliency_kit").rglob("*.py"))
    }
    long = {path: count for path, count in lengths.items() if count > max(MAX_LINES, WAITING_FOR_A_SPLIT.get(path, 0))}
    assert not long, f"modules over {MAX_LINES} lines (split them at their seams): {long}"
    stale = [path for path in WAITING_FOR_A_SPLIT if lengths.get(path, 0) <= MAX_LINES]
    assert not stale, f"under the limit now: remove them from WAITING_FOR_A_SPLIT: {stale}"


def _setuptools() -> dict:
    """pyproject's ``[tool.setuptools]`` table."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]


def _package_folders() -> dict[str, pathlib.Path]:
    """``{package: its folder in the repository}``: a dotted path, or pyproject's ``package-dir`` mapping."""
    table = _setuptools()
    mapped = table.get("package-dir", {})
    return {name: ROOT / mapped.get(name, name.replace(".", "/")) for name in table["packages"]}


def test_every_package_folder_is_installed():
    """A (non-editable) install takes the packages pyproject lists: every folder of the package with an
    ``__init__.py`` is listed, and the model configs come from the top-level ``pretrained_configs/``."""
    folders = _package_folders()
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "saliency_kit").rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    assert found <= set(folders), f"add them to pyproject's packages: {sorted(found - set(folders))}"
    assert folders["saliency_kit.pretrained_configs"] == ROOT / "pretrained_configs"
    assert not (ROOT / "saliency_kit" / "pretrained_configs").exists(), "one copy of the configs, at the top level"
    absent = [name for name, folder in folders.items() if not (folder / "__init__.py").is_file()]
    assert not absent, f"listed in pyproject's packages with no folder: {absent}"


def test_every_data_file_of_the_package_is_declared_package_data():
    """A file the package reads at run time (the gallery page, model configs, class names, the
    shipped model) must be in the wheel: matched by a ``package-data`` pattern of its package."""
    import fnmatch

    declared = _setuptools()["package-data"]
    package_of = {folder: name for name, folder in _package_folders().items()}
    missing = []
    for folder in package_of:
        for path in sorted(folder.glob("*")):
            if not path.is_file() or path.suffix in (".py", ".pyc"):
                continue
            if not any(fnmatch.fnmatch(path.name, pattern) for pattern in declared.get(package_of[folder], ())):
                missing.append(str(path.relative_to(ROOT)))
    assert not missing, f"not declared in pyproject.toml's package-data: {missing}"
    assert sorted(p.name for p in (ROOT / "pretrained_configs").glob("*.toml")), "no model config found"


def _imports(path: pathlib.Path) -> set[str]:
    """The absolute names of the modules ``path`` imports (function-level imports included)."""
    import ast

    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            base = base[: len(base) - node.level + 1] if node.level else []
            module = ".".join([*base, node.module] if node.module else base)
            if node.module:
                found.add(module)
            found |= {f"{module}.{alias.name}" for alias in node.names}
    return found


def test_library_modules_import_each_other_directly_and_never_the_command_line():
    wrong = []
    for path in sorted((ROOT / "saliency_kit").rglob("*.py")):
        inside_cli = (ROOT / "saliency_kit" / "cli") in path.parents
        for name in _imports(path):
            if name == "saliency_kit":
                wrong.append(f"{path.relative_to(ROOT)} imports saliency_kit itself (import the module it needs)")
            elif name.startswith("saliency_kit.cli") and not inside_cli and path.name != "__main__.py":
                wrong.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not wrong, "\n".join(wrong)


def test_the_model_rewrite_knows_propagation_only_through_rewrite_model():
    names = _imports(ROOT / "saliency_kit" / "model" / "rewrite.py")
    assert not any(name.startswith("saliency_kit.propagation") for name in names), names


def test_test_files_have_names_unique_across_the_tree():
    """``tests/`` has no ``__init__.py``: pytest imports a test file by its name alone, so two files of
    one name in different folders would clash at collection."""
    seen: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if path.name != "conftest.py":
            seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert not list((ROOT / "tests").rglob("__init__.py"))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, clashes


def _top_level(tree) -> list:
    """The module's top-level statements, those inside top-level ``if`` and ``try`` blocks included."""
    import ast

    found, pending = [], list(tree.body)
    while pending:
        node = pending.pop(0)
        found.append(node)
        if isinstance(node, ast.If):
            pending[:0] = node.body + node.orelse
        elif isinstance(node, ast.Try):
            pending[:0] = node.body + [s for h in node.handlers for s in h.body] + node.orelse + node.finalbody
    return found


def test_every_module_with_public_names_lists_them_in_all():
    """A module defining public functions or classes declares ``__all__`` with each of them, and
    ``__all__`` names only what the module defines or imports (or serves from a lazy ``__getattr__``
    table of names written out in the module, or, for a computed ``__all__``, sets from a registry)."""
    import ast
    import importlib

    wrong = []
    for path in sorted((ROOT / "saliency_kit").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        where = path.relative_to(ROOT)
        defined, public, declared, computed = set(), [], None, None
        for node in _top_level(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
                if not node.name.startswith("_"):
                    public.append(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for name in (n for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)):
                    defined.add(name.id)
                    if name.id == "__all__" and isinstance(node, ast.Assign):
                        listing = node
                        try:
                            declared = ast.literal_eval(node.value)
                        except ValueError:  # computed (lazy names, a registry's): read it from the module
                            module = ".".join(where.with_suffix("").parts).removesuffix(".__init__")
                            computed = importlib.import_module(module)
                            declared = computed.__all__
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                defined |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        if declared is None:
            if public:
                wrong.append(f"{where}: no __all__, but it defines {public}")
            continue
        lazy = set()
        if "__getattr__" in defined:  # names served on first use: written out in the module's tables
            listed = set(map(id, ast.walk(listing)))
            lazy = {
                n.value
                for n in ast.walk(tree)
                if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in listed
            }
        made = {name for name in declared if computed is not None and name in vars(computed)}  # from a registry
        unknown = [name for name in declared if name not in defined and name not in lazy and name not in made]
        if unknown:
            wrong.append(f"{where}: __all__ names what the module neither defines nor imports: {unknown}")
        unlisted = [name for name in public if name not in declared]
        if unlisted:
            wrong.append(f"{where}: public names missing from __all__: {unlisted}")
    assert not wrong, "\n".join(wrong)


def test_no_module_imports_another_modules_private_names():
    """``from .x import _name`` couples a module to another's internals: what two modules share is
    public in the one that defines it."""
    import ast

    found = []
    for path in sorted((ROOT / "saliency_kit").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("saliency_kit")):
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                if private:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {'.' * node.level}{node.module} {private}")
    assert not found, found


MAX_FUNCTION_LINES = 100
MAX_PARAMETERS = 10


def _functions(path: pathlib.Path):
    """``(qualified name, lines, parameters)`` of every function in ``path``, nested ones included.
    Parameters count positional and keyword-only ones, not ``*args``/``**kwargs``, nor the
    ``self``/``cls`` of a method."""
    import ast

    def visit(node, prefix: str, in_class: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                arguments = child.args
                count = len(arguments.posonlyargs) + len(arguments.args) + len(arguments.kwonlyargs)
                static = any(getattr(d, "id", None) == "staticmethod" for d in child.decorator_list)
                count -= int(in_class and not static and count > 0)
                yield f"{prefix}{child.name}", child.end_lineno - child.lineno + 1, count
                yield from visit(child, f"{prefix}{child.name}.", False)
            elif isinstance(child, ast.ClassDef):
                yield from visit(child, f"{prefix}{child.name}.", True)
            else:
                yield from visit(child, prefix, in_class)

    yield from visit(ast.parse(path.read_text(encoding="utf-8")), "", False)


def test_no_function_is_longer_or_takes_more_parameters_than_the_limits():
    measured = {
        f"{path.relative_to(ROOT)}:{name}": (lines, count)
        for path in sorted((ROOT / "saliency_kit").rglob("*.py"))
        for name, lines, count in _functions(path)
    }
    over = {name: size for name, size in measured.items() if size[0] > MAX_FUNCTION_LINES or size[1] > MAX_PARAMETERS}
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines or {MAX_PARAMETERS} parameters: {over}"


MIN_TYPED_SHARE = 0.90

#: Areas of the package (a subpackage or a top-level module) whose public functions are not all
#: fully typed yet, each with its count of untyped ones when it was listed: the test fails if one
#: grows, and an area typed in full must leave this table. Every other area is typed in full.
WAITING_FOR_TYPES: dict[str, int] = {}


def _public_functions(path: pathlib.Path):
    """``(name, fully typed)`` of each public function of ``path``: module-level functions and the
    methods of module-level classes, names not starting with ``_``. Fully typed: every parameter
    (``*args``/``**kwargs`` included, a method's ``self``/``cls`` not) and the return annotated."""
    import ast

    def typed(function, method: bool) -> bool:
        arguments = function.args
        parameters = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
        static = any(getattr(d, "id", None) == "staticmethod" for d in function.decorator_list)
        parameters = parameters[1:] if method and not static else parameters
        parameters += [p for p in (arguments.vararg, arguments.kwarg) if p is not None]
        return function.returns is not None and all(p.annotation is not None for p in parameters)

    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, functions) and not node.name.startswith("_"):
            yield node.name, typed(node, False)
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            for item in node.body:
                if isinstance(item, functions) and not item.name.startswith("_"):
                    yield f"{node.name}.{item.name}", typed(item, True)


def test_public_functions_are_fully_typed():
    untyped: dict[str, list[str]] = {}
    total = 0
    for path in sorted((ROOT / "saliency_kit").rglob("*.py")):
        relative = path.relative_to(ROOT / "saliency_kit")
        area = relative.parts[0]
        for name, typed in _public_functions(path):
            total += 1
            if not typed:
                untyped.setdefault(area, []).append(f"{relative}:{name}")
    share = 1 - sum(map(len, untyped.values())) / total
    assert share >= MIN_TYPED_SHARE, f"{share:.1%} of the {total} public functions are fully typed"
    grown = {area: names for area, names in untyped.items() if len(names) > WAITING_FOR_TYPES.get(area, 0)}
    assert not grown, f"public functions not fully typed (annotate every parameter and the return): {grown}"
    done = [area for area in WAITING_FOR_TYPES if area not in untyped]
    assert not done, f"typed in full now: remove them from WAITING_FOR_TYPES: {done}"
