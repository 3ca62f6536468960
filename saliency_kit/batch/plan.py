"""What a batch run will do, and the settings it records: known before any model is loaded.

:func:`plan_run` discovers and shards the images and reads an earlier run's manifest (``--resume``);
:func:`check_settings` records what the run computes in ``settings.json`` in --out, or refuses a
run whose settings differ from those recorded there (:class:`RunRefused`); :func:`model_fingerprint`
identifies the model by the contents of its files, whatever path it was given by.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator, Sequence

from .. import zoo
from ..files import write_json
from ..images import ImageLoadError, read_rgb
from . import outputs as out_files
from .discovery import IMAGE_EXTENSIONS, discover_images, select_shard
from .outputs import one_line

__all__ = [
    "Plan",
    "RunRefused",
    "SETTINGS",
    "check_settings",
    "file_digest",
    "locked",
    "model_fingerprint",
    "plan_run",
    "still_unreadable",
]

SETTINGS = "settings.json"


class RunRefused(ValueError):
    """--out holds something this run must not overwrite or mix with; the message says what to do."""


@dataclasses.dataclass
class Plan:
    """What a batch run will do, known before any model is loaded."""

    everything: list[str]  # every image under INPUT_DIR (relative paths)
    mine: list[str]  # this shard's images
    folders: dict[str, str]  # image -> output folder (relative to --out)
    manifest: out_files.Manifest
    skip: set[str]  # complete from an earlier run (--resume)
    recorded: set[tuple[str, str | None]]  # manifest keys already written (see outputs.recorded_keys)
    failed_before: dict[str, str]  # image -> error, of earlier failure lines of images to redo

    @property
    def todo(self) -> list[str]:
        return [path for path in self.mine if path not in self.skip]


def plan_run(input_dir: str, out_dir: str, *, shard: tuple[int, int] | None, resume: bool) -> Plan:
    """Discover, shard, and read an earlier run's manifest. Without ``resume``, an --out holding
    an earlier run of these images raises :class:`RunRefused`. ``FileNotFoundError`` when there is
    nothing to explain."""
    everything = discover_images(input_dir, exclude=[out_dir])
    if not everything:
        raise FileNotFoundError(f"no images under {input_dir!r} (looked for {', '.join(sorted(IMAGE_EXTENSIONS))})")
    folders = out_files.output_dirs(everything)
    mine = select_shard(everything, *shard) if shard else everything
    manifest = out_files.Manifest(os.path.join(out_dir, out_files.manifest_name(shard)))
    records = manifest.read()
    if not resume:
        existing = [p for p in mine if os.path.isdir(os.path.join(out_dir, folders[p]))]
        if os.path.exists(manifest.path) or existing:
            what = (
                os.path.basename(manifest.path)
                if os.path.exists(manifest.path)
                else f"{len(existing)} output folder(s) such as {folders[existing[0]]!r}"
            )
            raise RunRefused(
                f"--out {out_dir!r} already holds an earlier run ({what}); add --resume "
                f"to continue it, or choose another --out"
            )
    skip = out_files.complete_images(records, out_dir) & set(mine) if resume else set()
    failed = {r["image"]: r.get("error", "") for r in records if r.get("status") == "failed"}
    return Plan(
        everything,
        mine,
        folders,
        manifest,
        skip,
        out_files.recorded_keys(records),
        {p: e for p, e in failed.items() if p in set(mine) - skip},
    )


def still_unreadable(input_dir: str, paths: Sequence[str], *, max_pixels: int | None = None) -> dict[str, str]:
    """Of ``paths``, those that still cannot be read as images of at most ``max_pixels`` pixels ->
    the reason (no model needed): a resume whose only work left is files that failed before can
    finish without the model."""
    bad = {}
    for path in paths:
        try:
            read_rgb(os.path.join(input_dir, path), max_pixels=max_pixels)
        except ImageLoadError as error:
            bad[path] = one_line(error)
    return bad


# ------------------------------------------------------------------------------- settings
def file_digest(path: str | os.PathLike) -> str:
    """sha256 of a file's contents (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def model_fingerprint(model: str, weights: str | None) -> dict:
    """What identifies the model a run uses, whatever path it was given by: the contents of the
    model file, its sidecar or named config, its class names, and a weights file. Reads files
    only (no TensorFlow). ``ValueError``/``FileNotFoundError`` as :func:`saliency_kit.zoo.get_spec`."""
    path = os.fspath(model)
    fingerprint: dict = {}
    if path.lower().endswith(zoo.MODEL_SUFFIXES):
        if not os.path.isfile(path):
            raise FileNotFoundError(f"model file {path} does not exist")
        fingerprint["model_file"] = file_digest(path)
        sidecar = path + ".toml"
        fingerprint["config"] = file_digest(sidecar) if os.path.isfile(sidecar) else None
    else:
        spec = zoo.get_spec(path)
        fingerprint["name"] = spec.name
        fingerprint["config"] = file_digest(spec.source)
        if spec.model_file:
            with zoo.resolved_file(spec.model_file, spec.source) as file:
                fingerprint["model_file"] = file_digest(file)
        if spec.class_names is not None:
            fingerprint["classes"] = hashlib.sha256("\n".join(spec.class_names).encode()).hexdigest()
    if weights is None or weights in ("imagenet", "random"):
        fingerprint["weights"] = weights
    elif os.path.isfile(weights):
        fingerprint["weights"] = {"file": file_digest(weights)}
    else:
        raise FileNotFoundError(
            f"weights file {weights} does not exist (--weights accepts 'imagenet', "
            f"'random' or the path of a weights file)"
        )
    return fingerprint


@contextlib.contextmanager
def locked(directory: str) -> Iterator[None]:
    """An exclusive lock on ``directory`` (``flock`` on the folder itself: no lock file is left)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def check_settings(out_dir: str, settings: dict) -> None:
    """Record ``settings`` in ``out_dir/settings.json``, or check they equal those recorded there.

    Other settings raise :class:`RunRefused` naming what differs. The check and the write hold a
    lock on ``out_dir``, so shards started at the same moment agree on one file."""
    settings = json.loads(json.dumps(settings))  # the form it has once read back
    path = os.path.join(out_dir, SETTINGS)
    os.makedirs(out_dir, exist_ok=True)
    with locked(out_dir):
        before = None
        if os.path.exists(path):
            with open(path, encoding="utf-8") as handle:
                try:
                    before = json.load(handle)
                except ValueError:
                    before = None  # cut off by a crash before it was renamed into place: rewrite
        if before is not None:
            if before != settings:
                changed = ", ".join(k for k in settings if before.get(k) != settings[k]) or "settings"
                what = (
                    "the model file, its weights or its config changed since"
                    if changed == "model"
                    else f"{changed} differ"
                )
                raise RunRefused(
                    f"--out {out_dir!r} holds results made with other settings ({what}; see "
                    f"{path}); use the same options, or another --out"
                )
            return
        write_json(settings, path)
