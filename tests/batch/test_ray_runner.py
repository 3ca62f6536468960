"""``saliency batch --ray`` (saliency_kit.batch.ray) on a real local Ray instance.

One Ray instance (2 CPUs, small object store) serves the module and is shut down at its end. The
reference is the local pipeline's run on the same images: the Ray run must write the same files,
byte for byte, and the same manifest lines (order aside), also when an actor is killed mid-run and
when the driver is killed and the run resumed. Skipped where the ``ray`` extra is not installed.
"""

import dataclasses
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason='the "ray" extra is not installed (pip install -e ".[ray]")')
pytest.importorskip("ray.data")

from saliency_kit.batch import (
    outputs,
    ray_job,  # noqa: E402
)
from saliency_kit.batch import ray as ray_runner  # noqa: E402
from saliency_kit.batch.run import Recipe  # noqa: E402
from saliency_kit.keras_backend import BackendError  # noqa: E402
from saliency_kit.targets.tasks import TaskPlan  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# guided backprop, and a seeded SmoothGrad (noise drawn per image); small batches: several chunks
OPTIONS = [
    "--method",
    "guided_backprop",
    "--method",
    "smoothgrad",
    "--samples",
    "4",
    "--seed",
    "7",
    "--batch-size",
    "4",
]
BATCH = 4
ACTOR_CLASS = "MapWorker(MapBatches(ChunkExplainer))"


os.environ.setdefault("RAY_ENABLE_AUTO_CONNECT", "0")  # never start a stray instance after shutdown


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def cluster():
    """A local Ray instance for the module (the runner joins it instead of starting its own), with
    the dashboard where installed ("ray[default]"): it serves Ray's state API (``ray.util.state``)."""
    dashboard = importlib.util.find_spec("aiohttp") is not None
    ray.init(
        address="local",  # never a cluster some `ray start` on this machine left behind
        num_cpus=2,
        include_dashboard=dashboard,
        dashboard_port=_free_port() if dashboard else None,
        object_store_memory=ray_runner.LOCAL_OBJECT_STORE_BYTES,
        logging_level="ERROR",
        log_to_driver=False,
        runtime_env={
            "env_vars": {
                "TF_CPP_MIN_LOG_LEVEL": "3",
                "MPLBACKEND": "Agg",
                "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]),
            }
        },
    )
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """40 shapes images in 4 folders, plus an empty file and a file that is not an image."""
    from PIL import Image

    from saliency_kit.data.shapes import make_dataset

    root = tmp_path_factory.mktemp("ray_in")
    pictures, _, labels = make_dataset(40, seed=3)
    for i, (picture, label) in enumerate(zip(pictures, labels)):
        (root / f"part{i % 4}").mkdir(exist_ok=True)
        Image.fromarray(picture).save(root / f"part{i % 4}" / f"img{i:03d}_{label}.png")
    (root / "part1" / "empty.png").write_bytes(b"")
    (root / "part2" / "broken.jpg").write_bytes(b"this is not a JPEG")
    return str(root)


@pytest.fixture(scope="module")
def local_run(images, tmp_path_factory):
    """``saliency batch`` without Ray (the reference): its ``--out`` folder."""
    out = str(tmp_path_factory.mktemp("local") / "out")
    assert saliency(["batch", images, "--out", out, *OPTIONS]) == 1  # 1: two files could not be read
    return out


def saliency(argv):
    from saliency_kit.cli import main

    return main(argv)


def ray_run(images, out, address, *more):
    """``saliency batch ... --ray ADDRESS --workers 2`` in this process."""
    return saliency(["batch", images, "--out", out, *OPTIONS, "--ray", address, "--workers", "2", *more])


def files_of(out):
    """{relative path: bytes} of every file under ``out`` but the manifest."""
    found = {}
    for directory, _, names in os.walk(out):
        for name in names:
            path = os.path.join(directory, name)
            relative = os.path.relpath(path, out)
            if relative != outputs.MANIFEST:
                with open(path, "rb") as handle:
                    found[relative] = handle.read()
    return found


def manifest_lines(out):
    with open(os.path.join(out, outputs.MANIFEST), encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def assert_same_run(out, reference):
    """Same files, byte for byte (no partial or probe files left), same manifest lines, each once."""
    mine, theirs = files_of(out), files_of(reference)
    assert sorted(mine) == sorted(theirs)
    assert [f for f in mine if mine[f] != theirs[f]] == []
    lines = [json.dumps(line, sort_keys=True) for line in manifest_lines(out)]
    assert len(lines) == len(set(lines))  # nothing recorded twice
    assert sorted(lines) == sorted(json.dumps(line, sort_keys=True) for line in manifest_lines(reference))


def test_ray_run_writes_the_local_runs_files_and_manifest(cluster, images, local_run, tmp_path, capsys):
    out = str(tmp_path / "out")
    assert ray_run(images, out, cluster) == 1
    printed = capsys.readouterr().out
    assert "40 images explained, 0 already complete, 2 failed; 160 files written" in printed
    assert_same_run(out, local_run)
    assert len([line for line in manifest_lines(out) if line["status"] == "failed"]) == 2
    # The seeded SmoothGrad maps differ from image to image (the comparison above means something).
    heatmaps = [v for k, v in files_of(out).items() if k.endswith("heatmap.png") and "smoothgrad" in k]
    assert len(set(heatmaps)) == 40


def _images_recorded(out) -> int:
    try:
        return len({line["image"] for line in manifest_lines(out)})
    except (FileNotFoundError, ValueError):
        return 0


def _explainer_pids():
    from ray.util.state import list_actors

    return [
        a.pid
        for a in list_actors(filters=[("class_name", "=", ACTOR_CLASS), ("state", "=", "ALIVE")], detail=True)
        if a.pid
    ]


def test_a_killed_actor_is_replaced_and_every_output_is_written_once(cluster, images, local_run, tmp_path):
    pytest.importorskip("aiohttp", reason="Ray's state API (finding the actor's pid) needs \"ray[default]\"")
    out = str(tmp_path / "out")
    result, failure = {}, []

    def drive():
        try:
            result["status"] = ray_run(images, out, cluster)
        except BaseException as error:  # noqa: BLE001 - reported by the test
            failure.append(error)

    driver = threading.Thread(target=drive)
    driver.start()
    deadline = time.monotonic() + 90
    while _images_recorded(out) < BATCH and time.monotonic() < deadline and driver.is_alive():
        time.sleep(0.05)  # until the actors are working: one chunk is recorded
    pids = _explainer_pids()
    assert pids, "no explainer actor alive"
    os.kill(pids[0], signal.SIGKILL)
    killed_at = _images_recorded(out)
    driver.join(120)
    assert not driver.is_alive() and not failure, failure
    assert killed_at < 42  # the actor was killed before the end of the run
    assert result["status"] == 1  # the two unreadable files
    assert_same_run(out, local_run)


def test_resume_after_the_driver_is_killed_redoes_nothing_complete(cluster, images, local_run, tmp_path, capsys):
    out = str(tmp_path / "out")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])}
    command = [
        sys.executable,
        "-m",
        "saliency_kit",
        "batch",
        images,
        "--out",
        out,
        *OPTIONS,
        "--ray",
        cluster,
        "--workers",
        "2",
    ]
    log = tmp_path / "driver.log"
    with open(log, "wb") as handle:
        driver = subprocess.Popen(command, env=env, stdout=handle, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 90
    while _images_recorded(out) < 2 * BATCH and time.monotonic() < deadline and driver.poll() is None:
        time.sleep(0.05)
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    assert driver.returncode == -signal.SIGKILL, log.read_text()[-2000:]

    records = outputs.Manifest(os.path.join(out, outputs.MANIFEST)).read()
    complete = outputs.complete_images(records, out)
    assert 0 < len(complete) < 40
    stamps = {
        f: os.stat(os.path.join(out, f)).st_mtime_ns for r in records if r["image"] in complete for f in [r["file"]]
    }
    capsys.readouterr()
    assert ray_run(images, out, cluster, "--resume") == 1
    assert f"{40 - len(complete)} images explained, {len(complete)} already complete" in capsys.readouterr().out
    # Nothing complete was written again.
    assert {f: os.stat(os.path.join(out, f)).st_mtime_ns for f in stamps} == stamps
    assert_same_run(out, local_run)


def test_seeded_noise_does_not_depend_on_the_position_in_a_batch():
    import saliency_kit as sk
    from saliency_kit.batch import run as pipeline
    from saliency_kit.data.shapes import make_dataset
    from saliency_kit.targets.tasks import Request, TaskPlan

    model, spec = sk.load_model("shapes")
    pictures = make_dataset(2, seed=5)[0]
    inputs = np.stack([spec.preprocess(p.astype(np.float32)) for p in pictures])
    sizes = [p.shape[:2] for p in pictures]
    methods = [("smoothgrad", {"samples": 4, "seed": 7})]
    ask = pipeline.TaskAsker(model, TaskPlan("classification", (Request("top1", "top", count=1),)), spec, BATCH)
    paths = ["a/first.png", "b/second.png"]
    together = pipeline.explain_asked(model, inputs, methods, ask, BATCH, paths, sizes)[0][0]
    alone = pipeline.explain_asked(model, inputs[1:], methods, ask, BATCH, paths[1:], sizes[1:])[0][0]
    np.testing.assert_array_equal(together.maps[1], alone.maps[0])
    # The key is the image's path: another path, other noise.
    moved = pipeline.explain_asked(model, inputs[1:], methods, ask, BATCH, ["c/second.png"], sizes[1:])[0][0]
    assert not np.array_equal(moved.maps[0], alone.maps[0])


def _job(out, token, input_dir):
    return ray_job.Job(
        input_dir=input_dir,
        input_label=input_dir,
        out_dir=out,
        probe=".probe",
        token=token,
        model=ray_job.ModelSource("shapes"),
        recipe=Recipe(task=TaskPlan("classification"), methods=(), looks={}, batch_size=BATCH, formats=("png",)),
        backend="tensorflow",
    )


def test_a_node_that_cannot_see_out_is_refused(cluster, images, tmp_path):
    # What a node whose --out is another disk sees: no probe, or another run's probe there.
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(ray_runner.OutputNotShared, match="is not shared with Ray node .*received no such file"):
        ray_runner.check_nodes(ray, _job(str(out), "token host 1", images))
    (out / ".probe").write_text("another-run host 2")
    with pytest.raises(ray_runner.OutputNotShared, match="received another run’s probe"):
        ray_runner.check_nodes(ray, _job(str(out), "token host 1", images))
    (out / ".probe").write_text("token host 1")
    ray_runner.check_nodes(ray, _job(str(out), "token host 1", images))  # seen: accepted
    with pytest.raises(ray_runner.OutputNotShared, match="INPUT_DIR .* is not visible on Ray node"):
        ray_runner.check_nodes(ray, _job(str(out), "token host 1", str(tmp_path / "elsewhere")))
    # An actor checks too, before it loads the model or writes anything.
    with pytest.raises(ray_runner.OutputNotShared):
        ray_runner.ChunkExplainer(_job(str(tmp_path), "token host 1", images))


def test_a_node_on_another_backend_than_the_driver_is_refused(cluster, images, tmp_path):
    # A driver on JAX joining a cluster whose workers run TensorFlow: refused before any work,
    # naming both backends and the setting, never a run that silently mixes frameworks.
    out = tmp_path / "out"
    out.mkdir()
    (out / ".probe").write_text("token host 1")
    on_jax = dataclasses.replace(_job(str(out), "token host 1", images), backend="jax")
    with pytest.raises(BackendError, match=r"runs Keras on 'tensorflow' .*but the driver on 'jax'.*KERAS_BACKEND=jax"):
        ray_runner.check_nodes(ray, on_jax)
    with pytest.raises(BackendError, match="every actor must use the driver's backend"):
        ray_runner.ChunkExplainer(on_jax)


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    """Three scenes of shapes for the segmentation and detection models, in two folders, and a
    scene without a shape (the detector finds nothing there: an image that asks nothing)."""
    from PIL import Image

    from saliency_kit.data.scenes import make_scenes

    root = tmp_path_factory.mktemp("ray_scenes")
    for i in (1, 2):
        (root / f"part{i}").mkdir()
        shutil.copy(os.path.join(REPO, "examples", "scenes", f"scene{i}.png"), root / f"part{i}")
    Image.fromarray(make_scenes(1, seed=4, objects=(0, 0)).images[0]).save(root / "part2" / "bare.png")
    return str(root)


@pytest.mark.parametrize("model, subjects", [("shapes_det", {"box1", "box2"}), ("shapes_seg", {"region"})])
def test_every_task_runs_on_ray_as_it_runs_here(cluster, scenes, model, subjects, tmp_path):
    """Another task than classification (detected boxes, predicted regions): each actor finds its
    images' targets through the local run's road, so the files and manifest lines are the same."""
    here, there = str(tmp_path / "here" / "out"), str(tmp_path / "ray" / "out")  # one name: one gallery title
    options = ["--model", model, "--method", "gradient", "--method", "gradcam", "--target", "top2", "--batch-size", "2"]
    assert saliency(["batch", scenes, "--out", here, *options]) == 0
    assert saliency(["batch", scenes, "--out", there, *options, "--ray", cluster, "--workers", "1"]) == 0
    assert_same_run(there, here)
    lines = manifest_lines(there)
    assert {line["image"]: line["status"] for line in lines} == {
        "part1/scene1.png": "ok",
        "part2/scene2.png": "ok",
        "part2/bare.png": "empty",  # nothing detected, no region predicted: complete, no files
    }
    assert {line["target"] for line in lines if line["status"] == "ok"} == subjects


def test_a_target_that_does_not_fit_an_image_is_the_local_runs_usage_error(cluster, scenes, tmp_path, capsys):
    # Found by an actor (a given box beyond an image): sent back as data, raised by the driver.
    options = ["--model", "shapes_det", "--method", "gradient", "--target", "star@15,12,340,320"]
    assert saliency(["batch", scenes, "--out", str(tmp_path / "here"), *options]) == 2
    here = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    ray_options = ["--ray", cluster, "--workers", "1"]
    assert saliency(["batch", scenes, "--out", str(tmp_path / "ray"), *options, *ray_options]) == 2
    there = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(here) == 1 and there == here
    assert "the box reaches beyond the image (64x64 pixels); received x1=340, y1=320." in here[0]
