"""What a request explains when it is not one float input: a model's several inputs (a list,
tuple or dict), token ids explained at their ``Embedding``'s output, an inner layer
(``attribute_to=``).

:func:`read` checks the inputs against the model and decides the *parts* explained
(:class:`~saliency_kit.engine.space.Part`); :func:`run_rows` gives a run of them the rows the
engine runs on (a token part alone: its ids, embedded inside the kernel); :func:`part_options`
gives each run its per-input options (baselines, occlusion values) in the run's space;
:func:`structure` puts per-part results back in the shape the inputs came in.
:func:`saliency_kit.explain` drives them.

Integer inputs read by a layer of a declared input kind (:mod:`.kinds`: token ids feeding an
``Embedding``) are explained at its output, except those whose name marks them as segment,
position or type ids, or masks (``segment_ids``, ``token_type_ids``, ``position_ids``,
``padding_mask``, ...): their embeddings are left as they are, as the inputs a request does not
explain are (held at their values). ``attribute_to=`` chooses otherwise.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import engine
from ..engine.space import Part, Space
from ..engine.views import structure_fact
from ..model.model_inputs import calls_of, embedded_spec, lookup, model_inputs
from ..model.walker import find_layer, is_graph_model, layer_at
from . import kinds

if TYPE_CHECKING:
    import keras

__all__ = ["Parts", "structured", "read", "run_rows", "part_options", "per_input", "structure"]

#: Options that may be given once or once per input (in the inputs' structure).
PER_INPUT_OPTIONS = ("baseline", "value", "baselines", "noise")


@dataclass
class Parts:
    """A request's inputs and the parts it explains.

    ``names``: every model input's name (graph order); ``held``: every model input ``[B, ...]``
    (graph order, the model's dtypes); ``kind``: how the inputs came (``"dict"``, ``"list"``,
    ``"tuple"`` or ``"array"``); ``parts`` the explained parts; ``points`` each part's values
    ``[B, *part.shape]`` (``None`` for a token part left to the kernel, see :func:`read`);
    ``layer_only``: ``attribute_to`` named one inner layer; ``embeddings``: ``{path: (the layer,
    its input kind)}`` of the layers reading the id parts (:class:`~.kinds.IdsKind`);
    ``plain``: the request is the model's one float input given as one array, nothing else asked
    (:meth:`single`): the engine runs on it as it is, with no
    :class:`~saliency_kit.engine.space.Space` around it."""

    names: list
    held: list
    kind: str
    parts: list
    points: list
    layer_only: bool = False
    embeddings: dict = field(default_factory=dict)
    plain: bool = False

    @classmethod
    def single(cls, x: np.ndarray) -> Parts:
        """The parts of a model's one float input ``x`` ``[B, ...]`` (checked): one part, itself."""
        part = Part("inputs", 0, None, tuple(x.shape[1:]), x.dtype.name)
        return cls(["inputs"], [x], "array", [part], [x], plain=True)

    @property
    def count(self) -> int:
        return len(self.held[0])

    def lookup(self, part: Part, ids: Any) -> np.ndarray:
        """What ``part``'s reading layer gives for ids ``[N, T]``, checked against its vocabulary."""
        layer, kind = self.embeddings[part.layer]
        kind.check_ids(layer, part.layer, ids)
        return np.asarray(lookup(layer, ids))

    @property
    def model_inputs(self) -> Any:
        """What the model runs on: the one array of a plain request, else every input (a list)."""
        return self.held[0] if self.plain else self.held


def structured(model: keras.Model, inputs: Any, attribute_to: Any) -> bool:
    """Whether a request needs parts: ``attribute_to`` given, inputs given as a structure, a
    model with several inputs, or one integer input."""
    if attribute_to is not None or isinstance(inputs, (dict, list, tuple)) and not _array_like(inputs):
        return True
    try:
        infos = _inputs(model)
    except (TypeError, ValueError):
        return False  # explain's own checks say what is wrong
    return len(infos) > 1 or infos[0].integer


def _structure(model: keras.Model, name: Any, compute: Any) -> Any:
    """``compute()``, once per functional model and fingerprint
    (:func:`~saliency_kit.engine.views.structure_fact`: its inputs, and which ``Embedding`` reads
    which, are fixed when it is built); every time for other models."""

    return structure_fact(model, name, compute) if is_graph_model(model) else compute()


def _inputs(model: keras.Model) -> tuple:
    """:func:`~saliency_kit.model.model_inputs.model_inputs` of ``model`` (see :func:`_structure`)."""

    return _structure(model, "inputs", lambda: tuple(model_inputs(model)))


def _array_like(value: Any) -> bool:
    """A nested list of numbers (one array), not a list of arrays."""
    if isinstance(value, dict):
        return False
    try:
        array = np.asarray(value)
    except (ValueError, TypeError):
        return False
    return array.dtype != object and array.ndim >= 2 and not any(isinstance(v, np.ndarray) for v in value)


# ------------------------------------------------------------------------------------ reading
def _arrange(infos: Sequence, inputs: Any) -> tuple[list, str]:
    names = [info.name for info in infos]
    if isinstance(inputs, dict):
        unknown = sorted(set(map(str, inputs)) - set(names))
        missing = [n for n in names if n not in inputs]
        if unknown or missing:
            raise ValueError(
                f"inputs must be a dict with one array per model input {names}; "
                f"missing {missing}, unknown {unknown}; received keys {list(inputs)}."
            )
        return [inputs[n] for n in names], "dict"
    if isinstance(inputs, (list, tuple)) and not _array_like(inputs):
        if len(inputs) != len(infos):
            raise ValueError(
                f"inputs must hold one array per model input ({len(infos)}: {names}); received {len(inputs)}."
            )
        return list(inputs), type(inputs).__name__
    if len(infos) != 1:
        raise ValueError(
            f"model has {len(infos)} inputs {names}: give inputs as a list, tuple or dict of "
            f"{len(infos)} arrays; received one {type(inputs).__name__}."
        )
    return [inputs], "array"


def read(
    model: keras.Model, inputs: Any, attribute_to: Any = None, *, batch_size: int = 32, embedded: bool = True
) -> Parts:
    """The checked inputs of ``model`` and the parts ``attribute_to`` (default: see the module)
    asks to explain, with their values (an inner layer's by one batched forward pass, an
    embedding's by its lookup). ``embedded=False``: token parts' values are left ``None`` (their
    ids checked against the vocabulary): :func:`run_rows` gives a run's rows. A model's one float
    input given as one array, nothing else asked, is :meth:`Parts.single`."""
    if not structured(model, inputs, attribute_to):
        return Parts.single(engine.check_inputs(model, inputs))
    infos = _inputs(model)
    given, kind = _arrange(infos, inputs)
    held = [
        engine.check_array(value, info.shape, info.dtype, model.name, f"input {info.name!r}")
        for info, value in zip(infos, given)
    ]
    counts = {len(a) for a in held}
    if len(counts) != 1:
        raise ValueError(f"every input must hold the same number of rows; received {[len(a) for a in held]}.")
    names = [info.name for info in infos]
    chosen, layer_only = _choose(model, infos, attribute_to)
    paths = tuple(path for _, path, reader in chosen if path is not None and reader is None)
    values = engine.activations(model, held, paths, batch_size=batch_size) if paths else {}
    embeddings = {path: (layer_at(model, path), reader) for _, path, reader in chosen if reader is not None}
    parts: list = []
    points: list = []
    for index, path, reader in chosen:
        name = names[index] if index is not None else path
        label = reader.label if reader is not None else "embedding"
        if reader is not None and not embedded:
            reader.check_ids(embeddings[path][0], path, held[index])
            shape, dtype = embedded_spec(embeddings[path][0], held[index].shape[1:])
            parts.append(Part(name, index, path, shape, dtype, True, label))
            points.append(None)
            continue
        if reader is not None:
            reader.check_ids(embeddings[path][0], path, held[index])
            values[path] = np.asarray(lookup(embeddings[path][0], held[index]))
        array = held[index] if path is None else values[path]
        parts.append(Part(name, index, path, tuple(array.shape[1:]), array.dtype.name, reader is not None, label))
        points.append(array)
    return Parts(names, held, kind, parts, points, layer_only, embeddings)


def run_rows(model: keras.Model, parts: Parts, run: list) -> tuple[Space, np.ndarray, np.ndarray]:
    """``(space, rows, points)`` of one run (some of ``parts.parts``): its space, the engine's rows
    and an array of the points' shape and dtype (what options and axes are checked against).

    One token part whose values were not read (:func:`read` with ``embedded=False``) runs on its
    ids, which the kernel embeds (:attr:`Space.lookup`): ``points`` are then zeros of the
    embedding rows' shape (read-only; their values are never the points). Token parts packed
    with others are embedded here, each once."""

    if parts.plain:
        return Space(tuple(run), 1), parts.held[0], parts.held[0]
    indices = [parts.parts.index(part) for part in run]
    if len(run) == 1 and parts.points[indices[0]] is None:
        part = run[0]
        points = np.broadcast_to(np.zeros((), part.dtype), (parts.count, *part.shape))
        return Space(tuple(run), len(parts.names), lookup=True), parts.held[part.input], points
    for i in indices:
        part = parts.parts[i]
        if parts.points[i] is None:
            parts.points[i] = parts.lookup(part, parts.held[part.input])
    space = Space(tuple(run), len(parts.names))
    x = space.pack([parts.points[i] for i in indices])
    return space, x, x


def _choose(model: keras.Model, infos: Sequence, attribute_to: Any) -> tuple[list, bool]:
    """``([(input index or None, layer path or None, its input kind when it reads ids)], layer_only)``."""
    if attribute_to is None:
        labels = tuple(kind.label for kind in kinds.kinds())
        return list(_structure(model, ("default parts", labels), lambda: _default_parts(model, infos))), False
    chosen: list[tuple[int | None, str | None, Any]] = []
    items = list(attribute_to) if isinstance(attribute_to, (list, tuple)) else [attribute_to]
    if not items:
        raise ValueError("attribute_to must name at least one input or layer; received an empty list.")
    layers = 0
    for item in items:
        entry = _one(model, infos, item)
        layers += entry[0] is None
        if entry in chosen:
            raise ValueError(f"attribute_to names {item!r} twice; received {attribute_to!r}.")
        chosen.append(entry)
    return chosen, layers == 1 and len(chosen) == 1


def _default_parts(model: keras.Model, infos: Any) -> tuple:
    """What a request explains by default (see the module), as :func:`_choose` gives it."""

    chosen: list[tuple[int, str | None, Any]] = []
    for i, info in enumerate(infos):
        if not info.integer:
            chosen.append((i, None, None))
            continue
        found = kinds.explained_by_default(model, i, info.name)
        if found is not None:
            chosen.append((i, *found))
    if not chosen:
        raise ValueError(
            f"nothing to explain in model {model.name!r}: its inputs {[info.name for info in infos]} are integers "
            f"that feed no {_layer_names()}; name a layer to explain with attribute_to=; "
            "received inputs of dtypes "
            f"{[info.dtype for info in infos]}."
        )
    return tuple(chosen)


def _one(model: keras.Model, infos: Sequence, item: Any) -> tuple:

    names = [info.name for info in infos]
    index = None
    if isinstance(item, str) and item in names:
        index = names.index(item)
    elif isinstance(item, (int, np.integer)) and not isinstance(item, bool):
        if not 0 <= int(item) < len(infos):
            raise ValueError(f"attribute_to index must lie in [0, {len(infos) - 1}]; received {item}.")
        index = int(item)
    if index is not None:
        if not infos[index].integer:
            return (index, None, None)
        found = kinds.reader(model, index)
        if found is None:
            raise ValueError(
                f"input {names[index]!r} holds integers that feed no {_layer_names()}, "
                "so it has no space to "
                "explain in; name the layer to explain with attribute_to=LAYER; received "
                f"attribute_to={item!r}."
            )
        return (index, *found)
    path = find_layer(model, item)
    if calls_of(model, path) > 1:
        raise ValueError(
            f"layer {path!r} is called {calls_of(model, path)} times in the model (shared weights), so its "
            "output is not one tensor to explain; name one of the layers after it; received "
            f"attribute_to={path!r}."
        )
    return (None, path, None)


def _layer_names() -> str:
    """The layers the declared input kinds read ids through: ``"Embedding"``, ``"Embedding or ..."``."""
    return " or ".join(kind.layer_name for kind in kinds.kinds())


# ------------------------------------------------------------------------------------ options
def per_input(value: Any, names: list) -> dict | None:
    """``value`` as ``{input name: value}`` when given in the inputs' structure, else ``None``."""
    if isinstance(value, dict):
        unknown = sorted(set(map(str, value)) - set(names))
        if unknown:
            raise ValueError(f"a per-input option names unknown inputs {unknown}; the model's inputs are {names}.")
        return {str(k): v for k, v in value.items()}
    if isinstance(value, (list, tuple)) and len(names) > 1 and len(value) == len(names):
        return dict(zip(names, value))  # one entry per model input, in their order
    return None


def _embedded(model: keras.Model, parts: Parts, part: Part, tokens: Any) -> np.ndarray:
    """Token ids ``[N, T]`` (one row ``[T]``, or one id for every position) of ``part``'s input,
    embedded ``[N, T, D]`` by its embedding layer alone (no forward pass of the model)."""

    assert part.input is not None and part.layer is not None
    reference = parts.held[part.input]
    ids = np.asarray(tokens)
    if ids.ndim < reference.ndim:
        ids = np.broadcast_to(ids, (1, *reference.shape[1:]))
    return parts.lookup(part, ids.astype(reference.dtype))


def _integer(value: Any) -> bool:
    return np.issubdtype(np.asarray(value).dtype, np.integer)


def part_options(
    model: keras.Model,
    parts: Parts,
    run: list,
    space: Space,
    options: dict,
    *,
    baseline_token: int,
    defaults: dict,
) -> tuple[dict, Space]:
    """``(options, space)`` of one run (the parts ``run`` of ``space``): a per-input option given
    in the inputs' structure takes each part's entry; packed runs get one array per option; token
    parts get their baseline (``baseline``, occlusion's ``value``) as the embedding of
    ``baseline_token`` unless given, and baselines given as token ids are embedded.

    In a space of token ids (:attr:`Space.lookup`) a baseline of one token id at every position
    (``baseline_token``, or one id given) is embedded inside the kernel, not here: the option
    holds zeros of the part's shape, and the space returned names it with its token
    (:attr:`Space.fills`)."""

    out = dict(options)
    fills: list = []
    for name in PER_INPUT_OPTIONS:
        given = name in out
        if not given and (name not in defaults or not any(part.embedding for part in run)):
            continue  # the method's default, the same for every input
        value = out.get(name, defaults.get(name))
        entries = per_input(value, parts.names) if given else None
        pieces: list = []
        for part in run:
            piece = entries.get(part.name, defaults.get(name)) if entries is not None else value
            if piece is None:
                pieces = []
                break
            explicit = entries is not None and part.name in entries or entries is None and given
            token = None
            if part.embedding and name in ("baseline", "value"):
                token = baseline_token if not explicit else piece if np.ndim(piece) == 0 and _integer(piece) else None
            if token is not None and space.lookup:
                layer, kind = parts.embeddings[part.layer]
                kind.check_ids(layer, part.layer, np.asarray([token]))
                fills.append((name, int(token)))
                piece = np.zeros(part.shape, part.dtype)
            elif token is not None:
                piece = _embedded(model, parts, part, token)[0]
            elif part.embedding and name != "noise" and _integer(piece):
                embedded = _embedded(model, parts, part, piece)
                piece = embedded if name == "baselines" else embedded[0]
            pieces.append(piece)
        if not pieces:
            continue
        if len(run) == 1:
            out[name] = pieces[0]
        elif name == "baselines":
            arrays = [np.asarray(p, dtype=np.float64) for p in pieces]
            counts = {len(a) for a in arrays}
            if len(counts) != 1:
                raise ValueError(f"baselines must give the same number of rows for every input; received {counts}.")
            out[name] = space.pack([a.reshape(len(a), *part.shape) for a, part in zip(arrays, run)])
        else:
            rows = [np.broadcast_to(np.asarray(p, np.float64), part.shape)[None] for p, part in zip(pieces, run)]
            out[name] = space.pack(rows)[0]  # one row: a baseline broadcast to every input
    if any(part.embedding for part in run) and "window" in defaults and "window" not in options:
        out["window"] = 1  # occlusion: one token at a time
    return out, dataclasses.replace(space, fills=tuple(fills)) if fills else space


# ------------------------------------------------------------------------------------ results
def structure(parts: Parts, results: dict) -> Any:
    """Per-part results ``{part name: array}`` in the inputs' structure: one array for one
    layer (``attribute_to=LAYER``) or a single-input model; a dict keyed by input name for dict
    inputs (the explained ones); a list (tuple) with ``None`` for inputs not explained; a dict
    keyed by part name when layers and inputs are mixed."""
    names = [part.name for part in parts.parts]
    if parts.layer_only or parts.kind == "array" and len(names) == 1:
        return results[names[0]]
    if parts.kind == "dict" or any(part.input is None for part in parts.parts):
        return {name: results[name] for name in names if name in results}
    ordered = [results.get(name) for name in parts.names]
    return tuple(ordered) if parts.kind == "tuple" else ordered
