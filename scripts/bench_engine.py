"""Benchmark the attribution engine against the raw compiled forward+backward pass.

    python scripts/bench_engine.py [--samples N] [--steps N] [--repeats R] [--quick]
                                   [--channels C] [--masks N] [--new-methods-only] [--lrp-only]

On ResNet50 (``weights=None``, so nothing is downloaded), batch 8, 224×224, it times each
method and divides by the time of a plain compiled ``tf.function`` that computes the same batch's
forward pass and the gradient of one class score (the least any gradient method can cost):

* gradient, guided backprop, deconvnet: target ratio ≤ 1.10;
* SmoothGrad with n samples: ≤ 1.10·n; integrated gradients with n steps: ≤ 1.10·n;
* Grad-CAM: ≤ 1.0 (its backward pass stops at the last convolutional block);
* K = 10 classes through one shared forward pass (``sk.jacobian``) over 10 single-class calls:
  ≤ 0.75;
* LRP with the default composite: ≤ 1.3; DeepLIFT (inputs and baselines in one pass): ≤ 2.2;
* the newer methods (see ``bench_new_methods``).

Then the peak memory of SmoothGrad at 20 and at 200 samples on a small CNN, each measured in a
fresh subprocess (peak resident set size ``VmHWM``; TensorFlow keeps no allocator statistics
on CPU):
target equal within 20%, since samples are added into running sums.

Times are the minimum over ``--repeats`` rounds after one warm-up (compilation) run; each round
times every measurement once, so a change of load affects all alike. On a shared machine they
are still noisy; say so when quoting them. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _best_times(runs: dict, repeats: int) -> dict:
    """Minimum seconds of each function over ``repeats`` round-robin rounds, after a warm-up."""
    for fn in runs.values():
        fn()  # tracing and compilation are not what we measure
    best = {name: float("inf") for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def _status_mb(field: str) -> float:
    """``VmRSS`` (now) or ``VmHWM`` (peak) of this process in MB, from /proc/self/status.

    ``VmHWM`` belongs to this process image only; ``getrusage``'s ``ru_maxrss`` would carry the
    parent's size across ``fork``/``exec``.
    """
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def memory_child(samples: int) -> None:
    """Run SmoothGrad with ``samples`` samples on a small CNN; print peak memory as JSON."""
    import keras
    import numpy as np

    import saliency_kit as sk

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((64, 64, 3)),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(64, 3, activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(10, activation="softmax"),
        ]
    )
    x = np.random.default_rng(0).uniform(size=(16, 64, 64, 3)).astype("float32")
    sk.explain(model, x[:1], "gradient", 0)  # the runtime's own start-up allocations
    before = _status_mb("VmRSS")
    sk.explain(model, x, "smoothgrad", 0, samples=samples, seed=0, batch_size=20)
    peak = _status_mb("VmHWM")
    print(json.dumps({"samples": samples, "before_mb": before, "peak_mb": peak}))


def _memory(samples: int) -> dict:
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--memory-child", str(samples)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=4, help="SmoothGrad samples (default 4)")
    parser.add_argument("--steps", type=int, default=4, help="integrated-gradients steps (default 4)")
    parser.add_argument("--repeats", type=int, default=2, help="timed rounds (default 2)")
    parser.add_argument("--quick", action="store_true", help="a 112×112 ResNet50 for a fast smoke run")
    parser.add_argument("--memory-child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--channels", type=int, default=16, help="Score-CAM channels (max_channels, default 16)")
    parser.add_argument("--masks", type=int, default=16, help="RISE masks (default 16)")
    parser.add_argument("--new-methods-only", action="store_true", help="only the rows of the new methods")
    parser.add_argument("--lrp-only", action="store_true", help="only the LRP and DeepLIFT rows")
    parser.add_argument(
        "--core-only",
        action="store_true",
        help="only the first table (the rows older versions of this script had: compare releases)",
    )
    parser.add_argument(
        "--composites",
        nargs="*",
        default=[],
        metavar="NAME",
        help="further LRP composites to time beside the default (e.g. epsilon epsilon_gamma_box)",
    )
    args = parser.parse_args()
    if args.memory_child:
        memory_child(args.memory_child)
        return

    import keras
    import numpy as np
    import tensorflow as tf

    import saliency_kit as sk

    size = 112 if args.quick else 224
    keras.utils.set_random_seed(0)
    model = keras.applications.ResNet50(weights=None, input_shape=(size, size, 3))
    x = np.random.default_rng(0).normal(size=(8, size, size, 3)).astype("float32")
    targets = np.arange(8)[:, None] * 7
    reps = args.repeats

    @tf.function(input_signature=[tf.TensorSpec(x.shape, tf.float32), tf.TensorSpec([8, 1], tf.int32)])
    def raw(inputs, classes):
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            score = tf.gather(model(inputs, training=False), classes, batch_dims=1)
        return tape.gradient(score, inputs)

    classes = tf.constant(targets, tf.int32)
    xt = tf.constant(x)
    if args.new_methods_only:
        bench_new_methods(model, x, targets, raw, reps, args.steps, args.channels, args.masks)
        return
    if args.lrp_only:
        bench_lrp(model, x, targets, raw, reps, args.composites)
        return

    def explain(method, **options):
        return lambda: sk.explain(model, x, method, targets, batch_size=8, **options)

    ten = list(range(10))
    n_samples, n_steps = args.samples, args.steps
    runs = {  # name -> function; all warmed up, then timed round-robin so load drifts hit all alike
        "raw": lambda: raw(xt, classes).numpy(),
        "gradient": explain("gradient"),
        "guided_backprop": explain("guided_backprop"),
        "deconvnet": explain("deconvnet"),
        "gradcam": explain("gradcam"),
        "smoothgrad": explain("smoothgrad", samples=n_samples, seed=0),
        "integrated_gradients": explain("integrated_gradients", steps=n_steps),
        "shared": lambda: sk.jacobian(model, x, classes=ten, batch_size=80),
        "separate": lambda: [sk.jacobian(model, x, classes=[k], batch_size=8) for k in ten],
    }
    best = _best_times(runs, reps)
    base = best["raw"]
    rows = [("raw compiled forward+backward, batch 8", base, 1.0, "–")]
    for method, limit in (("gradient", 1.10), ("guided_backprop", 1.10), ("deconvnet", 1.10), ("gradcam", 1.0)):
        rows.append((method, best[method], best[method] / base, f"≤ {limit:.2f}"))
    rows.append(
        (
            f"smoothgrad, {n_samples} samples (ratio / n)",
            best["smoothgrad"],
            best["smoothgrad"] / base / n_samples,
            "≤ 1.10",
        )
    )
    rows.append(
        (
            f"integrated_gradients, {n_steps} steps (ratio / n)",
            best["integrated_gradients"],
            best["integrated_gradients"] / base / n_steps,
            "≤ 1.10",
        )
    )
    shared, single = best["shared"], best["separate"]
    rows.append(("K=10 classes, one shared forward (jacobian)", shared, None, ""))
    rows.append(("10 single-class calls", single, None, ""))
    rows.append(("shared / separate", shared / single, shared / single, "≤ 0.75"))

    print(
        f"\nResNet50 (weights=None), batch 8, {size}×{size}; best of {reps} rounds after a warm-up; "
        f"TensorFlow {tf.__version__}, {os.cpu_count()} CPU cores (shared: timings are noisy)\n"
    )
    print("| measurement | seconds | ratio | target |")
    print("|---|---:|---:|---|")
    for name, seconds, ratio, target in rows:
        ratio_text = "" if ratio is None else f"{ratio:.2f}"
        print(f"| {name} | {seconds:.3f} | {ratio_text} | {target} |")

    if args.core_only:
        return
    bench_lrp(model, x, targets, raw, reps, args.composites)
    bench_new_methods(model, x, targets, raw, reps, n_steps, args.channels, args.masks)

    low, high = _memory(20), _memory(200)
    growth = (high["peak_mb"] - high["before_mb"], low["peak_mb"] - low["before_mb"])
    print("\nSmoothGrad peak memory, small CNN (16 inputs 64×64×3, batch_size 20), one subprocess each\n")
    print("| samples | RSS before explain (MB) | peak RSS (MB) | growth during explain (MB) |")
    print("|---:|---:|---:|---:|")
    for m, g in ((low, growth[1]), (high, growth[0])):
        print(f"| {m['samples']} | {m['before_mb']:.0f} | {m['peak_mb']:.0f} | {g:.0f} |")
    print(f"\npeak RSS at 200 / at 20 samples: {high['peak_mb'] / low['peak_mb']:.3f} (target within 1.20)")


# LRP and DeepLIFT -------------------------------------------------------------------------------
def bench_lrp(model, x, targets, raw, reps: int, composites=()) -> None:
    """Rows for ``sk.explain`` with ``lrp`` (the default composite, then each of ``composites``;
    ZBox bounds: the batch's min and max) and ``deeplift`` (the default baseline 0; each input and
    its baseline go through one backward pass of the rewritten model, 2B rows), as ratios to the
    plain compiled forward+backward pass of the same batch.

    * lrp with the default composite: target ≤ 1.3; deeplift: target ≤ 2.2.
    """
    import tensorflow as tf

    import saliency_kit as sk
    from saliency_kit import methods

    xt, classes = tf.constant(x), tf.constant(targets, tf.int32)
    composite = methods.get("lrp").options[0].default

    def explain(method, **options):
        return lambda: sk.explain(model, x, method, targets, batch_size=8, **options)

    extra = [name for name in composites if name != composite]
    runs = {
        "raw": lambda: raw(xt, classes).numpy(),
        "lrp": explain("lrp"),
        "deeplift": explain("deeplift"),
        **{name: explain("lrp", composite=name, low=float(x.min()), high=float(x.max())) for name in extra},
    }
    best = _best_times(runs, reps)
    rows = [
        ("raw compiled forward+backward, batch 8", best["raw"], 1.0, "–"),
        (f"lrp, composite {composite}", best["lrp"], best["lrp"] / best["raw"], "≤ 1.30"),
        ("deeplift, baseline 0 (2B rows in one pass)", best["deeplift"], best["deeplift"] / best["raw"], "≤ 2.20"),
        *((f"lrp, composite {name}", best[name], best[name] / best["raw"], "") for name in extra),
    ]
    print("\nLRP and DeepLIFT, same model and batch\n")
    print("| measurement | seconds | ratio | target |")
    print("|---|---:|---:|---|")
    for name, seconds, ratio, target in rows:
        print(f"| {name} | {seconds:.3f} | {ratio:.2f} | {target} |")


# newer methods ---------------------------------------------------------------------------------
def bench_new_methods(model, x, targets, raw, reps: int, steps: int, channels: int, masks: int) -> None:
    """Rows for Blur IG, Guided IG, Score-CAM, RISE (ratios to the plain compiled passes) and XRAI
    side by side with PAIR's on one image given the same base attributions.

    * blur_ig, guided_ig with n steps: time / (forward+backward) / n, target ≤ 1.2;
    * scorecam with C channels (``max_channels=C``): time / (compiled forward of the batch) / C,
      target ≤ 1.1; rise with N masks: time / forward / N, target ≤ 1.1;
    * xrai (segments + ranking) / PAIR's ``XRAI.GetMask(base_attribution=...)``: target ≤ 0.5.
    """
    import numpy as np
    import tensorflow as tf

    import saliency_kit as sk
    from saliency_kit.methods.xrai import felzenszwalb_segments, rank_regions

    xt, classes = tf.constant(x), tf.constant(targets, tf.int32)

    @tf.function(input_signature=[tf.TensorSpec(x.shape, tf.float32)])
    def forward(inputs):
        return model(inputs, training=False)

    def explain(method, **options):
        return lambda: sk.explain(model, x, method, targets, batch_size=8, **options)

    image = x[0].astype(np.float64)
    attribution = np.random.default_rng(1).normal(size=image.shape)

    def ours_xrai():
        return rank_regions(attribution.max(axis=-1), felzenszwalb_segments(image))[0]

    def pair_xrai():
        from saliency.core import XRAI

        return XRAI().GetMask(image, None, base_attribution=attribution)

    runs = {
        "raw": lambda: raw(xt, classes).numpy(),
        "forward": lambda: forward(xt).numpy(),
        "blur_ig": explain("blur_ig", steps=steps),
        "guided_ig": explain("guided_ig", steps=steps),
        "scorecam": explain("scorecam", max_channels=channels),
        "rise": explain("rise", masks=masks, seed=0),
        "xrai": ours_xrai,
        "pair_xrai": pair_xrai,
    }
    best = _best_times(runs, reps)
    rows = [
        ("raw compiled forward+backward, batch 8", best["raw"], 1.0, "–"),
        ("raw compiled forward, batch 8", best["forward"], 1.0, "–"),
        (
            f"blur_ig, {steps} steps (ratio to forward+backward / n)",
            best["blur_ig"],
            best["blur_ig"] / best["raw"] / steps,
            "≤ 1.20",
        ),
        (
            f"guided_ig, {steps} steps (ratio to forward+backward / n)",
            best["guided_ig"],
            best["guided_ig"] / best["raw"] / steps,
            "≤ 1.20",
        ),
        (
            f"scorecam, {channels} channels (ratio to forward / channels)",
            best["scorecam"],
            best["scorecam"] / best["forward"] / channels,
            "≤ 1.10",
        ),
        (
            f"rise, {masks} masks (ratio to forward / masks)",
            best["rise"],
            best["rise"] / best["forward"] / masks,
            "≤ 1.10",
        ),
        (
            "xrai on one image, segments + ranking (ratio to PAIR's XRAI)",
            best["xrai"],
            best["xrai"] / best["pair_xrai"],
            "≤ 0.50",
        ),
        ("PAIR's XRAI.GetMask, same base attributions", best["pair_xrai"], None, ""),
    ]
    print("\nNew methods, same model and batch\n")
    print("| measurement | seconds | ratio | target |")
    print("|---|---:|---:|---|")
    for name, seconds, ratio, target in rows:
        ratio_text = "" if ratio is None else f"{ratio:.2f}"
        print(f"| {name} | {seconds:.3f} | {ratio_text} | {target} |")


if __name__ == "__main__":
    main()
