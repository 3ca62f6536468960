"""The ``--ray`` flags of ``saliency batch`` (saliency_kit.cli.ray_options): checks made before any
work, without Ray or TensorFlow running. The runs themselves are in tests/batch/test_ray_runner.py."""

import argparse
import os
import subprocess
import sys

import pytest

from saliency_kit.cli import ray_options
from saliency_kit.cli.options import UsageError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse(*argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--shard", type=lambda text: tuple(map(int, text.split("/"))))
    ray_options.add_options(parser)
    return parser.parse_args(list(argv))


def test_flags_parse():
    assert parse().ray is None
    assert parse("--ray").ray == ""
    args = parse("--ray", "auto", "--workers", "3", "--gpus-per-worker", "0.5", "--batch-images", "16")
    assert (args.ray, args.workers, args.gpus_per_worker, args.batch_images) == ("auto", 3, 0.5, 16)


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--workers", "2"], "--workers only applies with --ray"),
        (["--batch-images", "8"], "--batch-images only applies with --ray"),
        (["--gpus-per-worker", "1"], "--gpus-per-worker only applies with --ray"),
        (["--ray", "images/"], "--ray ADDRESS must be auto, ray://HOST:PORT or HOST:PORT"),
        (["--ray", "--shard", "0/2"], "use it without --shard; received --shard 0/2."),
    ],
)
def test_misuse_is_a_usage_error(argv, expected):
    with pytest.raises(UsageError, match=expected.replace("?", r"\?").replace("(", r"\(")):
        ray_options.check(parse(*argv))


@pytest.mark.parametrize("address", ["auto", "ray://head:10001", "10.0.0.5:6379", "head-node.local:6379"])
def test_addresses_are_accepted(address):
    pytest.importorskip("ray.data")
    ray_options.check(parse("--ray", address))


def test_without_ray_installed_the_message_says_how_to_install_it():
    # A fresh interpreter in which `import ray` fails, as it does where the extra is not installed.
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "from saliency_kit.cli import ray_options\n"
        "from saliency_kit.cli.options import UsageError\n"
        "import argparse\n"
        "try:\n"
        "    ray_options.check(argparse.Namespace(ray='', workers=None, batch_images=None, gpus_per_worker=0,"
        " shard=None))\n"
        "except UsageError as error:\n"
        "    print(error)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": REPO}
    )
    assert 'pip install "saliency_kit[ray]"' in done.stdout
    assert done.stdout.startswith("--ray needs Ray Data, which is not installed")


def test_joining_a_cluster_that_is_not_there_is_a_usage_error(tmp_path):
    pytest.importorskip("ray.data")
    from PIL import Image

    (tmp_path / "in").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "in" / "a.png")
    # Ray looks for a cluster of this machine under RAY_TMPDIR: an empty folder, no cluster.
    env = {**os.environ, "PYTHONPATH": REPO, "RAY_ADDRESS": "", "RAY_TMPDIR": str(tmp_path / "ray")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "saliency_kit",
            "batch",
            str(tmp_path / "in"),
            "--out",
            str(tmp_path / "out"),
            "--ray",
            "auto",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 2, done.stderr
    assert "--ray auto: cannot join a Ray cluster there" in done.stderr


def test_ray_without_an_address_starts_its_own_instance_even_where_ray_start_left_one(tmp_path):
    # `ray start` records its cluster's address in Ray's temporary folder, and stays recorded after
    # the cluster is gone; `--ray` without an address must start a local instance, never join it.
    pytest.importorskip("ray.data")
    import shutil
    import tempfile

    from PIL import Image

    (tmp_path / "in").mkdir()
    Image.new("RGB", (64, 64), (200, 40, 40)).save(tmp_path / "in" / "a.png")
    ray_tmp = tempfile.mkdtemp(prefix="skray")  # short: Ray puts Unix sockets under it
    try:
        os.makedirs(os.path.join(ray_tmp, "ray"))
        with open(os.path.join(ray_tmp, "ray", "ray_current_cluster"), "w") as handle:
            handle.write("127.0.0.1:9")  # a stopped cluster
        env = {**os.environ, "PYTHONPATH": REPO, "RAY_ADDRESS": "", "RAY_TMPDIR": ray_tmp}
        command = [sys.executable, "-m", "saliency_kit", "batch", str(tmp_path / "in")]
        command += ["--out", str(tmp_path / "out"), "--method", "gradient", "--ray", "--workers", "1"]
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "1 images explained, 0 already complete, 0 failed" in done.stdout
