"""The seams of the package: methods reach TensorFlow only through the engine's context (and
``keras.ops``), the engine reaches its backend only through one declared protocol, the context's
seeded draws follow their documented keys, and no two modules import each other in a cycle,
even counting imports inside functions."""

import ast
import inspect
import io
import pathlib
import tokenize

import numpy as np
import pytest

from saliency_kit import engine
from saliency_kit.engine import backend
from saliency_kit.targets import Classes

PACKAGE = pathlib.Path(engine.__file__).resolve().parents[1]


# -- no TensorFlow in the methods ------------------------------------------------------------------
def tensorflow_mentions(source: str) -> list[str]:
    """``"line: text"`` wherever code names TensorFlow: an import of it, the name ``tensorflow`` or
    ``tf``, or a string naming the module (as ``importlib.import_module("tensorflow")`` would).
    Comments and docstrings may mention it in prose."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        if any(name.split(".")[0] == "tensorflow" for name in names):
            found.append(f"{node.lineno}: import {', '.join(names)}")
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    for token in tokens:
        if token.type == tokenize.NAME and token.string in ("tensorflow", "tf"):
            found.append(f"{token.start[0]}: {token.line.strip()}")
        elif token.type == tokenize.STRING and token.string.strip("'\"rbf").split(".")[0] == "tensorflow":
            found.append(f"{token.start[0]}: {token.line.strip()}")
    return sorted(set(found))


def test_no_method_module_names_tensorflow():
    offenders = [
        f"methods/{path.name}:{hit}"
        for path in sorted((PACKAGE / "methods").glob("*.py"))
        for hit in tensorflow_mentions(path.read_text())
    ]
    assert not offenders, "methods must use the context and keras.ops, not TensorFlow:\n" + "\n".join(offenders)


@pytest.mark.parametrize(
    "code",
    [
        "import tensorflow as tf\n",
        "from tensorflow import nn\n",
        "x = tf.reduce_sum(y)\n",
        "import importlib\nm = importlib.import_module('tensorflow')\n",
    ],
)
def test_the_guard_catches_each_way_of_naming_tensorflow(code):
    assert tensorflow_mentions(code)


def test_prose_about_tensorflow_is_not_an_offence():
    assert not tensorflow_mentions('"""Upsampled as ``tf.image.resize`` does (TensorFlow)."""\nx = 1  # like tf\n')


# -- one backend protocol -----------------------------------------------------------------------
def test_the_tensorflow_backend_implements_the_protocol():
    from saliency_kit.engine import tf as tf_backend

    assert backend.active() is tf_backend and isinstance(tf_backend, backend.Backend)
    declared = {name for name in vars(backend.Backend) if not name.startswith("_")} | set(
        backend.Backend.__annotations__
    )
    assert declared == {
        "Context",
        "ScoreView",
        "build_kernel",
        "build_values_kernel",
        "vectorise_classes",
        "eagerly",
        "array_spec",
        "to_numpy",
        "rewrite",
        "weight_sync",
        "derived_state",
        "score_columns",
    }
    for name in declared - {"Context", "ScoreView"}:  # the protocol states the arguments the engine passes
        wanted = list(inspect.signature(getattr(backend.Backend, name)).parameters)[1:]
        assert list(inspect.signature(getattr(tf_backend, name)).parameters)[: len(wanted)] == wanted, name


def test_only_the_accessor_imports_the_tensorflow_backend():
    importers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                module = node.module or ""
                named = {alias.name for alias in node.names}
                if (
                    module.endswith("engine.tf")
                    or (module in ("", "engine") and "tf" in named and path.parent.name == "engine")
                    or module == "tf"
                ):
                    importers.append(str(path.relative_to(PACKAGE)))
    assert importers == ["engine/backend.py"]


# -- the import graph ---------------------------------------------------------------------------
def import_graph(root: pathlib.Path) -> dict:
    """``{module: {modules it imports}}`` over the package, counting imports anywhere (inside
    functions too; not those under ``if TYPE_CHECKING:``, which never run); ``from pkg import
    name`` counts the submodule ``pkg.name`` when it is one. Importing ``a.b.c`` runs the package
    ``__init__`` of ``a.b`` first, so it counts as importing ``a.b`` too, unless the importer lies
    inside ``a.b`` (its ``__init__`` is already running); the top package's own ``__init__``
    imports lazily and is not counted."""
    files = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        edges = set()
        for node in _executed_nodes(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in files else base for alias in node.names]
            else:
                continue
            for target in targets:
                while target and target not in files:
                    target = target.rpartition(".")[0]
                if target and target != module:
                    edges.add(target)
                    edges |= _packages_run_first(target, module, root.name) & files.keys()
        graph[module] = edges
    return graph


def _packages_run_first(target: str, importer: str, top: str) -> set:
    """The package ``__init__``s Python runs before ``target`` that ``importer`` is not inside."""
    parts = target.split(".")
    parents = {".".join(parts[:i]) for i in range(1, len(parts))}
    return {p for p in parents if p != top and not (importer == p or importer.startswith(p + "."))}


def _executed_nodes(tree: ast.AST):
    """Every node of ``tree`` except those under an ``if TYPE_CHECKING:`` block."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            yield from (n for child in node.orelse for n in [child, *_executed_nodes(child)])
            continue
        yield node
        yield from _executed_nodes(node)


def cycles(graph: dict) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_even_counting_imports_inside_functions():
    graph = import_graph(PACKAGE)
    assert len(graph) > 40 and "saliency_kit.methods.base" in graph["saliency_kit.methods.gradient"]
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_function_level_cycle(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("from .b import x\n")
    (tmp_path / "pkg" / "b.py").write_text("x = 1\ndef f():\n    from . import a\n")
    (tmp_path / "pkg" / "c.py").write_text("import pkg.a\n")
    graph = import_graph(tmp_path / "pkg")
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.c"] == {"pkg.a"}
    assert cycles(graph) == [["pkg.a", "pkg.b"]]


def test_the_cycle_finder_counts_the_package_init_an_import_runs_first(tmp_path):
    """``a`` imports ``pkg.sub.x``, whose package ``__init__`` imports ``a``: a cycle, though no
    two modules name each other; an import under ``if TYPE_CHECKING:`` never runs and is not one."""
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "sub" / "__init__.py").write_text("from .x import y\nfrom .. import a\n")
    (tmp_path / "pkg" / "sub" / "x.py").write_text("y = 1\n")
    (tmp_path / "pkg" / "a.py").write_text("def f():\n    from .sub.x import y\n")
    (tmp_path / "pkg" / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n")
    graph = import_graph(tmp_path / "pkg")
    assert graph["pkg.a"] == {"pkg.sub.x", "pkg.sub"} and graph["pkg.b"] == set()
    assert graph["pkg.sub.x"] == set()  # inside pkg.sub: its own package is already running
    assert cycles(graph) == [["pkg.a", "pkg.sub"]]


# -- the context's seeded draws and host steps ----------------------------------------------------
@pytest.fixture(scope="module")
def tiny():
    import keras

    inputs = keras.Input((3,))
    return keras.Model(inputs, keras.layers.Dense(2)(inputs))


def _draws(ctx, seed, shared):
    from keras import ops

    ids = ops.arange(4, dtype="int32")
    if shared:
        u = ops.broadcast_to(ctx.uniform(ids, 4, [3], shared=True)[None], [ctx.inputs.shape[0], 4, 3])
    else:
        u = ctx.uniform(ids, 4, [3])  # [n, 4, 3]
    return ops.repeat(u[:, None], ctx.num_targets, axis=1)  # [n, K, 4, 3]


def _per_input(ctx, seed):
    return _draws(ctx, seed, shared=False)


def _shared(ctx, seed):
    return _draws(ctx, seed, shared=True)


def _noise(ctx, seed):
    from keras import ops

    eps = ctx.normal(ops.arange(4, dtype="int32"), 4)  # [n, 4, 3]
    return ops.repeat(eps[:, None], ctx.num_targets, axis=1)


def test_seeded_draws_follow_their_documented_keys(tiny):
    """Uniform draws keyed by (seed, input key, draw) are exactly the reference's; the noise is
    another stream, equal to the reference's to float32 precision; shared draws a third."""
    from method_support import normal_draws, uniform_draws

    keys = np.array([9, 0, 2**31 - 1, 2**40 + 3, 2**63 - 1])
    x = np.zeros((len(keys), 3), "float32")
    targets = Classes.resolved(np.zeros((len(keys), 1), np.int64))
    seed = 2**35 + 5
    job = engine.Job(tiny, x, targets, {"seed": seed}, keys=keys, batch_size=2)
    got = engine.run(_per_input, job)["attributions"][:, 0]
    noise = engine.run(_noise, job)["attributions"][:, 0]
    for b, key in enumerate(keys):
        np.testing.assert_array_equal(got[b], uniform_draws(seed, int(key), 4, range(4), [3]))
        np.testing.assert_allclose(noise[b], normal_draws(seed, int(key), 4, range(4), [3]), rtol=1e-6, atol=1e-7)
        assert not np.allclose(got[b], uniform_draws(seed + 1, int(key), 4, range(4), [3]))  # the seed counts
    shared = engine.run(_shared, job.with_(batch_size=32))["attributions"][:, 0]
    np.testing.assert_array_equal(shared, np.broadcast_to(uniform_draws(seed, None, 4, range(4), [3]), shared.shape))
    assert not np.allclose(shared[0], got[0])
    assert ((0 <= got) & (got < 1)).all() and got.std() > 0.2  # uniform on [0, 1)


def _host_sort(ctx):
    from keras import ops

    def numpy_step(values):
        return np.sort(values, axis=-1)[:, ::-1].copy()  # a host-side NumPy step

    descending = ctx.host(numpy_step, [ctx.inputs], "float32", ctx.inputs.shape)
    return ops.repeat(descending[:, None], ctx.num_targets, axis=1)


def test_a_host_step_runs_numpy_inside_the_kernel(tiny):
    x = np.random.default_rng(0).normal(size=(5, 3)).astype("float32")
    job = engine.Job(tiny, x, Classes.resolved(np.zeros((5, 2), np.int64)), batch_size=4)
    got = engine.run(_host_sort, job)["attributions"]
    np.testing.assert_array_equal(got, np.repeat(-np.sort(-x, axis=1)[:, None], 2, axis=1))
