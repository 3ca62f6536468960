"""saliency_kit.batch (discovery, plan, outputs): discovery, sharding, output names, the
crash-tolerant manifest, the run's settings (model fingerprints, a lock for shards starting at
once) and resume planning.

The end-to-end runs of ``saliency batch`` (bad files, SIGKILL then --resume, shards through the
real command) are in tests/cli/test_cli_batch.py; here are the pieces, on real files in tmp_path.
"""

import json
import multiprocessing
import os
import shutil

import pytest

from saliency_kit import files
from saliency_kit.batch import discovery, outputs
from saliency_kit.batch import plan as planning


def touch(root, *relative_paths):
    for relative in relative_paths:
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")


def test_discovery_is_recursive_sorted_and_skips_non_images_hidden_and_the_output(tmp_path):
    touch(
        tmp_path,
        "b.png",
        "a/c.JPG",
        "a/deep/d.jpeg",
        "notes.txt",
        ".hidden.png",
        ".git/e.png",
        "out/old.png",
        "a/deep/f.tiff",
    )
    found = discovery.discover_images(str(tmp_path), exclude=[str(tmp_path / "out")])
    assert found == ["a/c.JPG", "a/deep/d.jpeg", "a/deep/f.tiff", "b.png"]


@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_shards_are_disjoint_cover_everything_and_are_stable(count):
    paths = [f"dir{i % 5}/img_{i:04d}.png" for i in range(500)]
    shards = [discovery.select_shard(paths, i, count) for i in range(count)]
    assert sorted(p for s in shards for p in s) == sorted(paths)  # covering, no repeats
    assert sum(len(s) for s in shards) == len(paths)
    for shard in shards:  # roughly balanced: a hash, not a first-come split
        assert abs(len(shard) - len(paths) / count) < 0.25 * len(paths) / count + 10
    # Adding files never moves an existing file to another shard.
    more = paths + [f"new/{i}.png" for i in range(50)]
    for i in range(count):
        assert set(shards[i]) <= set(discovery.select_shard(more, i, count))


@pytest.mark.parametrize("text", ["4/4", "1/0", "a/3", "-1/3", "3", ""])
def test_bad_shard_specs_are_refused(text):
    with pytest.raises(ValueError, match="I/N"):
        discovery.parse_shard(text)


def test_output_folders_mirror_inputs_and_disambiguate_same_stems():
    paths = [
        "cats/tom.jpg",
        "cats/tom.png",
        "dogs/rex.png",
        "a b/é.png",
        "a b/猫.png",
        "a b/猫.PNG",
        "x/a b.png",
        "x/a_b.png",
        "x/a_b",
    ]
    folders = outputs.output_dirs(paths)
    assert folders["dogs/rex.png"] == "dogs/rex"
    assert folders["cats/tom.jpg"] == "cats/tom_jpg" and folders["cats/tom.png"] == "cats/tom_png"
    assert folders["a b/é.png"] == "a_b/é"
    assert folders["a b/猫.png"] == "a_b/猫_png" and folders["a b/猫.PNG"] == "a_b/猫_PNG"
    assert folders["x/a_b"] == "x/a_b_x"  # no extension at all
    assert folders["x/a b.png"].startswith("x/a_b_png_") and folders["x/a_b.png"].startswith("x/a_b_png_")
    assert len(set(folders.values())) == len(paths)  # every input gets its own folder


def test_output_names_are_safe():
    assert (
        outputs.output_name("guided_backprop", 3, "tabby, tabby cat", "heatmap")
        == "guided_backprop-c3-tabby_tabby_cat-heatmap.png"
    )
    assert outputs.output_name("gradcam", 0, "../../etc", "npz") == "gradcam-c0-etc.npz"
    assert "/" not in outputs.output_name("m", 1, "a/b\\c", "overlay")


def test_inside_resolves_symlinks(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "escape").symlink_to(tmp_path)
    assert outputs.inside(str(out), str(out / "a" / "b.png"))
    assert not outputs.inside(str(out), str(out / ".." / "b.png"))
    assert not outputs.inside(str(out), str(out / "escape" / "b.png"))


def _line(image, file, outputs):
    return {
        "image": image,
        "status": "ok",
        "method": "m",
        "class": 0,
        "score": 1.0,
        "kind": "heatmap",
        "file": file,
        "outputs": outputs,
    }


def test_manifest_tolerates_a_cut_off_last_line_and_completeness_needs_every_file(tmp_path):
    manifest = outputs.Manifest(str(tmp_path / "manifest.jsonl"))
    for name in ("a1.png", "a2.png", "b1.png"):
        (tmp_path / name).write_bytes(b"png")
    manifest.append([_line("a", "a1.png", 2), _line("a", "a2.png", 2)])
    manifest.append([_line("b", "b1.png", 2)])  # image b was cut short: 1 of its 2 lines
    manifest.append([_line("c", "c1.png", 1)])  # its file is missing
    with open(manifest.path, "ab") as handle:  # a power cut mid-line
        handle.write(json.dumps(_line("d", "d1.png", 1)).encode()[:25])
    records = manifest.read()
    assert [r["image"] for r in records] == ["a", "a", "b", "c"]
    assert outputs.complete_images(records, str(tmp_path)) == {"a"}

    # The next append starts on a fresh line, so the broken one stays isolated.
    (tmp_path / "d1.png").write_bytes(b"png")
    manifest.append([_line("d", "d1.png", 1)])
    assert outputs.complete_images(manifest.read(), str(tmp_path)) == {"a", "d"}
    with open(manifest.path, "rb") as handle:
        assert handle.read().endswith(b"\n")
    (tmp_path / "a2.png").write_bytes(b"")  # listed, but empty after a power cut: not complete
    assert outputs.complete_images(manifest.read(), str(tmp_path)) == {"d"}


def test_remove_partials_only_touches_temporary_files(tmp_path):
    touch(tmp_path, "keep.png", ".keep.png.abc.partial", ".other")
    files.remove_partials(str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == [".other", "keep.png"]
    files.remove_partials(str(tmp_path / "missing"))  # no error


def test_explain_manifest_replaces_the_lines_of_images_explained_again(tmp_path):
    manifest = outputs.Manifest(str(tmp_path / "manifest.jsonl"))
    manifest.replace_images([_line("a", "a1.png", 1), _line("b", "b1.png", 1)])
    manifest.replace_images([_line("a", "a2.png", 1), outputs.failure_line("c", "cannot load image c")])
    assert [(r["image"], r.get("file")) for r in manifest.read()] == [("b", "b1.png"), ("a", "a2.png"), ("c", None)]


# ------------------------------------------------------------------------------ settings
def _write_model(path, scale=1.0):
    """A small .keras file; ``scale`` changes its weights, nothing else."""
    import keras

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="d")])
    model.layers[0].set_weights([w * 0 + scale for w in model.layers[0].get_weights()])
    model.save(path)
    return str(path)


def test_fingerprint_names_the_model_by_contents_not_by_path(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = _write_model(tmp_path / "a" / "net.keras")
    second = str(tmp_path / "b" / "renamed.keras")
    shutil.copyfile(first, second)
    assert planning.model_fingerprint(first, None) == planning.model_fingerprint(second, None)
    monkeypatch.chdir(tmp_path / "b")
    assert planning.model_fingerprint("../a/net.keras", None) == planning.model_fingerprint(first, None)

    before = planning.model_fingerprint(first, None)
    _write_model(first, scale=2.0)  # same architecture, other weights
    assert planning.model_fingerprint(first, None)["model_file"] != before["model_file"]

    sidecar = tmp_path / "a" / "net.keras.toml"
    sidecar.write_text('classes = ["x", "y", "z"]\n')
    with_config = planning.model_fingerprint(first, None)
    sidecar.write_text('classes = ["x", "z", "y"]\n')
    assert planning.model_fingerprint(first, None)["config"] != with_config["config"]

    weights = tmp_path / "w.weights.h5"
    weights.write_bytes(b"one")
    one = planning.model_fingerprint(first, str(weights))
    weights.write_bytes(b"two")
    assert planning.model_fingerprint(first, str(weights)) != one
    assert planning.model_fingerprint("shapes", None)["name"] == "shapes"
    with pytest.raises(FileNotFoundError, match="does not exist"):
        planning.model_fingerprint(str(tmp_path / "missing.keras"), None)


def test_settings_are_recorded_once_and_other_settings_are_refused(tmp_path):
    settings = {"model": {"model_file": "abc"}, "methods": [["gradient", {}]], "targets": ["top1"]}
    planning.check_settings(str(tmp_path), settings)
    planning.check_settings(str(tmp_path), settings)  # the same again: fine
    with pytest.raises(planning.RunRefused, match="the model file, its weights or its config changed"):
        planning.check_settings(str(tmp_path), {**settings, "model": {"model_file": "def"}})
    with pytest.raises(planning.RunRefused, match="methods differ"):
        planning.check_settings(str(tmp_path), {**settings, "methods": [["gradcam", {}]]})
    assert json.loads((tmp_path / "settings.json").read_text()) == settings


def _shard_start(out, settings, barrier, results):
    barrier.wait()
    try:
        planning.check_settings(out, settings)
        results.put("ok")
    except planning.RunRefused:
        results.put("refused")


@pytest.mark.parametrize("same", [True, False])
def test_shards_starting_at_once_agree_on_one_settings_file(tmp_path, same):
    """Eight processes released together by a barrier: with equal settings all go on; with
    different settings exactly one wins and the file holds the winner's settings whole."""
    context = multiprocessing.get_context("spawn")
    for round_ in range(3):
        out = str(tmp_path / f"out{round_}")
        barrier, results = context.Barrier(8), context.Queue()
        wanted = [{"methods": [["gradient", {}]], "shard": 0 if same else i} for i in range(8)]
        workers = [context.Process(target=_shard_start, args=(out, wanted[i], barrier, results)) for i in range(8)]
        for worker in workers:
            worker.start()
        answers = sorted(results.get(timeout=120) for _ in workers)
        for worker in workers:
            worker.join(60)
        assert answers.count("ok") == (8 if same else 1), answers
        recorded = json.loads(open(os.path.join(out, "settings.json")).read())
        assert recorded in wanted
        assert os.listdir(out) == ["settings.json"]  # no temporary files left behind


def test_plan_refuses_an_earlier_run_and_resume_skips_what_is_complete(tmp_path):
    source, out = tmp_path / "in", tmp_path / "out"
    touch(source, "a.png", "b.png", "c.png")
    plan = planning.plan_run(str(source), str(out), shard=None, resume=False)
    assert plan.todo == ["a.png", "b.png", "c.png"] and plan.folders["a.png"] == "a"
    (out / "a").mkdir(parents=True)
    (out / "a" / "m.png").write_bytes(b"png")
    manifest = outputs.Manifest(str(out / "manifest.jsonl"))
    manifest.append([_line("a.png", "a/m.png", 1), outputs.failure_line("c.png", "cannot load image c.png")])
    with pytest.raises(planning.RunRefused, match="--resume"):
        planning.plan_run(str(source), str(out), shard=None, resume=False)
    plan = planning.plan_run(str(source), str(out), shard=None, resume=True)
    assert plan.skip == {"a.png"} and plan.todo == ["b.png", "c.png"]
    assert plan.failed_before == {"c.png": "cannot load image c.png"}
    assert set(planning.still_unreadable(str(source), ["b.png", "c.png"])) == {"b.png", "c.png"}  # not images
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no images under"):
        planning.plan_run(str(tmp_path / "empty"), str(out), shard=None, resume=False)
