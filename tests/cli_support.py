"""Helpers shared by the command-line tests: running ``python -m saliency_kit`` for real, the
model and image fixtures, and checks of a finished run's manifest.

A command's own lines start with ``saliency <command>:`` (errors, warnings, notes of the run);
tests look at those, never at whatever else a library may print on stderr.
"""

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

import saliency_kit
from saliency_kit.data.shapes import make_dataset

ROOT = Path(saliency_kit.__file__).resolve().parent.parent
SHAPES = ROOT / "saliency_kit" / "data" / "shapes.keras"
TIMEOUT = 300


def environment(**extra) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="")
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # the command quiets TensorFlow itself
    env.update(extra)
    return env


def command(*args, cwd=None, env=None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "saliency_kit", *map(str, args)],
        cwd=cwd,
        env=env or environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen):
    out, err = process.communicate(timeout=TIMEOUT)
    return process.returncode, out, err


def run(*args, cwd=None, env=None):
    return finish(command(*args, cwd=cwd, env=env))


def python(code: str, *, env=None, cwd=None):
    """Run ``code`` in a fresh interpreter -> ``(status, stdout, stderr)``."""
    done = subprocess.run(
        [sys.executable, "-c", code], env=env or environment(), cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT
    )
    return done.returncode, done.stdout, done.stderr


def own_lines(stderr: str, command_name: str) -> list[str]:
    """The lines the command itself wrote to stderr."""
    return [
        line
        for line in stderr.splitlines()
        if line.startswith(f"saliency {command_name}") or line.startswith("saliency: ")
    ]


def decodes(path) -> tuple[int, int]:
    with Image.open(path) as image:
        image.load()
        return image.size


def save_tiny_model(path, classes=5, softmax=True):
    """A small CNN saved as .keras (quick to load)."""
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input((32, 32, 3))
    x = keras.layers.Conv2D(8, 3, activation="relu", name="conv1")(inputs)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Conv2D(8, 3, activation="relu", name="conv2")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(classes, activation="softmax" if softmax else None, name="head")(x)
    keras.Model(inputs, outputs).save(path)
    return path


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("model") / "tiny.keras")


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory):
    """Real files: PNG and JPEG shapes in nested folders, a grey and an RGBA one, and bad files."""
    root = tmp_path_factory.mktemp("images")
    images, _, labels = make_dataset(30, seed=11)
    good = []
    for i, (image, label) in enumerate(zip(images, labels)):
        folder = root / ("a" if i % 3 == 0 else "b/deep" if i % 3 == 1 else "")
        folder.mkdir(parents=True, exist_ok=True)
        name = f"img{i:02d}_{label}." + ("jpg" if i % 4 == 0 else "png")
        Image.fromarray(image).save(folder / name, quality=92)
        good.append(str((folder / name).relative_to(root)))
    Image.fromarray(images[0]).convert("L").save(root / "grey.png")
    Image.fromarray(images[1]).convert("RGBA").save(root / "rgba.png")
    Image.fromarray(images[2]).save(root / "same.png")
    Image.fromarray(images[3]).save(root / "same.jpg")  # two inputs with one stem
    good += ["grey.png", "rgba.png", "same.png", "same.jpg"]
    (root / "b" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 40)  # a header, no image
    (root / "text.jpg").write_text("not an image at all")
    (root / "empty.png").write_bytes(b"")
    (root / "notes.txt").write_text("ignored: not an image extension")
    bad = ["b/broken.png", "empty.png", "text.jpg"]
    return root, sorted(good), bad


def manifest_records(path):
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def check_complete(out: Path, records, good, bad):
    """Every good image's outputs are recorded exactly once, exist, decode, and nothing else is there."""
    ok = [r for r in records if r["status"] == "ok"]
    files = collections.Counter(r["file"] for r in ok)
    assert max(files.values()) == 1, [f for f, n in files.items() if n > 1]
    assert {r["image"] for r in ok} == set(good)
    assert {r["image"] for r in records if r["status"] == "failed"} == set(bad)
    for image in good:
        lines = [r for r in ok if r["image"] == image]
        assert len(lines) == lines[0]["outputs"] > 0
    on_disk = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    photos = {r["photo"] for r in ok if "photo" in r}  # the image under its maps, named on their lines
    assert photos == {r["file"].rsplit("/", 1)[0] + "/photo.png" for r in ok if r["file"].endswith(".png")}
    others = {"settings.json", "index.html", *(p.name for p in out.glob("manifest*.jsonl"))}
    assert on_disk - set(files) == others | photos
    assert set(files) <= on_disk
    for name in photos:
        assert decodes(out / name)
    for name in files:
        assert name.endswith(".png") and decodes(out / name)
