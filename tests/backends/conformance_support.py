"""The conformance table: every registered method × every shipped target kind × each input kind,
on the same weights on every backend.

The TensorFlow process writes the reference (``python tests/backends/conformance_support.py
FOLDER``): it saves the small models the shipped ones do not cover as ``.keras`` files, runs
every row and stores its attributions and scores, or the refusal it met (``reference.npz``,
``refusals.json``). Another backend's process loads the same files and must give the same numbers
(1e-4 relative, float32) or the same refusal (``tests/backends/test_conformance.py``). The rows
are generated from the method registry and :data:`TARGET_KINDS`: a new method joins the table
untouched; a new target kind adds one example here (``test_every_shipped_target_kind_has_a_row``).
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
from dataclasses import dataclass

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/: method_support

B = 2
RNG_SEED = 31


@dataclass(frozen=True)
class Row:
    method: str
    target_kind: str  # a key of TARGET_KINDS
    input_kind: str  # "image", "several" or "tokens"

    @property
    def id(self) -> str:
        return f"{self.method}-{self.target_kind}-{self.input_kind}"


# target kind -> (the model it runs on, the input kind) for the image rows; the other input kinds
# run with class targets.
TARGET_KINDS = {
    "classes": "shapes",
    "function": "shapes",
    "region": "shapes_seg",
    "box": "shapes_det",
    "output": "two_heads",
    "unit": "shapes",
    "generated": "causal_lm",
    "contrast": "causal_lm",
}
#: the layer a layered method (conductance) attributes to, per model
LAYERS = {
    "shapes": "conv2",
    "shapes_seg": "conv2",
    "shapes_det": "conv2",
    "two_heads": "conv",
    "image_meta": "conv",
    "text": "hidden",
    "causal_lm": "conv",
}


def rows() -> list[Row]:
    from saliency_kit import methods

    found = [Row(name, kind, "image") for name in methods.names() for kind in TARGET_KINDS]
    found += [Row(name, "classes", kind) for name in methods.names() for kind in ("several", "tokens")]
    return found


def metric_rows() -> list[str]:
    """Every declared metric: each scores the gradient of the shipped classifier on every backend."""
    from saliency_kit import evaluate

    return [metric.name for metric in evaluate.metrics()]


def run_metric(metric: str, model) -> dict:
    """``{"per_input": [B]}`` of ``metric`` scoring the gradient of class 1 (cheap settings, seed 0)."""
    from method_support import CHEAP_METRICS

    from saliency_kit import evaluate

    mask = np.zeros((B, 64, 64), bool)
    mask[:, 16:40, 20:44] = True
    found = evaluate.compare(
        model,
        inputs_of("shapes", model),
        ["gradient"],
        [metric],
        targets=1,
        masks=mask,
        seed=0,
        metric_options={metric: CHEAP_METRICS.get(metric, {})},
    )
    row = next(r for r in found["rows"] if r["method"] == "gradient")
    return {"per_input": np.asarray(row["per_input"], np.float64)}


def model_of(row: Row) -> str:
    return {"several": "image_meta", "tokens": "text"}.get(row.input_kind, TARGET_KINDS[row.target_kind])


# -- the models -------------------------------------------------------------------------------
def save_own_models(folder: pathlib.Path) -> None:
    """The models the shipped ones do not cover, built with seeded weights and saved as ``.keras``."""
    import keras

    keras.utils.set_random_seed(RNG_SEED)
    image = keras.Input((12, 12, 3), name="image")
    features = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(4, 3, activation="relu", name="conv")(image))
    heads = {
        "kind": keras.layers.Dense(3, activation="softmax", name="kind")(features),
        "size": keras.layers.Dense(2, name="size")(features),
    }
    keras.Model(image, heads, name="two_heads").save(folder / "two_heads.keras")

    picture, meta = keras.Input((8, 8, 3), name="picture"), keras.Input((5,), name="meta")
    pooled = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(4, 3, activation="relu", name="conv")(picture))
    joined = keras.layers.Concatenate()([pooled, keras.layers.Dense(6, activation="relu", name="meta_dense")(meta)])
    keras.Model([picture, meta], keras.layers.Dense(3, name="head")(joined), name="image_meta").save(
        folder / "image_meta.keras"
    )

    ids = keras.Input((7,), dtype="int32", name="token_ids")
    embedded = keras.layers.Embedding(20, 6, name="embedding")(ids)
    hidden = keras.layers.Dense(5, activation="relu", name="hidden")(embedded)
    logits = keras.layers.Dense(3, name="head")(keras.layers.GlobalAveragePooling1D()(hidden))
    keras.Model(ids, logits, name="text").save(folder / "text.keras")

    ids = keras.Input((7,), dtype="int32", name="token_ids")
    embedded = keras.layers.Embedding(20, 6, name="embedding")(ids)
    causal = keras.layers.Conv1D(5, 3, padding="causal", activation="relu", name="conv")(embedded)
    keras.Model(ids, keras.layers.Dense(20, name="logits")(causal), name="causal_lm").save(folder / "causal_lm.keras")


def load(name: str, folder: pathlib.Path):
    import keras

    if name.startswith("shapes"):
        import saliency_kit as sk

        return sk.load_model(name)[0]
    return keras.saving.load_model(folder / f"{name}.keras")


def inputs_of(name: str, model) -> object:
    """``B`` seeded inputs for model ``name`` (the same on every backend)."""
    rng = np.random.default_rng(RNG_SEED)
    if name == "image_meta":
        return [rng.normal(size=(B, 8, 8, 3)).astype("float32"), rng.normal(size=(B, 5)).astype("float32")]
    if name in ("text", "causal_lm"):
        return rng.integers(1, 20, size=(B, 7)).astype("int32")
    return rng.uniform(0, 1, size=(B, *model.input_shape[1:])).astype("float32")


def targets_of(row: Row):
    from keras import ops

    import saliency_kit as sk

    kind = row.target_kind
    if kind == "classes":
        return np.tile([0, 2], (B, 1))
    if kind == "function":
        return lambda values: ops.stack([values[:, 1] - values[:, 0], ops.max(values, axis=1)], axis=1)
    if kind == "region":
        mask = np.zeros((64, 64), bool)
        mask[16:40, 20:44] = True
        return sk.targets.region(mask, 1)
    if kind == "box":
        return sk.targets.box([[[8.0, 8.0, 40.0, 36.0]]] * B, 1)
    if kind == "output":
        return [sk.targets.output("kind", [0, 2]), sk.targets.output("size", 1)]
    if kind == "unit":
        return sk.targets.unit("conv2", [1, 3])
    if kind == "generated":
        return sk.targets.generated(inputs_of("causal_lm", None), start=4)
    if kind == "contrast":
        return sk.targets.contrast(5, token=[1, 2], foil=3)
    raise KeyError(kind)


def options_of(row: Row, model, name: str) -> dict:
    from method_support import small_options

    from saliency_kit import methods

    shape = (8, 8, 3) if name == "image_meta" else model.input_shape[1:]
    options = small_options(row.method, tuple(shape))
    if row.method == "expected_gradients" and name == "image_meta":
        rng = np.random.default_rng(5)
        options["baselines"] = [rng.uniform(-1, 1, (2, *shape)).astype("float32") for shape in ((8, 8, 3), (5,))]
    if row.method == "expected_gradients" and name in ("text", "causal_lm"):
        options.pop("baselines", None)
    if methods.get(row.method).layered:
        options["attribute_to"] = LAYERS[name]
    return options


def run(row: Row, model, name: str) -> dict:
    """``{"attributions": ..., "scores": ...}`` of one row (float32 arrays; several inputs' attributions
    concatenated flat)."""
    import saliency_kit as sk

    options = options_of(row, model, name)
    explanation = sk.explain(model, inputs_of(name, model), row.method, targets=targets_of(row), **options)
    attributions = explanation.attributions
    if isinstance(attributions, dict):
        attributions = [attributions[key] for key in sorted(attributions)]
    if isinstance(attributions, (list, tuple)):  # several inputs: the explained ones, flat, side by side
        attributions = np.concatenate([np.reshape(a, (B, -1)) for a in attributions if a is not None], axis=1)
    return {"attributions": np.asarray(attributions, np.float32), "scores": np.asarray(explanation.scores, np.float32)}


def write_reference(folder: pathlib.Path) -> None:
    """Run every row on this (TensorFlow) process and write ``reference.npz`` and ``refusals.json``."""
    import warnings

    warnings.simplefilter("ignore")
    save_own_models(folder)
    models: dict = {}
    arrays, refusals = {}, {}
    for row in rows():
        name = model_of(row)
        if name not in models:
            models[name] = load(name, folder)
        try:
            result = run(row, models[name], name)
        except Exception as error:  # noqa: BLE001 - a refusal is part of the reference
            refusals[row.id] = f"{type(error).__name__}: {error}"
            continue
        for key, value in result.items():
            arrays[f"{row.id}/{key}"] = value
    for metric in metric_rows():
        try:
            arrays[f"metric-{metric}/per_input"] = run_metric(metric, models.get("shapes") or load("shapes", folder))[
                "per_input"
            ]
        except Exception as error:  # noqa: BLE001 - a refusal is part of the reference
            refusals[f"metric-{metric}"] = f"{type(error).__name__}: {error}"
    np.savez(folder / "reference.npz", **arrays)
    (folder / "refusals.json").write_text(json.dumps(refusals, indent=1, sort_keys=True))


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    write_reference(pathlib.Path(sys.argv[1]))
