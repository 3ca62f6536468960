"""The ``saliency`` command, run for real: ``python -m saliency_kit ...`` in a subprocess, on real
PNG and JPEG files, checked against the library called in-process on the same inputs.

TensorFlow takes a few seconds to import in each subprocess, so runs are few and share files;
the runs that do not depend on each other are started together.
"""
import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import saliency_kit
from saliency_kit import batch, render
from saliency_kit.shapes import make_dataset

ROOT = Path(saliency_kit.__file__).resolve().parent.parent
SHAPES = ROOT / "saliency_kit" / "data" / "shapes.keras"
TIMEOUT = 300


def command(*args, cwd=None) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    return subprocess.Popen([sys.executable, "-m", "saliency_kit", *map(str, args)], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen):
    out, err = process.communicate(timeout=TIMEOUT)
    return process.returncode, out, err


def run(*args, cwd=None):
    return finish(command(*args, cwd=cwd))


def decodes(path) -> tuple[int, int]:
    with Image.open(path) as image:
        image.load()
        return image.size


# ------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A small trained-looking CNN saved as .keras (the batch runs use it: it is quick to load)."""
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input((32, 32, 3))
    x = keras.layers.Conv2D(8, 3, activation="relu", name="conv1")(inputs)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Conv2D(8, 3, activation="relu", name="conv2")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(5, activation="softmax")(x)
    path = tmp_path_factory.mktemp("model") / "tiny.keras"
    keras.Model(inputs, outputs).save(path)
    return path


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
    assert on_disk - set(files) == {"settings.json", *(p.name for p in out.glob("manifest*.jsonl"))}
    assert set(files) <= on_disk
    for name in files:
        assert name.endswith(".png") and decodes(out / name)


# ------------------------------------------------------------------------------ usage errors
BAD_ARGUMENTS = [
    ((), "required: COMMAND"),
    (("explain",), "required: IMAGE"),
    (("explain", "x.png", "--bogus"), "unrecognized arguments: --bogus"),
    (("explain", "x.png", "--batch-size", "0"), "--batch-size"),
    (("explain", "x.png", "--noise", "-1"), "--noise"),
    (("explain", "x.png", "--format", "gif"), "--format"),
    (("explain", "no_such_file.png"), "no such file: no_such_file.png"),
    (("batch", "in"), "required: --out"),
    (("batch", "no_such_dir", "--out", "o"), "is not a folder"),
    (("batch", ".", "--out", "o", "--shard", "2/2"), "0 <= I < N"),
    (("batch", ".", "--out", "o"), "no images under"),
]


def test_bad_arguments_exit_2_with_one_line(tmp_path):
    """Each run is a real command; they are started together (none of them imports TensorFlow)."""
    processes = [command(*args, cwd=tmp_path) for args, _ in BAD_ARGUMENTS]
    for (args, needle), process in zip(BAD_ARGUMENTS, processes):
        code, out, err = finish(process)
        assert code == 2, (args, err)
        assert out == ""
        assert len(err.strip().splitlines()) == 1 and needle in err and "Traceback" not in err, (args, err)
    assert os.listdir(tmp_path) == []  # nothing written


def test_usage_errors_found_after_loading_the_model_exit_2(tiny_model, image_folder, capsys):
    """Unknown method / class, and method options no chosen method takes (main() in-process:
    the same code path as the command, without another TensorFlow start-up)."""
    from saliency_kit.cli import main

    root, good, _ = image_folder
    image = str(root / good[0])
    for args, needle in [
        (["--method", "gradient_times_input"], "unknown method 'gradient_times_input'; choose from: gradient,"),
        (["--target", "dodecahedron"], "--target 'dodecahedron': not topK, a class index or a class name"),
        (["--target", "top9"], "the model has 5 classes; use top1 ... top5"),
        (["--target", "5"], "class index out of range"),
        (["--steps", "8"], "--steps only applies to integrated_gradients"),
        (["--model", str(root / "notes.txt")], "notes.txt"),
        (["--method", "gradcam", "--layer", "no_such_layer"], "gradcam: "),
    ]:
        argv = ["explain", image, "--model", str(tiny_model), *args, "--out", str(root / "unused")]
        assert main(argv) == 2, args
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and needle in err, err
    assert not (root / "unused").exists()


def test_models_and_methods_list_one_per_line(capsys):
    from saliency_kit.cli import main
    from saliency_kit.methods import names

    assert main(["methods"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == names()
    assert all(len(line.split(None, 1)) == 2 for line in lines)  # name, then a summary
    assert main(["models"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert "shapes" in [line.split()[0] for line in listed]


# ------------------------------------------------------------------------------ explain
def test_explain_several_methods_and_targets_with_the_shipped_model(tmp_path, image_folder):
    if not SHAPES.exists():
        pytest.skip("the shipped model saliency_kit/data/shapes.keras is not trained yet")
    root, good, bad = image_folder
    big = tmp_path / "big photo.jpg"  # larger than the model's input: the overlay keeps its size
    Image.open(root / good[1]).resize((96, 80)).save(big, quality=90)
    inputs = [root / good[0], big, root / bad[0]]
    code, out, err = run("explain", *inputs, "--method", "guided_backprop", "--method", "gradcam",
                         "--method", "integrated_gradients", "--steps", "8", "--target", "top2",
                         "--target", "star", "--target", "0", "--format", "both", cwd=tmp_path)
    assert code == 1, err  # one unreadable input
    assert "broken.png" in err and "Traceback" not in err

    import saliency_kit as sk

    model, spec = sk.load_model("shapes")
    x, originals = sk.load_images([str(p) for p in inputs[:2]], spec)
    probabilities = np.asarray(model(x, training=False))
    wrote = {line.split("wrote ", 1)[1] for line in out.splitlines() if line.startswith("  wrote ")}
    on_disk = {str(p.relative_to(tmp_path)) for p in (tmp_path / "saliency_out").rglob("*") if p.is_file()}
    assert wrote == on_disk
    for row, (path, folder) in enumerate([(inputs[0], Path(good[0]).stem), (big, "big_photo")]):
        top = np.argsort(-probabilities[row])
        best = spec.class_names[top[0]]
        assert f"{path}: top predictions: {best} {probabilities[row, top[0]]:.3f}" in out
        classes = list(dict.fromkeys([*top[:2].tolist(), spec.class_names.index("star"), 0]))
        expected = {f"saliency_out/{folder}/grid.png"}
        for method in ("guided_backprop", "gradcam", "integrated_gradients"):
            for c in classes:
                for kind in ("heatmap", "overlay", "npz"):
                    expected.add(f"saliency_out/{folder}/" + batch.output_name(method, c, spec.class_names[c], kind))
        assert {f for f in wrote if f"/{folder}/" in f} == expected
        # The files hold what the library computes for the same input and class.
        c = classes[-1]
        reference = sk.explain(model, x[row:row + 1], "guided_backprop", [[c]]).maps[0, 0]
        stem = tmp_path / "saliency_out" / folder / batch.output_name("guided_backprop", c, spec.class_names[c], "npz")
        with np.load(stem) as saved:
            np.testing.assert_allclose(saved["map"], reference, rtol=1e-4, atol=1e-6)
            assert int(saved["target"]) == c and str(saved["class_name"]) == spec.class_names[c]
        heat = stem.with_name(batch.output_name("guided_backprop", c, spec.class_names[c], "heatmap"))
        with Image.open(heat) as png:
            assert np.abs(np.asarray(png).astype(int) - render.heatmap(reference)).max() <= 1
        overlay = heat.with_name(heat.name.replace("heatmap", "overlay"))
        assert decodes(overlay) == Image.open(path).size
        assert decodes(heat.parent / "grid.png")[0] > 500


def test_explain_with_a_named_model_and_no_weights_gives_one_clear_line(tmp_path, image_folder):
    cache = Path(os.environ.get("KERAS_HOME", Path.home() / ".keras")) / "models"
    if any(cache.glob("resnet50*")):
        pytest.skip("ResNet50 weights are cached here: the offline message cannot be shown")
    root, good, _ = image_folder
    code, out, err = run("explain", root / good[0], "--model", "resnet50", cwd=tmp_path)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "resnet50" in err.lower() or "imagenet" in err.lower()
    assert not (tmp_path / "saliency_out").exists()


# ------------------------------------------------------------------------------ batch
def test_batch_killed_then_resumed_ends_with_every_output_exactly_once(tmp_path, tiny_model, image_folder, capsys):
    root, good, bad = image_folder
    out = tmp_path / "out"
    args = ("batch", root, "--out", out, "--model", tiny_model, "--method", "smoothgrad", "--samples", "64",
            "--seed", "1", "--method", "gradient", "--batch-size", "2")
    process = command(*args)
    manifest = out / "manifest.jsonl"
    deadline = time.monotonic() + TIMEOUT
    while process.poll() is None and time.monotonic() < deadline:
        if manifest.exists() and manifest.stat().st_size > 0:
            break
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    # Its writer processes notice and exit too: otherwise they would keep the output pipes open.
    process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL, "the run ended before it could be killed"

    before = manifest.read_bytes()
    complete = batch.complete_images(batch.Manifest(str(manifest)).read(), str(out))
    assert 0 < len(complete) < len(good), "not killed mid-way"

    # Without --resume the earlier run is not overwritten.
    code, _, err = run(*args)
    assert code == 2 and "--resume" in err and len(err.strip().splitlines()) == 1

    folders = batch.output_dirs(sorted(good + bad))
    done_files = {p: p.stat().st_mtime_ns for i in complete for p in (out / folders[i]).iterdir()}
    code, stdout, err = run(*args, "--resume")
    assert code == 1, err  # the bad files
    assert f"{len(complete)} already complete" in stdout
    todo = len(good) + len(bad) - len(complete)
    assert f"saliency batch: {todo}/{todo} images (100%)" in err  # plain progress lines: not a terminal
    assert manifest.read_bytes().startswith(before)  # earlier lines kept as they were
    check_complete(out, manifest_records(manifest), good, bad)
    assert {p: p.stat().st_mtime_ns for p in done_files} == done_files  # complete images not redone
    for name in bad:
        assert name in stdout

    # Resuming with other settings would mix two kinds of maps: refused (in-process: no new start-up).
    from saliency_kit.cli import main

    assert main(["batch", str(root), "--out", str(out), "--model", str(tiny_model), "--resume"]) == 2
    assert "methods differ" in capsys.readouterr().err


def test_shards_are_disjoint_cover_the_folder_and_can_share_an_output(tmp_path, tiny_model, image_folder):
    root, good, bad = image_folder
    out = tmp_path / "out"
    shards = [command("batch", root, "--out", out, "--model", tiny_model, "--method", "gradient",
                      "--shard", f"{i}/2") for i in range(2)]
    results = [finish(process) for process in shards]
    seen = []
    for i, (code, _, err) in enumerate(results):
        records = manifest_records(out / f"manifest.shard-{i}-of-2.jsonl")
        images = {r["image"] for r in records}
        assert code == (1 if images & set(bad) else 0), err
        assert images == set(batch.select_shard(sorted(good + bad), i, 2))
        seen.append(images)
    assert not seen[0] & seen[1] and seen[0] | seen[1] == set(good + bad)
    check_complete(out, [r for i in range(2) for r in manifest_records(out / f"manifest.shard-{i}-of-2.jsonl")],
                   good, bad)
