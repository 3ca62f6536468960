"""Keras-private API: every use lives in saliency_kit/model/keras_private.py, and a Keras upgrade
that removes one fails here, naming it."""
import pathlib
import re

import keras

from saliency_kit.model import keras_private

PACKAGE = pathlib.Path(keras_private.__file__).resolve().parents[1]


def test_every_private_attribute_saliency_kit_uses_still_exists():
    gone = keras_private.missing()
    assert not gone, (
        f"Keras {keras.__version__} no longer has private API that saliency_kit relies on: "
        f"{'; '.join(gone)}. Update saliency_kit/model/keras_private.py."
    )


def test_a_removed_attribute_is_named(monkeypatch):
    monkeypatch.setattr(keras_private, "REQUIRED", keras_private.REQUIRED + (
        (keras.layers.Layer, "_attribute_a_future_keras_dropped", "an example"),))
    assert keras_private.missing() == ["Layer._attribute_a_future_keras_dropped (an example)"]


def test_no_other_module_touches_them():
    names = sorted({attribute for _, attribute, _ in keras_private.REQUIRED})
    pattern = re.compile(r"\.(" + "|".join(map(re.escape, names)) + r")\b")
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "keras_private.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{number}: {line.strip()}")
    assert not offenders, "Keras-private attributes used outside model/keras_private.py:\n" + "\n".join(offenders)
