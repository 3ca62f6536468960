"""Private API: every Keras-private use lives in saliency_kit/model/keras_private.py, the
TensorFlow-private ones in saliency_kit/model/override.py, and an upgrade of either library that
removes one fails here, naming it."""

import ast
import pathlib
import re

import keras
import pytest
import tensorflow as tf

from saliency_kit.model import keras_private

PACKAGE = pathlib.Path(keras_private.__file__).resolve().parents[1]


def test_every_private_attribute_saliency_kit_uses_still_exists():
    gone = keras_private.missing()
    assert not gone, (
        f"Keras {keras.__version__} no longer has private API that saliency_kit relies on: "
        f"{'; '.join(gone)}. Update saliency_kit/model/keras_private.py."
    )


def test_a_removed_attribute_is_named(monkeypatch):
    monkeypatch.setattr(
        keras_private,
        "REQUIRED",
        keras_private.REQUIRED + ((keras.layers.Layer, "_attribute_a_future_keras_dropped", "an example"),),
    )
    assert keras_private.missing() == ["Layer._attribute_a_future_keras_dropped (an example)"]


def test_no_other_module_touches_them():
    """Neither as an attribute (``x._functional``) nor by name in a string (``hasattr(x, "_functional")``)."""
    names = sorted({attribute for _, attribute, _ in keras_private.REQUIRED})
    pattern = re.compile(r"(?:\.|[\"'])(" + "|".join(map(re.escape, names)) + r")\b")
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "keras_private.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{number}: {line.strip()}")
    assert not offenders, "Keras-private attributes used outside model/keras_private.py:\n" + "\n".join(offenders)


def test_a_private_name_in_a_string_is_caught(tmp_path):
    names = sorted({attribute for _, attribute, _ in keras_private.REQUIRED})
    pattern = re.compile(r"(?:\.|[\"'])(" + "|".join(map(re.escape, names)) + r")\b")
    assert pattern.search('if hasattr(inputs[0], "_keras_history"):')
    assert pattern.search("getattr(model, '_functional', None)") and pattern.search("x._functional")
    assert not pattern.search("functional_graph(model)")


# -- TensorFlow-private API (model/override.py) -------------------------------------------------
#: ``(name, what saliency_kit uses it for, probe)``: each probe is true while TensorFlow still has it.
def _nested_graph_ops():
    """The ops of a traced function holding a while loop, a cond and a switch_case."""

    @tf.function(autograph=False)
    def f(x):
        x = tf.while_loop(lambda i, v: i < 2, lambda i, v: (i + 1, v * 2.0), (0, x))[1]
        x = tf.cond(tf.reduce_sum(x) > 0, lambda: x + 1.0, lambda: x - 1.0)
        return tf.switch_case(tf.constant(1), [lambda: x, lambda: x * 3.0])

    graph = f.get_concrete_function(tf.TensorSpec([2], tf.float32)).graph
    ops = {op.type.replace("Stateless", ""): op for op in graph.get_operations()}
    return {kind: ops[kind] for kind in ("While", "If", "Case")}


def _override_attr_is_set():
    graph = tf.Graph()
    with graph.as_default(), graph.gradient_override_map({"Relu": "Identity"}):
        op = tf.nn.relu(tf.constant([1.0])).op
    return op.get_attr("_gradient_op_type") == b"Identity"


def _record_operation():
    from tensorflow.python.eager import record

    return callable(getattr(record, "record_operation", None))


TF_PRIVATE = (
    (
        "Operation._set_attr",
        "mark an op for a backward rule, as gradient_override_map does",
        lambda ops: callable(getattr(tf.Operation, "_set_attr", None)),
    ),
    (
        "Graph._get_function",
        "find the functions a call op runs, to report them",
        lambda ops: callable(getattr(tf.Graph, "_get_function", None)),
    ),
    (
        "_gradient_op_type",
        "the op attribute gradient_override_map sets, read back to find marked ops",
        lambda ops: _override_attr_is_set(),
    ),
    (
        "_body_graph",
        "the body of a while loop (the rule reaches ReLUs inside it)",
        lambda ops: hasattr(ops["While"], "_body_graph"),
    ),
    ("_cond_graph", "the condition of a while loop", lambda ops: hasattr(ops["While"], "_cond_graph")),
    ("_true_graph", "the true branch of a cond", lambda ops: hasattr(ops["If"], "_true_graph")),
    ("_false_graph", "the false branch of a cond", lambda ops: hasattr(ops["If"], "_false_graph")),
    (
        "tensorflow.python.eager.record.record_operation",
        "let a GradientTape see a rule activation's gradient, as tf.custom_gradient does",
        lambda ops: _record_operation(),
    ),
)


#: Read when present, with a fallback when not: TensorFlow 2.21 sets no ``_branch_graphs`` on a
#: ``tf.switch_case`` op, so ReLUs inside its branches are found through the functions the op
#: calls (``Graph._get_function``) and reported as unreached, not given the rule.
TF_PRIVATE_IF_PRESENT = (("_branch_graphs", "the branches of a switch_case"),)


def test_every_tensorflow_private_name_saliency_kit_uses_still_exists():
    ops = _nested_graph_ops()
    gone = []
    for name, purpose, probe in TF_PRIVATE:
        try:
            present = probe(ops)
        except (KeyError, AttributeError, ImportError, ValueError):
            present = False
        if not present:
            gone.append(f"{name} ({purpose})")
    assert not gone, (
        f"TensorFlow {tf.__version__} no longer has private API that saliency_kit relies on: "
        f"{'; '.join(gone)}. Update saliency_kit/model/override.py."
    )


def _private_names_used(path: pathlib.Path) -> set:
    """``_names`` read from other objects (``op._set_attr``) or by string (``getattr(op, "_x")``,
    a tuple of attribute names), skipping the module's own names and ``self``/``cls``."""
    tree = ast.parse(path.read_text())
    own = {node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    own |= {
        t.id for node in ast.walk(tree) if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)
    }
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if node.attr not in own and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                used.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if re.fullmatch(r"_[a-z][a-z_]*", node.value):
                used.add(node.value)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tensorflow.python"):
            used |= {f"{node.module}.{alias.name}" for alias in node.names}
    return used


def test_the_tensorflow_private_list_is_complete():
    """Every private name a TensorFlow-using module of saliency_kit/model/ reads is in the list above
    (or is Keras-private, which lives in keras_private.py, or one of the package's own op attributes)."""
    listed = {name.rpartition(".")[2] if name.startswith(("Operation", "Graph")) else name for name, _, _ in TF_PRIVATE}
    listed |= {"tensorflow.python.eager.record"} | {name for name, _ in TF_PRIVATE_IF_PRESENT}
    keras_names = {attribute for _, attribute, _ in keras_private.REQUIRED}
    unlisted = []
    for path in sorted((PACKAGE / "model").glob("*.py")):
        if path.name == "keras_private.py" or "tensorflow" not in path.read_text():
            continue
        for name in sorted(_private_names_used(path) - keras_names):
            if name not in listed and not name.startswith("_saliency_kit_") and name != "_absorbed":
                unlisted.append(f"{path.name}: {name}")
    assert not unlisted, "TensorFlow-private names used but not listed in TF_PRIVATE: " + ", ".join(unlisted)


@pytest.mark.parametrize("name", ["_cond_graph", "_body_graph", "_true_graph", "_false_graph"])
def test_the_nested_graph_attributes_override_reads_are_listed(name):
    from saliency_kit.model import override

    assert name in override._NESTED_GRAPH_ATTRS and name in {n for n, _, _ in TF_PRIVATE}


# -- Keras internals anywhere else ---------------------------------------------------------------
def _keras_probes() -> list:
    """Keras objects of every kind saliency_kit looks into: a built layer, a functional and a
    sequential model, a symbolic tensor and its graph node, a Lambda, a built attention layer."""
    inputs = keras.Input((3, 2))
    attention = keras.layers.MultiHeadAttention(num_heads=1, key_dim=2)
    functional = keras.Model(inputs, attention(inputs, inputs))
    sequential = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    node = keras_private.inbound_nodes(attention)[0]
    return [attention, functional, sequential, sequential.layers[0], inputs, node, keras.layers.Lambda(lambda t: t)]


def _keras_internals_used(path: pathlib.Path, keras_names: set) -> list:
    """``"line: name"`` for each Keras-private name ``path`` reads (``x._name``, ``"_name"``), each
    mention of Keras' private package ``keras.src`` and each TensorFlow-private import."""
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        name = None
        own = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
        if isinstance(node, ast.Attribute) and not own:
            name = node.attr
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            name = "keras.src" if "keras.src" in node.value else node.value
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            name = next((m for m in modules if m.startswith(("keras.src", "tensorflow.python"))), None)
        if name and (name in keras_names or name.startswith(("keras.src", "tensorflow.python"))):
            found.append(f"{node.lineno}: {name}")
    return found


def test_no_module_but_keras_private_reads_keras_internals():
    """A private attribute of any Keras object saliency_kit looks into, read anywhere but
    model/keras_private.py, ``keras.src`` named anywhere, or a TensorFlow-private module imported
    anywhere but model/override.py, fails here, naming the module and the line."""
    keras_names = {name for probe in _keras_probes() for name in dir(probe) if name.startswith("_")}
    keras_names = {name for name in keras_names if not name.startswith("__")}
    keras_names |= {attribute for _, attribute, _ in (*keras_private.REQUIRED, *keras_private.READ_IF_PRESENT)}
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "keras_private.py":
            continue
        for hit in _keras_internals_used(path, keras_names):
            if path.name == "override.py" and "tensorflow.python" in hit:
                continue  # the TensorFlow-private list above
            offenders.append(f"{path.relative_to(PACKAGE.parent)}:{hit}")
    assert not offenders, "Keras internals read outside model/keras_private.py:\n" + "\n".join(offenders)


def test_the_keras_internals_guard_sees_attributes_strings_and_imports(tmp_path):
    source = tmp_path / "module.py"
    source.write_text(
        "from tensorflow.python.framework import tensor_util\n"
        "def f(layer):\n"
        "    skip = ('_layers', '_tracker')\n"
        "    return layer._masked_softmax, type(layer).__module__.startswith('keras.src.layers.'), self._own\n"
    )
    hits = _keras_internals_used(source, {"_layers", "_tracker", "_masked_softmax", "_own"})
    assert sorted(hit.split(": ")[1] for hit in hits) == sorted(
        ["tensorflow.python.framework", "_layers", "_tracker", "_masked_softmax", "keras.src"]
    )
