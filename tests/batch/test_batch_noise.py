"""``saliency batch``: an image's seeded noise is keyed by the image (its path under INPUT_DIR), not
by its position in a batch, so its outputs are the same whichever batch it falls in."""

import json

import numpy as np
from cli_support import tiny_model  # noqa: F401  (a fixture)
from PIL import Image

from saliency_kit.batch.discovery import image_key
from saliency_kit.data.shapes import make_dataset


def _folder(root, names, pictures):
    root.mkdir()
    for name, picture in zip(names, pictures):
        Image.fromarray(picture).save(root / name)
    return root


def _outputs_of(out, image):
    """``{file: bytes}`` of every output of ``image``, and its manifest lines."""
    with open(out / "manifest.jsonl", encoding="utf-8") as handle:
        lines = [json.loads(line) for line in handle]
    mine = [line for line in lines if line["image"] == image]
    assert mine and all(line["status"] == "ok" for line in mine)
    return {line["file"]: (out / line["file"]).read_bytes() for line in mine}, mine


def test_an_image_explained_in_two_different_batches_gets_byte_identical_outputs(tmp_path, tiny_model):
    from saliency_kit.cli import main

    x, a, b, y = make_dataset(4, seed=2)[0]
    # x.png is third of a batch of three in the first run, first of a batch of two in the second
    # (other chunk sizes, another neighbour, another position, another padding).
    first = _folder(tmp_path / "first", ["a.png", "b.png", "x.png"], [a, b, x])
    second = _folder(tmp_path / "second", ["x.png", "y.png"], [x, y])
    options = [
        "--model",
        str(tiny_model),
        "--method",
        "smoothgrad",
        "--samples",
        "4",
        "--noise",
        "0.3",
        "--seed",
        "3",
        "--batch-size",
        "16",
        "--format",
        "both",
    ]
    assert main(["batch", str(first), "--out", str(tmp_path / "out1"), *options]) == 0
    assert main(["batch", str(second), "--out", str(tmp_path / "out2"), *options]) == 0

    files1, lines1 = _outputs_of(tmp_path / "out1", "x.png")
    files2, lines2 = _outputs_of(tmp_path / "out2", "x.png")
    assert lines1 == lines2
    assert any(name.endswith(".npz") for name in files1) and any(name.endswith(".png") for name in files1)
    assert files1 == files2  # byte for byte, the raw attributions (npz) included

    # The noise is keyed by the path: the same picture under another name gets other noise, so the
    # equality above is the key's doing, not noise too small to matter.
    third = _folder(tmp_path / "third", ["z.png"], [x])
    assert main(["batch", str(third), "--out", str(tmp_path / "out3"), *options]) == 0
    files3, _ = _outputs_of(tmp_path / "out3", "z.png")
    npz = [name for name in files1 if name.endswith(".npz")]
    with (
        np.load(tmp_path / "out1" / npz[0]) as one,
        np.load(tmp_path / "out3" / next(name for name in files3 if name.endswith(".npz"))) as other,
    ):
        assert set(one.files) == set(other.files)
        assert any(not np.array_equal(one[k], other[k]) for k in one.files)


def test_image_keys_are_31_bit_and_depend_on_the_whole_relative_path():
    keys = [image_key(path) for path in ("x.png", "a/x.png", "b/x.png", "x.jpg")]
    assert len(set(keys)) == 4
    assert all(isinstance(k, int) and 0 <= k < 2**31 for k in keys)
    assert image_key("a/x.png") == image_key("a/x.png")
