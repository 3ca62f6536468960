"""saliency_kit.batch: discovery, sharding, output names and the crash-tolerant manifest.

The end-to-end runs of ``saliency batch`` (bad files, SIGKILL then --resume, shards through the
real command) are in tests/test_cli.py; here are the pieces, on real files in tmp_path.
"""
import json
import os

import pytest

from saliency_kit import batch


def touch(root, *relative_paths):
    for relative in relative_paths:
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")


def test_discovery_is_recursive_sorted_and_skips_non_images_hidden_and_the_output(tmp_path):
    touch(tmp_path, "b.png", "a/c.JPG", "a/deep/d.jpeg", "notes.txt", ".hidden.png", ".git/e.png",
          "out/old.png", "a/deep/f.tiff")
    found = batch.discover_images(str(tmp_path), exclude=[str(tmp_path / "out")])
    assert found == ["a/c.JPG", "a/deep/d.jpeg", "a/deep/f.tiff", "b.png"]


@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_shards_are_disjoint_cover_everything_and_are_stable(count):
    paths = [f"dir{i % 5}/img_{i:04d}.png" for i in range(500)]
    shards = [batch.select_shard(paths, i, count) for i in range(count)]
    assert sorted(p for s in shards for p in s) == sorted(paths)  # covering, no repeats
    assert sum(len(s) for s in shards) == len(paths)
    for shard in shards:  # roughly balanced: a hash, not a first-come split
        assert abs(len(shard) - len(paths) / count) < 0.25 * len(paths) / count + 10
    # Adding files never moves an existing file to another shard.
    more = paths + [f"new/{i}.png" for i in range(50)]
    for i in range(count):
        assert set(shards[i]) <= set(batch.select_shard(more, i, count))


@pytest.mark.parametrize("text", ["4/4", "1/0", "a/3", "-1/3", "3", ""])
def test_bad_shard_specs_are_refused(text):
    with pytest.raises(ValueError, match="I/N"):
        batch.parse_shard(text)


def test_output_folders_mirror_inputs_and_disambiguate_same_stems():
    paths = ["cats/tom.jpg", "cats/tom.png", "dogs/rex.png", "a b/é.png", "a b/猫.png", "a b/猫.PNG",
             "x/a b.png", "x/a_b.png", "x/a_b"]
    folders = batch.output_dirs(paths)
    assert folders["dogs/rex.png"] == "dogs/rex"
    assert folders["cats/tom.jpg"] == "cats/tom_jpg" and folders["cats/tom.png"] == "cats/tom_png"
    assert folders["a b/é.png"] == "a_b/é"
    assert folders["a b/猫.png"] == "a_b/猫_png" and folders["a b/猫.PNG"] == "a_b/猫_PNG"
    assert folders["x/a_b"] == "x/a_b_x"  # no extension at all
    assert folders["x/a b.png"].startswith("x/a_b_png_") and folders["x/a_b.png"].startswith("x/a_b_png_")
    assert len(set(folders.values())) == len(paths)  # every input gets its own folder


def test_output_names_are_safe():
    assert batch.output_name("guided_backprop", 3, "tabby, tabby cat", "heatmap") == \
        "guided_backprop-c3-tabby_tabby_cat-heatmap.png"
    assert batch.output_name("gradcam", 0, "../../etc", "npz") == "gradcam-c0-etc.npz"
    assert "/" not in batch.output_name("m", 1, "a/b\\c", "overlay")


def test_inside_resolves_symlinks(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "escape").symlink_to(tmp_path)
    assert batch.inside(str(out), str(out / "a" / "b.png"))
    assert not batch.inside(str(out), str(out / ".." / "b.png"))
    assert not batch.inside(str(out), str(out / "escape" / "b.png"))


def _line(image, file, outputs):
    return {"image": image, "status": "ok", "method": "m", "class": 0, "score": 1.0, "kind": "heatmap",
            "file": file, "outputs": outputs}


def test_manifest_tolerates_a_cut_off_last_line_and_completeness_needs_every_file(tmp_path):
    manifest = batch.Manifest(str(tmp_path / "manifest.jsonl"))
    for name in ("a1.png", "a2.png", "b1.png"):
        (tmp_path / name).write_bytes(b"png")
    manifest.append([_line("a", "a1.png", 2), _line("a", "a2.png", 2)])
    manifest.append([_line("b", "b1.png", 2)])  # image b was cut short: 1 of its 2 lines
    manifest.append([_line("c", "c1.png", 1)])  # its file is missing
    with open(manifest.path, "ab") as handle:  # a power cut mid-line
        handle.write(json.dumps(_line("d", "d1.png", 1)).encode()[:25])
    records = manifest.read()
    assert [r["image"] for r in records] == ["a", "a", "b", "c"]
    assert batch.complete_images(records, str(tmp_path)) == {"a"}

    # The next append starts on a fresh line, so the broken one stays isolated.
    (tmp_path / "d1.png").write_bytes(b"png")
    manifest.append([_line("d", "d1.png", 1)])
    assert batch.complete_images(manifest.read(), str(tmp_path)) == {"a", "d"}
    with open(manifest.path, "rb") as handle:
        assert handle.read().endswith(b"\n")
    (tmp_path / "a2.png").write_bytes(b"")  # listed, but empty after a power cut: not complete
    assert batch.complete_images(manifest.read(), str(tmp_path)) == {"d"}


def test_remove_partials_only_touches_temporary_files(tmp_path):
    touch(tmp_path, "keep.png", ".keep.png.abc.partial", ".other")
    batch.remove_partials(str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == [".other", "keep.png"]
    batch.remove_partials(str(tmp_path / "missing"))  # no error
