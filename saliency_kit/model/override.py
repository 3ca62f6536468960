"""Op-level backward rules: every ReLU-family op traced in a block differentiates by a rule.

The TF1 recipe this project grew from (``gradient_override_map`` + ``tf.gradients``), made safe
for TF2::

    @tf.function
    def guided_gradient(x):
        with relu_rule(sk.GuidedBackprop()) as report:
            score = model(x)[:, 0]
        return tf.gradients(score, x)[0]        # differentiate AFTER the block

Inside the block every ``Relu``, ``Relu6`` and ``LeakyRelu`` op the trace creates — in the
function's graph and in the graphs nested in it (the while-loop bodies of recurrent layers, the
branches of ``tf.cond``) — gets its gradient from ``rule.grad(x, y, dy)``, the rule bound to that
op's activation (``Relu6``: ``max_value=6``; ``LeakyRelu``: its ``alpha``). Whatever differentiates
the graph symbolically follows it: ``tf.gradients`` on that graph, and a ``GradientTape`` around a
*call* of the ``tf.function`` (a function's gradient is built from its graph). A ``GradientTape``
running *inside* the traced function does not: eager tapes look gradients up by op type. Ops outside
the block, and every other trace of the same model, keep their plain gradients: nothing global
changes, nothing of the model is touched.

``report`` (an :class:`OverrideReport`) lists the ops changed, and the nested functions holding
ReLU-family ops that the rule could not reach (a ``tf.function`` called inside the block keeps its
own graph, shared with its other callers, so it is not changed): ``report.complete`` is False then.

How it works: three gradient functions are registered once per process (``SaliencyKit*``); the
block marks its ops with the attribute TF's own ``gradient_override_map`` sets
(``_gradient_op_type``) and with a key naming the rule. The rule lives in a registry of weak
references, kept alive by the graphs that use it, so nothing accumulates per trace.

Composite activations: ``keras.activations.relu`` with a ``threshold``, or with a ``max_value``
other than 6 (and ``negative_slope`` together with either), is not one op but several
(``Relu`` or ``SelectV2``, then ``Minimum``/``Maximum``, and for a leaky one ``Neg``, ``Relu``,
``Mul``, ``Sub``); so are the same activations written by hand (``tf.minimum(tf.nn.relu(x), 3)``,
``tf.clip_by_value(tf.nn.relu(x), 0, 3)``, ``tf.where(x > t, x, 0)``, ``x * cast(x > t)``). The
block recognises these patterns (:func:`_match_activation`) and treats each as one activation: its
last op takes ``rule.grad(x, y, dy)`` for the whole, the ops between pass the gradient through
unchanged. A pattern whose parameters are not constants cannot be bound to a rule and is reported
(``report.unsupported``). :func:`rule_activation` computes a whole activation under a rule directly;
model rewriting uses it for the activations it can see at the layer level.

TensorFlow-private API used here (this module is kept self-contained): ``Operation._set_attr``
(mark an op; what ``gradient_override_map`` itself does), ``Graph._get_function`` (find the
functions a call op runs, to report them), ``tensorflow.python.eager.record.record_operation``
(let a ``GradientTape`` see a rule-activation's gradient, as ``tf.custom_gradient`` does).
"""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import threading
import weakref

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2
from tensorflow.python.eager import record as _tape_record  # TF-private: see the module docstring

from ..rules import ModifiedBackprop, ReluFamily, as_rule

__all__ = ["relu_rule", "rule_activation", "OverrideReport", "RELU_OP_TYPES"]

#: The op types whose gradients a :func:`relu_rule` block replaces.
RELU_OP_TYPES = ("Relu", "Relu6", "LeakyRelu")

_GRADIENT_NAMES = {op_type: f"SaliencyKit{op_type}" for op_type in RELU_OP_TYPES}
_ACTIVATION_GRADIENT = "SaliencyKitActivation"  # the IdentityN that rule_activation creates
_COMPOSITE_GRADIENT = "SaliencyKitComposite"  # the last op of an activation made of several ops
_PASS_GRADIENT = "SaliencyKitPass"  # the ops between: the gradient passes through unchanged
_OVERRIDE_ATTR = "_gradient_op_type"  # the attribute tf.Graph.gradient_override_map sets
_RULE_ATTR = "_saliency_kit_rule"
_FAMILY_ATTR = "_saliency_kit_family"
_SOURCE_ATTR = "_saliency_kit_source"  # a composite's input tensor, by name
_MAIN_ATTR = "_saliency_kit_main"  # the input through which the gradient flows back

# nested graphs of control-flow ops, by the attribute names while_v2 / cond_v2 keep them under
_NESTED_GRAPH_ATTRS = ("_cond_graph", "_body_graph", "_true_graph", "_false_graph")


# -- the rule registry: key -> rule, alive as long as a graph using it ------------------------------
class _Binding:
    """Holds a rule; graphs hold bindings, the registry only refers to them weakly."""

    def __init__(self, key: bytes, rule: ModifiedBackprop):
        self.key = key
        self.rule = rule


_lock = threading.Lock()
_keys = itertools.count()
_bindings: "weakref.WeakValueDictionary[bytes, _Binding]" = weakref.WeakValueDictionary()
_graph_bindings: "weakref.WeakKeyDictionary[object, list]" = weakref.WeakKeyDictionary()


def _bind(rule: ModifiedBackprop, graphs) -> _Binding:
    """A new key for ``rule``, kept alive by each of ``graphs``."""
    with _lock:
        binding = _Binding(f"rule-{next(_keys)}".encode(), rule)
        _bindings[binding.key] = binding
        for graph in graphs:
            _graph_bindings.setdefault(graph, []).append(binding)
    return binding


def _keep_alive(binding: _Binding, graph) -> None:
    with _lock:
        _graph_bindings.setdefault(graph, []).append(binding)


def _rule_of(op) -> ModifiedBackprop:
    try:
        key = op.get_attr(_RULE_ATTR)
    except ValueError:
        raise RuntimeError(
            f"op {op.name!r} is marked for a saliency_kit backward rule but names no rule; "
            "it was changed outside saliency_kit.model.override"
        ) from None
    binding = _bindings.get(key)
    if binding is None:
        raise RuntimeError(
            f"the backward rule of op {op.name!r} no longer exists (its graph was rebuilt from a "
            "saved function); trace the function again under relu_rule"
        )
    return binding.rule


# -- gradient functions, registered once per process ---------------------------------------------
def _family_of_op(op) -> ReluFamily:
    if op.type == "Relu6":
        return ReluFamily(max_value=6.0)
    if op.type == "LeakyRelu":
        return ReluFamily(negative_slope=_decimal(np.float32(op.get_attr("alpha"))))  # a float attr
    return ReluFamily()


def _relu_op_gradient(op, dy):
    rule = _rule_of(op).bind(_family_of_op(op))
    return rule.grad(op.inputs[0], op.outputs[0], dy)


def _activation_gradient(op, dy, _unused_dx):
    """IdentityN([y, x]) of :func:`rule_activation`: no gradient to y, the rule's to x."""
    family = ReluFamily(**json.loads(op.get_attr(_FAMILY_ATTR).decode()))
    rule = _rule_of(op).bind(family)
    y, x = op.inputs
    return None, rule.grad(x, y, dy)


def _composite_gradient(op, dy):
    """The last op of an activation made of several ops: ``rule.grad(x, y, dy)`` for the whole
    activation, sent down the input that leads back to ``x`` (the ops on the way pass it on)."""
    family = ReluFamily(**json.loads(op.get_attr(_FAMILY_ATTR).decode()))
    rule = _rule_of(op).bind(family)
    x = op.graph.get_tensor_by_name(op.get_attr(_SOURCE_ATTR).decode())
    grads = [None] * len(op.inputs)
    grads[op.get_attr(_MAIN_ATTR)] = rule.grad(x, op.outputs[0], dy)
    return grads


def _pass_gradient(op, dy):
    """An op inside a composite activation: the gradient passes through, down its main input."""
    grads = [None] * len(op.inputs)
    grads[op.get_attr(_MAIN_ATTR)] = dy
    return grads


def _register_once():
    functions = {name: _relu_op_gradient for name in _GRADIENT_NAMES.values()}
    functions[_ACTIVATION_GRADIENT] = _activation_gradient
    functions[_COMPOSITE_GRADIENT] = _composite_gradient
    functions[_PASS_GRADIENT] = _pass_gradient
    for name, function in functions.items():
        try:
            tf.RegisterGradient(name)(function)
        except KeyError:  # already registered: this module was imported again (importlib.reload)
            pass


_register_once()


# -- marking ops ---------------------------------------------------------------------------------
def _string_attr(value: bytes) -> attr_value_pb2.AttrValue:
    return attr_value_pb2.AttrValue(s=value)


def _has_attr(op, name) -> bool:
    try:
        op.get_attr(name)
    except ValueError:
        return False
    return True


def _is_rule_activation(op) -> bool:
    return op.type == "IdentityN" and _has_attr(op, _FAMILY_ATTR)


def _feeds_only_rule_activations(op) -> bool:
    """A ReLU computing the forward value of a :func:`rule_activation` (its gradient is unused)."""
    consumers = op.outputs[0].consumers()
    return bool(consumers) and all(_is_rule_activation(c) and c.inputs[0].name == op.outputs[0].name for c in consumers)


def _called_functions(op):
    """Names of the functions ``op`` runs through function-valued attributes."""
    for value in op.node_def.attr.values():
        if value.HasField("func"):
            yield value.func.name
        elif value.HasField("list"):
            yield from (f.name for f in value.list.func)


def _relu_ops_in_function(graph, name, seen) -> int:
    """How many ReLU-family ops function ``name`` (and the functions it calls) holds."""
    if name in seen:
        return 0
    seen.add(name)
    try:
        definition = graph._get_function(name).definition  # TF-private: the call's FunctionDef
    except Exception:  # unknown to this graph: nothing to count
        return 0
    count = 0
    for node in definition.node_def:
        count += node.op in RELU_OP_TYPES
        for value in node.attr.values():
            if value.HasField("func"):
                count += _relu_ops_in_function(graph, value.func.name, seen)
    return count


# -- activations made of several ops ---------------------------------------------------------------
class _Unsupported(Exception):
    """A ReLU-family pattern whose parameters are not constants: no rule can be bound to it."""


@dataclasses.dataclass
class _Activation:
    """One ReLU-family activation ``y = f(x)`` found in a graph.

    ``path``: ``[(op, main input)]`` from the op computing ``y`` down to the op whose main input is
    ``x``: the gradient flows along it. ``others``: ops off that path (a threshold's comparison, a
    leaky activation's negative part) that take no gradient.
    """

    x: object
    family: ReluFamily | None  # None: a PReLU (learned slope), which keeps its plain gradient
    path: list
    others: list = dataclasses.field(default_factory=list)

    @property
    def ops(self) -> list:
        return [op for op, _ in self.path] + self.others


#: Op types that can end a ReLU-family activation made of several ops.
_LAST_OP_TYPES = ("Minimum", "Maximum", "SelectV2", "Select", "Mul", "Sub", "AddV2", "Add")


def _constant(tensor) -> float | None:
    """The one value a constant tensor holds (a scalar, an array of one repeated value, ``zeros_like``,
    ``fill``), else None."""
    kind = tensor.op.type
    if kind in ("ZerosLike", "OnesLike"):
        return 0.0 if kind == "ZerosLike" else 1.0
    if kind == "Fill":
        return _constant(tensor.op.inputs[1])
    value = tf.get_static_value(tensor)
    if value is None:
        return None
    value = np.asarray(value)
    if value.size == 0 or not np.issubdtype(value.dtype, np.number) or np.any(value != value.flat[0]):
        return None
    return _decimal(value.flat[0])


def _decimal(value) -> float:
    """The shortest decimal that is ``value`` in its own precision (float32 ``0.1`` -> ``0.1``, not
    ``0.10000000149``): the same number once cast back, and the family reads as it was written."""
    return float(str(value))


def _same(a, b) -> bool:
    return a.name == b.name  # tensors of one graph


def _only_feeds(tensor, op) -> bool:
    consumers = tensor.consumers()
    return len(consumers) == 1 and consumers[0].name == op.name


def _threshold(greater, x) -> float | None:
    """``t`` when op ``greater`` is ``Greater(x, t)``; ``_Unsupported`` when ``t`` is not a constant."""
    if greater.type != "Greater" or not _same(greater.inputs[0], x):
        return None
    threshold = _constant(greater.inputs[1])
    if threshold is None:
        raise _Unsupported(f"a thresholded ReLU ({greater.name}) whose threshold is not a constant")
    return threshold


def _with_constant(op):
    """``(other input, its index, the constant)`` of a binary op with one constant input."""
    for main in (0, 1):
        value = _constant(op.inputs[1 - main])
        if value is not None and _constant(op.inputs[main]) is None:
            return op.inputs[main], main, value
    return None, None, None


def _times(tensor, x) -> float | None:
    """``a`` when ``tensor`` is ``a * x`` with a constant ``a``."""
    op = tensor.op
    if op.type != "Mul":
        return None
    for main in (0, 1):
        if _same(op.inputs[main], x):
            return _constant(op.inputs[1 - main])
    return None


def _inner(tensor, consumer) -> _Activation | None:
    """The ReLU-family activation computing ``tensor``, when ``consumer`` is its only use."""
    found = _match_activation(tensor) if _only_feeds(tensor, consumer) else None
    return None if found is None or found.family is None else found


def _negative_part(mul, x):
    """``(factor, threshold, ops)`` when op ``mul`` is ``factor * relu(-x + threshold)`` (Keras'
    leaky composite; ``factor`` the tensor multiplying the ReLU)."""
    for part in (0, 1):
        relu = mul.inputs[part].op
        if relu.type != "Relu" or not _only_feeds(mul.inputs[part], mul):
            continue
        inner, ops, threshold = relu.inputs[0].op, [mul, relu], 0.0
        if inner.type in ("AddV2", "Add"):
            negated, _, threshold = _with_constant(inner)
            if negated is None:
                continue
            ops.append(inner)
            inner = negated.op
        if inner.type != "Neg" or not _same(inner.inputs[0], x):
            continue
        return mul.inputs[1 - part], threshold, ops + [inner]
    return None


def _match_activation(tensor) -> _Activation | None:
    """The ReLU-family activation that computes ``tensor``, as Keras composes it or as written by
    hand, or None.

    One op: ``Relu``, ``Relu6``, ``LeakyRelu``. A threshold: ``SelectV2(Greater(x, t), x, 0)``
    (``tf.where``) or ``x * Cast(Greater(x, t))``. A ceiling: ``Minimum(f(x), c)``, then optionally
    ``Maximum(·, 0)`` (``clip_by_value``). Leaky with a ceiling or threshold:
    ``f(x) - slope * Relu(-x + t)``; leaky by hand: ``where(x > 0, x, slope * x)``,
    ``maximum(x, slope * x)``, ``relu(x) - slope * relu(-x)``. Inner results must have no other use. A PReLU,
    ``relu(x) + (-alpha) * relu(-x)`` with a learned ``alpha``, is found with ``family=None``: it is
    not of the family (no constant slope), and its ReLUs are not the model's ReLUs either.
    """
    op = tensor.op
    kind = op.type
    if kind in RELU_OP_TYPES:
        return _Activation(op.inputs[0], _family_of_op(op), [(op, 0)])
    if kind in ("SelectV2", "Select"):  # where(x > t, x, 0), or where(x > 0, x, slope * x)
        condition, x, otherwise = op.inputs
        slope = 0.0 if _constant(otherwise) == 0.0 else _times(otherwise, x)
        threshold = None if slope is None else _threshold(condition.op, x)
        if threshold is None or (slope and threshold):
            return None  # slope · x below a threshold is not of the family
        family = ReluFamily(negative_slope=slope) if slope else ReluFamily(threshold=threshold)
        return _Activation(x, family, [(op, 1)], [condition.op] + ([otherwise.op] if slope else []))
    if kind == "Mul":
        for main in (0, 1):
            x, gate = op.inputs[main], op.inputs[1 - main].op
            if gate.type == "Cast" and (threshold := _threshold(gate.inputs[0].op, x)) is not None:
                return _Activation(x, ReluFamily(threshold=threshold), [(op, main)], [gate, gate.inputs[0].op])
        return None
    if kind == "Minimum":
        inner, main, ceiling = _with_constant(op)
        found = None if inner is None else _inner(inner, op)
        if found is None or ceiling <= max(found.family.threshold, 0.0):
            return None
        family = found.family
        if family.max_value is None or ceiling < family.max_value:
            family = dataclasses.replace(family, max_value=ceiling)
        return _Activation(found.x, family, [(op, main)] + found.path, found.others)
    if kind == "Maximum":
        for main in (0, 1):  # max(x, slope · x), 0 < slope < 1: a leaky ReLU written by hand
            x, other = op.inputs[main], op.inputs[1 - main]
            slope = _times(other, x)
            if slope is not None and 0.0 < slope < 1.0:
                return _Activation(x, ReluFamily(negative_slope=slope), [(op, main)], [other.op])
        inner, main, floor = _with_constant(op)
        found = None if inner is None or floor != 0.0 else _inner(inner, op)
        if found is None or found.family.negative_slope != 0.0 or found.family.threshold < 0.0:
            return None  # max(f(x), 0) == f(x) only for these
        return _Activation(found.x, found.family, [(op, main)] + found.path, found.others)
    if kind in ("Sub", "AddV2", "Add"):  # f(x) - slope * relu(t - x), or f(x) + (-slope) * relu(-x)
        for main in (0,) if kind == "Sub" else (0, 1):
            found = _leaky(op, main)
            if found is not None:
                return found
    return None


def _leaky(op, main) -> _Activation | None:
    """``Sub``/``Add`` op ``op`` as ``f(x) ∓ factor * relu(t - x)``, ``f(x)`` its input ``main``."""
    core, negative = op.inputs[main], op.inputs[1 - main]
    if negative.op.type != "Mul" or not _only_feeds(negative, op):
        return None
    found = _inner(core, op)
    if found is None or found.family.negative_slope != 0.0:
        return None
    part = _negative_part(negative.op, found.x)
    if part is None or part[1] != found.family.threshold:
        return None
    factor, _, ops = part
    path, others = [(op, main)] + found.path, found.others + ops
    slope = _constant(factor)
    if slope is None:
        if op.type == "Sub":
            raise _Unsupported(f"a leaky ReLU ({op.name}) whose negative slope is not a constant")
        return _Activation(found.x, None, path, others)  # a PReLU
    return _Activation(found.x, dataclasses.replace(found.family, negative_slope=slope if op.type == "Sub" else -slope),
                       path, others)


def _composite_activations(ops, report) -> tuple[dict, set]:
    """``({name of the last op: _Activation}, names of their ops)`` for the activations among ``ops``
    (one graph) that are made of several ops, outermost first. Unsupported ones go to
    ``report.unsupported``; PReLUs to ``report.plain`` (their ops are covered, not marked)."""
    found, covered = {}, set()
    for op in reversed(ops):
        if op.name in covered or op.type not in _LAST_OP_TYPES:
            continue
        try:
            activation = _match_activation(op.outputs[0])
        except _Unsupported as reason:
            if str(reason) not in report.unsupported:
                report.unsupported.append(str(reason))
            continue
        if activation is None or len(activation.ops) == 1 or any(_has_attr(o, _OVERRIDE_ATTR) for o in activation.ops):
            continue  # a lone Relu op is marked as such; ops already marked belong to an inner block
        covered.update(o.name for o in activation.ops)
        if activation.family is None:
            report.plain.append(f"{op.name} (a PReLU: its slope is learned, not a constant)")
        else:
            found[op.name] = activation
    return found, covered


@dataclasses.dataclass
class OverrideReport:
    """What a :func:`relu_rule` block changed (filled in when the block exits).

    ``ops``: names of the ops whose gradient now follows the rule (``"model/dense/Relu"``, nested
    ones as ``"model/rnn/while/.../Relu"``; an activation made of several ops by its last op, e.g.
    ``"model/layer/clip_by_value"``), and ``families``: the activation each computes.
    ``unreached``: one line per nested function that holds ReLU-family ops the rule could not
    reach. ``unsupported``: one line per activation made of several ops whose parameters are not
    constants. ``complete``: neither happened. ``plain``: activations built from ReLU ops that are
    not of the family (a PReLU's learned slope) and keep their plain gradient, as at the layer level.
    """

    rule: ModifiedBackprop
    ops: list = dataclasses.field(default_factory=list)
    families: dict = dataclasses.field(default_factory=dict)
    unreached: list = dataclasses.field(default_factory=list)
    unsupported: list = dataclasses.field(default_factory=list)
    plain: list = dataclasses.field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.unreached and not self.unsupported

    def check(self, what: str) -> None:
        """``ValueError`` naming ``what`` (e.g. ``"layer 'block'"``) unless the rule reached every
        ReLU-family operation."""
        if self.complete:
            return
        problems = "; ".join(self.unreached + self.unsupported)
        raise ValueError(
            f"cannot apply {type(self.rule).__name__} to every ReLU of {what}: {problems}. Its map "
            "would silently mix plain and modified gradients; compute these activations with "
            "keras.activations.relu / keras.layers.ReLU (constant parameters) in the model's own "
            f"graph, not in a separately compiled tf.function; received {what}."
        )


def _mark_op(op, binding, report, gradient, family):
    op._set_attr(_OVERRIDE_ATTR, _string_attr(gradient.encode()))  # TF-private
    op._set_attr(_RULE_ATTR, _string_attr(binding.key))
    report.ops.append(op.name)
    report.families[op.name] = family


def _mark_activation(activation: _Activation, binding, report):
    last, main = activation.path[0]
    _mark_op(last, binding, report, _COMPOSITE_GRADIENT, activation.family)
    last._set_attr(_FAMILY_ATTR, _string_attr(json.dumps(activation.family.as_dict()).encode()))
    last._set_attr(_SOURCE_ATTR, _string_attr(activation.x.name.encode()))
    last._set_attr(_MAIN_ATTR, attr_value_pb2.AttrValue(i=main))
    for op, main in activation.path[1:]:
        op._set_attr(_OVERRIDE_ATTR, _string_attr(_PASS_GRADIENT.encode()))
        op._set_attr(_MAIN_ATTR, attr_value_pb2.AttrValue(i=main))


def _mark(ops, binding, report, graph_of_ops, seen_functions):
    composites, covered = _composite_activations(ops, report)
    for op in ops:
        if op.name in composites:
            if not _feeds_only_rule_activations(op):
                _mark_activation(composites[op.name], binding, report)
        elif op.type in RELU_OP_TYPES and op.name not in covered and not _has_attr(op, _OVERRIDE_ATTR):
            if not _feeds_only_rule_activations(op):
                _mark_op(op, binding, report, _GRADIENT_NAMES[op.type], _family_of_op(op))
        nested = [getattr(op, attr) for attr in _NESTED_GRAPH_ATTRS if getattr(op, attr, None) is not None]
        nested += list(getattr(op, "_branch_graphs", None) or ())  # tf.switch_case
        for inner in nested:
            _keep_alive(binding, inner)
            _mark(inner.get_operations(), binding, report, inner, seen_functions)
        if not nested:
            for name in _called_functions(op):
                count = _relu_ops_in_function(graph_of_ops, name, seen_functions)
                if count:
                    report.unreached.append(
                        f"{op.name} ({op.type} of function {name!r}): {count} ReLU-family op(s) keep "
                        "their plain gradient"
                    )


@contextlib.contextmanager
def relu_rule(rule):
    """Give every ReLU-family op traced inside the block the backward pass of ``rule``.

    Args:
        rule: ``"guided"``, ``"deconv"`` or a :class:`~saliency_kit.ModifiedBackprop` instance.

    Yields:
        An :class:`OverrideReport`, filled in when the block exits. Take gradients after the
        block: the ops are marked on exit.

    Raises:
        RuntimeError: when entered outside a ``tf.function`` trace (eager ops have no graph to
            mark; trace a function, or use :func:`rule_activation`).
    """
    rule = as_rule(rule)
    if tf.executing_eagerly():
        raise RuntimeError(
            "relu_rule works while a tf.function is being traced (it marks graph ops); it was "
            "entered eagerly. Put the block inside a tf.function."
        )
    graph = tf.compat.v1.get_default_graph()
    start = len(graph.get_operations())
    report = OverrideReport(rule)
    yield report
    binding = _bind(rule, [graph])
    _mark(graph.get_operations()[start:], binding, report, graph, set())


# -- one activation under a rule, for layer-level rewriting --------------------------------------
def rule_activation(x, rule: ModifiedBackprop):
    """``rule.activation(x)`` on the forward pass, ``rule.grad`` on the backward pass.

    Like ``rule(x)`` (a ``tf.custom_gradient``) but, in a graph, without registering a new
    gradient function per trace: the forward value ``y`` passes through an ``IdentityN([y, x])``
    whose gradient (registered once) sends nothing to ``y`` and ``rule.grad(x, y, dy)`` to ``x``.
    Works eagerly, in ``tf.function`` with ``tf.gradients`` or a ``GradientTape``, and in nested
    graphs (while-loop bodies). ``rule`` is bound to its activation (:meth:`ModifiedBackprop.bind`).
    """
    if tf.executing_eagerly():
        return rule(x)  # eager custom_gradient records on the tape; it registers nothing
    x = tf.convert_to_tensor(x)
    y = rule.activation.forward(x)
    with _tape_record.stop_recording():
        out, x_out = tf.raw_ops.IdentityN(input=[y, x])
    op = out.op
    graph = op.graph
    op._set_attr(_OVERRIDE_ATTR, _string_attr(_ACTIVATION_GRADIENT.encode()))  # TF-private
    op._set_attr(_FAMILY_ATTR, _string_attr(json.dumps(rule.activation.as_dict()).encode()))
    binding = _bind(rule, [graph])
    op._set_attr(_RULE_ATTR, _string_attr(binding.key))

    def tape_gradient(dy, _unused_dx):
        return [None, rule.grad(x, y, dy)]

    _tape_record.record_operation(_ACTIVATION_GRADIENT, [out, x_out], [y, x], tape_gradient)
    return out
