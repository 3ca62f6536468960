"""The built-in model configs have one copy, the repository's top-level ``pretrained_configs/``: a
checkout reads that folder, and an installed package (where pyproject's ``package-dir`` mapping has
put the folder's files in ``saliency_kit/pretrained_configs/``) reads its own package."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from saliency_kit import zoo

ROOT = Path(__file__).resolve().parents[2]
NAMES = sorted(path.stem for path in (ROOT / "pretrained_configs").glob("*.toml"))


def test_a_checkout_reads_the_top_level_folder():
    assert "resnet50" in NAMES and "shapes" in NAMES
    assert zoo.list_models() == NAMES
    assert Path(zoo.get_spec("resnet50").source).resolve() == ROOT / "pretrained_configs" / "resnet50.toml"


def test_an_installed_package_reads_its_own_configs(tmp_path):
    site = tmp_path / "site-packages"
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "saliency_kit", site / "saliency_kit", ignore=skip)
    shutil.copytree(ROOT / "pretrained_configs", site / "saliency_kit" / "pretrained_configs", ignore=skip)
    code = (
        "from saliency_kit import zoo\n"
        "print(','.join(zoo.list_models()))\n"
        "print(zoo.get_spec('resnet50').source)\n"
        "print(len(zoo.get_spec('resnet50').class_names))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop("SALIENCY_KIT_CONFIGS", None)
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    names, source, classes = done.stdout.split()
    assert names.split(",") == NAMES
    assert Path(source).resolve() == site / "saliency_kit" / "pretrained_configs" / "resnet50.toml"
    assert classes == "1000"
