"""``saliency batch --ray`` from a driver on Keras' JAX or PyTorch backend, joining a real local Ray
cluster whose own environment says TensorFlow: the job's actors run the driver's backend, and write
what the local run on that backend writes, byte for byte; their maps are TensorFlow's (a local run
in a TensorFlow process on the same images) to 1e-4."""

import keras
import pytest

BACKEND = keras.backend.backend()
pytestmark = pytest.mark.skipif(
    BACKEND == "tensorflow",
    reason="runs in the JAX and PyTorch processes: KERAS_BACKEND=jax (or torch) pytest tests/backends",
)

import importlib.util  # noqa: E402

if importlib.util.find_spec("ray") is None:
    pytest.skip('the "ray" extra is not installed (pip install -e ".[ray]")', allow_module_level=True)

import os  # noqa: E402
import pathlib  # noqa: E402
import secrets  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from saliency_kit.batch import outputs  # noqa: E402
from saliency_kit.cli import main  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
OPTIONS = ["--method", "guided_backprop", "--method", "smoothgrad", "--samples", "4", "--seed", "7"]
OPTIONS += ["--batch-size", "4", "--format", "both"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    """A Ray head started on its own (``ray start --head --block``) with KERAS_BACKEND=tensorflow
    in its environment, as a cluster set up for TensorFlow would be, and Ray's token authentication;
    stopped at the module's end. Yields ``(address, the token's environment variables)``."""
    port = _free_port()
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16)}
    env = {
        **os.environ,
        **auth,
        "KERAS_BACKEND": "tensorflow",
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "RAY_ENABLE_AUTO_CONNECT": "0",
    }
    log = tmp_path_factory.mktemp("ray_head") / "head.log"
    command = [os.path.join(os.path.dirname(sys.executable), "ray"), "start", "--head", "--block"]
    command += [f"--port={port}", "--num-cpus=2", "--include-dashboard=false", "--object-store-memory=100000000"]
    # Its own temporary folder (short: it holds Unix sockets), so that the address file `ray start`
    # writes there cannot make a later ray.init() on this machine join this stopped cluster.
    temp_dir = tempfile.mkdtemp(prefix="skray")
    command += [f"--temp-dir={temp_dir}"]
    with open(log, "wb") as handle:
        process = subprocess.Popen(command, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and process.poll() is None and "Ray runtime started" not in log.read_text():
        time.sleep(0.5)
    assert process.poll() is None, log.read_text()[-2000:]
    try:
        yield address, auth
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """12 shapes images in 2 folders, plus a file that is not an image."""
    from PIL import Image

    from saliency_kit.data.shapes import make_dataset

    root = tmp_path_factory.mktemp(f"{BACKEND}_ray_in")
    pictures, _, labels = make_dataset(12, seed=3)
    for i, (picture, label) in enumerate(zip(pictures, labels)):
        (root / f"part{i % 2}").mkdir(exist_ok=True)
        Image.fromarray(picture).save(root / f"part{i % 2}" / f"img{i:03d}_{label}.png")
    (root / "part1" / "broken.jpg").write_bytes(b"this is not a JPEG")
    return str(root)


def _files(out: str) -> dict:
    found = {}
    for directory, _, names in os.walk(out):
        for name in names:
            relative = os.path.relpath(os.path.join(directory, name), out)
            if relative != outputs.MANIFEST:
                found[relative] = pathlib.Path(directory, name).read_bytes()
    return found


def _batch(backend: str, images: str, out: str, *more: str, env: dict | None = None) -> str:
    """``saliency batch`` in a fresh process on Keras' ``backend``; returns what it printed."""
    env = {**os.environ, **(env or {}), "KERAS_BACKEND": backend, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "saliency_kit", "batch", images, "--out", out, *OPTIONS, *more]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stderr[-2000:]  # 1: the broken file
    return done.stdout


def test_actors_run_the_drivers_backend_and_write_the_local_runs_files(head, images, tmp_path):
    # one folder name (the gallery's title) under three parents
    local, on_ray, reference = (str(tmp_path / where / "out") for where in ("local", "ray", "tensorflow"))
    assert main(["batch", images, "--out", local, *OPTIONS]) == 1
    address, auth = head
    printed = _batch(BACKEND, images, on_ray, "--ray", address, "--workers", "2", env=auth)
    assert printed.startswith(f"model: shapes; input 64x64; 5 classes; backend {BACKEND}")
    assert "12 images explained, 0 already complete, 1 failed" in printed
    mine, theirs = _files(on_ray), _files(local)
    assert sorted(mine) == sorted(theirs)
    assert len([name for name in mine if name.endswith(("-heatmap.png", "-overlay.png", ".npz"))]) == 12 * 2 * 3
    assert len([name for name in mine if name.endswith("/photo.png")]) == 12  # one per image, for the gallery
    assert [name for name in mine if mine[name] != theirs[name]] == []

    _batch("tensorflow", images, reference)
    npz = sorted(name for name in mine if name.endswith(".npz"))
    assert npz == sorted(name for name in _files(reference) if name.endswith(".npz"))
    for name in npz:
        with np.load(os.path.join(on_ray, name)) as ours, np.load(os.path.join(reference, name)) as tf_maps:
            scale = float(np.abs(tf_maps["map"]).max())
            np.testing.assert_allclose(ours["map"], tf_maps["map"], rtol=0, atol=1e-4 * scale, err_msg=name)
            np.testing.assert_allclose(ours["score"], tf_maps["score"], rtol=1e-4, err_msg=name)
