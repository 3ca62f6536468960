"""Where ``saliency explain`` spends its time: wall clock against CPU time, phase by phase.

    python scripts/profile_explain.py photo.jpg --model mobilenet_v2 --weights random \
        --method guided_backprop --method gradcam --method integrated_gradients --method smoothgrad --target top3

Runs the command in this process with its phases wrapped by timers (TensorFlow's import, model
loading, each method's explain call -- its first call includes tracing --, the files, the grid) and
prints, per phase, wall seconds, CPU seconds of the whole process (all threads) and their ratio.
CPU time above wall time means several cores worked; wall above CPU means waiting (another process
holding the cores, the disk, a lock). ``os.getloadavg()`` is printed before and after: on a shared
machine the ratio says as much about the neighbours as about the command.
"""

from __future__ import annotations

import functools
import os
import sys
import time

PHASES: list[tuple[str, float, float]] = []


def timed(name, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            label = name(*args, **kwargs) if callable(name) else name
            PHASES.append((label, time.perf_counter() - wall, time.process_time() - cpu))

    return wrapper


def main(argv: list[str]) -> int:
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    start_wall, start_cpu = time.perf_counter(), time.process_time()
    load_before = os.getloadavg()
    from saliency_kit.batch import outputs
    from saliency_kit.cli import explain, options, startup
    from saliency_kit.cli import main as run_command

    startup.import_tensorflow = timed("import tensorflow + keras", startup.import_tensorflow)
    startup.import_tensorflow("--debug" in argv)  # quietly, before anything else imports it
    options.load_model_from_args = timed("load model", options.load_model_from_args)
    explain.task_targets = timed("forward pass + targets", explain.task_targets)
    import saliency_kit as sk

    sk.explain = timed(lambda model, x, method, *a, **k: f"explain {method} (first call: traces)", sk.explain)
    outputs.write_image_outputs = timed("heatmap + overlay PNGs", outputs.write_image_outputs)
    explain._write_grid = timed("grid PNG", explain._write_grid)
    status = run_command(["explain", *argv])
    wall, cpu = time.perf_counter() - start_wall, time.process_time() - start_cpu
    print(f"\nload average before {load_before[0]:.1f}, after {os.getloadavg()[0]:.1f} (cores: {os.cpu_count()})")
    print(f"{'phase':<45} {'wall s':>8} {'CPU s':>8} {'wall/CPU':>9}")
    inner = 0.0
    for label, w, c in PHASES:
        inner += w
        print(f"{label:<45} {w:8.2f} {c:8.2f} {w / max(c, 1e-9):9.2f}")
    print(f"{'everything else (parsing, images, Python)':<45} {wall - inner:8.2f}")
    print(f"{'total':<45} {wall:8.2f} {cpu:8.2f} {wall / max(cpu, 1e-9):9.2f}")
    return status


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
