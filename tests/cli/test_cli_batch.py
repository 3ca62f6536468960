"""``saliency batch``, run for real: killed with SIGKILL and resumed, sharded into one --out,
resumed with nothing left to do (no TensorFlow), refused after the model changed, accepted with
the same model given by another path; targets resolved once per batch."""

import shutil
import signal
import time

import numpy as np
from cli_support import (  # noqa: F401
    TIMEOUT,
    check_complete,
    command,
    finish,
    image_folder,
    manifest_records,
    own_lines,
    python,
    run,
    save_tiny_model,
    tiny_model,
)

from saliency_kit.batch import outputs
from saliency_kit.batch.discovery import select_shard


# ------------------------------------------------------------------------------ batch
def test_batch_killed_then_resumed_ends_with_every_output_exactly_once(tmp_path, tiny_model, image_folder, capsys):
    root, good, bad = image_folder
    out = tmp_path / "out"
    args = (
        "batch",
        root,
        "--out",
        out,
        "--model",
        tiny_model,
        "--method",
        "smoothgrad",
        "--samples",
        "64",
        "--seed",
        "1",
        "--method",
        "gradient",
        "--batch-size",
        "2",
    )
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
    complete = outputs.complete_images(outputs.Manifest(str(manifest)).read(), str(out))
    assert 0 < len(complete) < len(good), "not killed mid-way"

    # Without --resume the earlier run is not overwritten.
    code, _, err = run(*args)
    lines = own_lines(err, "batch")
    assert code == 2 and len(lines) == 1 and "--resume" in lines[0]

    folders = outputs.output_dirs(sorted(good + bad))
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

    # Nothing left to do (only files that failed before and still cannot be read): done without
    # TensorFlow or the model; the same model given by another path is recognised.
    other = tmp_path / "elsewhere" / "copy.keras"
    other.parent.mkdir()
    shutil.copyfile(tiny_model, other)
    again = [str(a) for a in args]
    again[again.index(str(tiny_model))] = str(other)
    settled = manifest.read_bytes()
    code, out_text, err = python(
        "import sys\nfrom saliency_kit.cli import main\n"
        f"status = main({[*again, '--resume']!r})\n"
        "print('STATUS', status, 'TF', 'tensorflow' in sys.modules)\n"
    )
    assert code == 0, err
    assert out_text.strip().splitlines()[-1] == "STATUS 1 TF False", (out_text, err)  # 1: the bad files
    assert f"{len(good)} already complete" in err and manifest.read_bytes() == settled

    # The model file changed since: refused, not mixed in.
    save_tiny_model(other, classes=5, softmax=False)
    assert main([*again, "--resume"]) == 2
    assert "the model file, its weights or its config changed" in capsys.readouterr().err


def test_shards_are_disjoint_cover_the_folder_and_can_share_an_output(tmp_path, tiny_model, image_folder):
    root, good, bad = image_folder
    out = tmp_path / "out"
    shards = [
        command("batch", root, "--out", out, "--model", tiny_model, "--method", "gradient", "--shard", f"{i}/2")
        for i in range(2)
    ]
    results = [finish(process) for process in shards]
    seen = []
    for i, (code, _, err) in enumerate(results):
        records = manifest_records(out / f"manifest.shard-{i}-of-2.jsonl")
        images = {r["image"] for r in records}
        assert code == (1 if images & set(bad) else 0), err
        assert images == set(select_shard(sorted(good + bad), i, 2))
        seen.append(images)
    assert not seen[0] & seen[1] and seen[0] | seen[1] == set(good + bad)
    check_complete(
        out, [r for i in range(2) for r in manifest_records(out / f"manifest.shard-{i}-of-2.jsonl")], good, bad
    )


def test_topk_targets_are_resolved_once_per_batch_whatever_the_number_of_methods(
    tmp_path, tiny_model, image_folder, monkeypatch
):
    from saliency_kit import engine
    from saliency_kit.cli import main

    calls = []
    real = engine.all_scores

    def counted(model, inputs, **kw):
        calls.append(len(inputs))
        return real(model, inputs, **kw)

    monkeypatch.setattr(engine, "all_scores", counted)
    root, good, bad = image_folder
    argv = [
        "batch",
        str(root),
        "--out",
        str(tmp_path / "out"),
        "--model",
        str(tiny_model),
        "--method",
        "gradient",
        "--method",
        "guided_backprop",
        "--method",
        "gradient_x_input",
        "--target",
        "top2",
        "--batch-size",
        "16",
    ]
    assert main(argv) == 1  # the bad files
    batches = int(np.ceil((len(good) + len(bad)) / 16))
    assert len(calls) == batches and sum(calls) == len(good)
    records = manifest_records(tmp_path / "out" / "manifest.jsonl")
    assert {r["method"] for r in records if r["status"] == "ok"} == {"gradient", "guided_backprop", "gradient_x_input"}
