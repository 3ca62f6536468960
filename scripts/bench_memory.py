"""Memory of long-running analysis code: does explaining many models, or one model with a new
rule object or a new lambda target on every call, keep growing?

    python scripts/bench_memory.py [--models N] [--calls N]

Prints, each figure measured in a fresh subprocess:

* resident-memory growth (``VmRSS``) over ``--models`` (200) freshly built small CNNs explained
  one after another with guided backprop, and the same with the plain gradient; target: guided
  within 1.5× of the gradient's growth;
* kernels the engine keeps for one model after ``--calls`` (50) calls with a new
  ``sk.GuidedBackprop()`` instance each (``sk.jacobian(rule=...)``), and with a new lambda target
  each (``targets=lambda out: out[:, 1]``); target: no more than one kernel each, and never more
  than ``engine.KERNELS_PER_MODEL``;
* kernels kept for one model explained at 120 different input sizes (bounded by
  ``engine.KERNELS_PER_MODEL``).

No timing; figures vary with the allocator and the machine (a shared one included), so quote them
as measured.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _small_cnn():
    import keras

    inputs = keras.Input((16, 16, 3))
    h = keras.layers.Conv2D(8, 3, activation="relu")(inputs)
    h = keras.layers.Conv2D(8, 3, activation="relu")(h)
    h = keras.layers.GlobalAveragePooling2D()(h)
    return keras.Model(inputs, keras.layers.Dense(5, activation="softmax")(h))


def child_models(method: str, count: int) -> dict:
    import gc

    import numpy as np

    import saliency_kit as sk

    x = np.random.default_rng(0).uniform(size=(2, 16, 16, 3)).astype("float32")
    for _ in range(5):  # warm-up: the runtime's own one-off allocations
        sk.explain(_small_cnn(), x, method, 0)
    gc.collect()
    start = _rss_mb()
    for _ in range(count):
        sk.explain(_small_cnn(), x, method, 0)
    gc.collect()
    return {"growth_mb": _rss_mb() - start}


def child_kernels(calls: int) -> dict:
    import numpy as np

    import saliency_kit as sk
    from saliency_kit import engine

    model = _small_cnn()
    x = np.random.default_rng(0).uniform(size=(2, 16, 16, 3)).astype("float32")
    sk.jacobian(model, x, [0], rule=sk.GuidedBackprop())
    before = engine.kernel_count(model)
    for _ in range(calls):
        sk.jacobian(model, x, [0], rule=sk.GuidedBackprop())
    rules = engine.kernel_count(model) - before

    def column():  # a new lambda object on every call, written once
        return lambda out: out[:, 1]

    sk.explain(model, x, "gradient", column())
    before = engine.kernel_count(model)
    for _ in range(calls):
        sk.explain(model, x, "gradient", column())
    lambdas = engine.kernel_count(model) - before

    import keras

    sizes = keras.Sequential(
        [
            keras.Input((None, 3)),
            keras.layers.Conv1D(4, 1, activation="relu"),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(2),
        ]
    )
    for length in range(1, 121):
        sk.explain(sizes, np.ones((1, length, 3), "float32"), "gradient", 0)
    return {
        "new_rule_kernels": rules,
        "new_lambda_kernels": lambdas,
        "sizes_kernels": engine.kernel_count(sizes),
        "bound": engine.KERNELS_PER_MODEL,
    }


def _child(*args) -> dict:
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", *map(str, args)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=200)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, *rest = args.child
        result = child_models(rest[0], int(rest[1])) if kind == "models" else child_kernels(int(rest[0]))
        print(json.dumps(result))
        return
    guided = _child("models", "guided_backprop", args.models)["growth_mb"]
    plain = _child("models", "gradient", args.models)["growth_mb"]
    kernels = _child("kernels", args.calls)
    print(f"resident-memory growth over {args.models} new models (MB; measured on a shared machine)\n")
    print("| measurement | value | target |")
    print("|---|---:|---|")
    print(f"| gradient | {plain:.1f} MB | – |")
    print(f"| guided_backprop | {guided:.1f} MB | – |")
    print(f"| guided / gradient | {guided / max(plain, 1e-9):.2f} | ≤ 1.5 |")
    print(
        f"| kernels added by {args.calls} calls with a new GuidedBackprop() each | {kernels['new_rule_kernels']} | 0 |"
    )
    print(
        f"| kernels added by {args.calls} calls with a new lambda target each | {kernels['new_lambda_kernels']} | 0 |"
    )
    print(f"| kernels kept after 120 input sizes | {kernels['sizes_kernels']} | ≤ {kernels['bound']} |")


if __name__ == "__main__":
    main()
