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
block recognises these patterns (:func:`.activation_patterns.match_activation`) and treats each as one activation: its
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
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2
from tensorflow.python.eager import record as _tape_record  # TF-private: see the module docstring

from ..rules import ModifiedBackprop, ReluFamily, as_rule
from ..rules.coverage import RuleCoverage
from .activation_patterns import (
    LAST_OP_TYPES,
    RELU_OP_TYPES,
    FoundActivation,
    Unsupported,
    family_of_op,
    match_activation,
)

__all__ = ["relu_rule", "rule_activation", "OverrideReport", "RELU_OP_TYPES"]


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
_bindings: weakref.WeakValueDictionary[bytes, _Binding] = weakref.WeakValueDictionary()
_graph_bindings: weakref.WeakKeyDictionary[object, list] = weakref.WeakKeyDictionary()


def _bind(rule: ModifiedBackprop, graphs: Any) -> _Binding:
    """A new key for ``rule``, kept alive by each of ``graphs``."""
    with _lock:
        binding = _Binding(f"rule-{next(_keys)}".encode(), rule)
        _bindings[binding.key] = binding
        for graph in graphs:
            _graph_bindings.setdefault(graph, []).append(binding)
    return binding


def _keep_alive(binding: _Binding, graph: Any) -> None:
    with _lock:
        _graph_bindings.setdefault(graph, []).append(binding)


def _rule_of(op: Any) -> ModifiedBackprop:
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
def _relu_op_gradient(op: Any, dy: tf.Tensor) -> tf.Tensor:
    rule = _rule_of(op).bind(family_of_op(op))
    return rule.grad(op.inputs[0], op.outputs[0], dy)


def _activation_gradient(op: Any, dy: tf.Tensor, _unused_dx: Any) -> tuple[None, tf.Tensor]:
    """IdentityN([y, x]) of :func:`rule_activation`: no gradient to y, the rule's to x."""
    family = ReluFamily(**json.loads(op.get_attr(_FAMILY_ATTR).decode()))
    rule = _rule_of(op).bind(family)
    y, x = op.inputs
    return None, rule.grad(x, y, dy)


def _composite_gradient(op: Any, dy: tf.Tensor) -> list:
    """The last op of an activation made of several ops: ``rule.grad(x, y, dy)`` for the whole
    activation, sent down the input that leads back to ``x`` (the ops on the way pass it on)."""
    family = ReluFamily(**json.loads(op.get_attr(_FAMILY_ATTR).decode()))
    rule = _rule_of(op).bind(family)
    x = op.graph.get_tensor_by_name(op.get_attr(_SOURCE_ATTR).decode())
    grads = [None] * len(op.inputs)
    grads[op.get_attr(_MAIN_ATTR)] = rule.grad(x, op.outputs[0], dy)
    return grads


def _pass_gradient(op: Any, dy: tf.Tensor) -> list:
    """An op inside a composite activation: the gradient passes through, down its main input."""
    grads = [None] * len(op.inputs)
    grads[op.get_attr(_MAIN_ATTR)] = dy
    return grads


def _register_once() -> None:
    functions: dict[str, Callable] = {name: _relu_op_gradient for name in _GRADIENT_NAMES.values()}
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


def _has_attr(op: Any, name: str) -> bool:
    try:
        op.get_attr(name)
    except ValueError:
        return False
    return True


def _is_rule_activation(op: Any) -> bool:
    return op.type == "IdentityN" and _has_attr(op, _FAMILY_ATTR)


def _feeds_only_rule_activations(op: Any) -> bool:
    """A ReLU computing the forward value of a :func:`rule_activation` (its gradient is unused)."""
    consumers = op.outputs[0].consumers()
    return bool(consumers) and all(_is_rule_activation(c) and c.inputs[0].name == op.outputs[0].name for c in consumers)


def _called_functions(op: Any) -> Iterator[Any]:
    """Names of the functions ``op`` runs through function-valued attributes."""
    for value in op.node_def.attr.values():
        if value.HasField("func"):
            yield value.func.name
        elif value.HasField("list"):
            yield from (f.name for f in value.list.func)


def _relu_ops_in_function(graph: Any, name: str, seen: set) -> int:
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


# -- activations made of several ops (matched in .activation_patterns) ---------------------------
def _composite_activations(ops: list, report: OverrideReport) -> tuple[dict, set]:
    """``({name of the last op: FoundActivation}, names of their ops)`` for the activations among ``ops``
    (one graph) that are made of several ops, outermost first. Unsupported ones go to
    ``report.unsupported``; PReLUs to ``report.plain`` (their ops are covered, not marked)."""
    found: dict[str, FoundActivation] = {}
    covered: set[str] = set()
    for op in reversed(ops):
        if op.name in covered or op.type not in LAST_OP_TYPES:
            continue
        try:
            activation = match_activation(op.outputs[0])
        except Unsupported as reason:
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
class OverrideReport(RuleCoverage):
    """What a :func:`relu_rule` block changed (filled in when the block exits): a
    :class:`~saliency_kit.rules.coverage.RuleCoverage` whose ``ops`` are TensorFlow op names
    (``"model/dense/Relu"``, nested ones as ``"model/rnn/while/.../Relu"``; an activation made of
    several ops by its last op, e.g. ``"model/layer/clip_by_value"``), ``families`` the activation
    each computes (keyed by op name), and whose ``unreached`` are nested functions."""

    families: dict = dataclasses.field(default_factory=dict)

    WHERE: ClassVar[str] = "not in a separately compiled tf.function"


def _mark_op(op: Any, binding: Any, report: OverrideReport, gradient: str, family: ReluFamily) -> None:
    op._set_attr(_OVERRIDE_ATTR, _string_attr(gradient.encode()))  # TF-private
    op._set_attr(_RULE_ATTR, _string_attr(binding.key))
    report.ops.append(op.name)
    report.families[op.name] = family


def _mark_activation(activation: FoundActivation, binding: Any, report: OverrideReport) -> None:
    last, main = activation.path[0]
    _mark_op(last, binding, report, _COMPOSITE_GRADIENT, activation.relu)
    last._set_attr(_FAMILY_ATTR, _string_attr(json.dumps(activation.relu.as_dict()).encode()))
    last._set_attr(_SOURCE_ATTR, _string_attr(activation.x.name.encode()))
    last._set_attr(_MAIN_ATTR, attr_value_pb2.AttrValue(i=main))
    for op, main in activation.path[1:]:
        op._set_attr(_OVERRIDE_ATTR, _string_attr(_PASS_GRADIENT.encode()))
        op._set_attr(_MAIN_ATTR, attr_value_pb2.AttrValue(i=main))


def _mark(ops: list, binding: Any, report: OverrideReport, graph_of_ops: Any, seen_functions: set) -> None:
    composites, covered = _composite_activations(ops, report)
    for op in ops:
        if op.name in composites:
            if not _feeds_only_rule_activations(op):
                _mark_activation(composites[op.name], binding, report)
        elif op.type in RELU_OP_TYPES and op.name not in covered and not _has_attr(op, _OVERRIDE_ATTR):
            if not _feeds_only_rule_activations(op):
                _mark_op(op, binding, report, _GRADIENT_NAMES[op.type], family_of_op(op))
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
def relu_rule(rule: Any) -> Iterator[OverrideReport]:
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
def rule_activation(x: Any, rule: ModifiedBackprop) -> tf.Tensor:
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

    def tape_gradient(dy: tf.Tensor, _unused_dx: Any) -> list:
        return [None, rule.grad(x, y, dy)]

    _tape_record.record_operation(_ACTIVATION_GRADIENT, [out, x_out], [y, x], tape_gradient)
    return out
