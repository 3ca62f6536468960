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
other than 6 (and ``negative_slope`` together with either), is not one op but several (``Relu``
or ``SelectV2``, then ``Minimum``/``Maximum``); the op-level rule sees only the ``Relu`` inside
such a composite. :func:`rule_activation` computes a whole activation under a rule instead; model
rewriting uses it for the activations it can see at the layer level.

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

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2
from tensorflow.python.eager import record as _tape_record  # TF-private: see the module docstring

from ..rules import ModifiedBackprop, ReluFamily, as_rule

__all__ = ["relu_rule", "rule_activation", "OverrideReport", "RELU_OP_TYPES"]

#: The op types whose gradients a :func:`relu_rule` block replaces.
RELU_OP_TYPES = ("Relu", "Relu6", "LeakyRelu")

_GRADIENT_NAMES = {op_type: f"SaliencyKit{op_type}" for op_type in RELU_OP_TYPES}
_ACTIVATION_GRADIENT = "SaliencyKitActivation"  # the IdentityN that rule_activation creates
_OVERRIDE_ATTR = "_gradient_op_type"  # the attribute tf.Graph.gradient_override_map sets
_RULE_ATTR = "_saliency_kit_rule"
_FAMILY_ATTR = "_saliency_kit_family"

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
        return ReluFamily(negative_slope=float(op.get_attr("alpha")))
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


def _register_once():
    functions = {name: _relu_op_gradient for name in _GRADIENT_NAMES.values()}
    functions[_ACTIVATION_GRADIENT] = _activation_gradient
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
    return bool(consumers) and all(_is_rule_activation(c) and c.inputs[0] is op.outputs[0] for c in consumers)


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


@dataclasses.dataclass
class OverrideReport:
    """What a :func:`relu_rule` block changed (filled in when the block exits).

    ``ops``: names of the ops whose gradient now follows the rule (``"model/dense/Relu"``, nested
    ones as ``"model/rnn/while/.../Relu"``). ``unreached``: one line per nested function that holds
    ReLU-family ops the rule could not reach. ``complete``: no such function.
    """

    rule: ModifiedBackprop
    ops: list = dataclasses.field(default_factory=list)
    unreached: list = dataclasses.field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.unreached


def _mark(ops, binding, report, graph_of_ops, seen_functions):
    for op in ops:
        if op.type in RELU_OP_TYPES and not _has_attr(op, _OVERRIDE_ATTR):
            if not _feeds_only_rule_activations(op):
                op._set_attr(_OVERRIDE_ATTR, _string_attr(_GRADIENT_NAMES[op.type].encode()))  # TF-private
                op._set_attr(_RULE_ATTR, _string_attr(binding.key))
                report.ops.append(op.name)
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
