"""Benchmark the attribution engine against the raw compiled forward+backward pass.

    python scripts/bench_engine.py [--backend tensorflow|jax|torch|all] [--samples N] [--steps N]
                                   [--repeats R] [--quick] [--channels C] [--masks N]
                                   [--new-methods-only] [--lrp-only] [--floors-only] [--peers]

On ResNet50 (``weights=None``, so nothing is downloaded), batch 8, 224×224, it times each
method and divides by the time of a plain compiled function of the same backend that computes
the same batch's forward pass and the gradient of one class score (the least any gradient method
can cost): a ``tf.function`` with a tape on TensorFlow, ``jax.jit(jax.grad(...))`` over
``model.stateless_call`` on JAX (``--backend jax``), autograd through the model on PyTorch
(``--backend torch``: ``torch.autograd.grad`` of the gathered scores, under ``torch.enable_grad``);
``--backend all`` runs each backend in its own process, one after the other, and prints the three
tables:

* gradient, guided backprop, deconvnet: target ratio ≤ 1.10;
* SmoothGrad with n samples: ≤ 1.10·n; integrated gradients with n steps: ≤ 1.10·n;
* Grad-CAM: ≤ 1.0 (its backward pass stops at the last convolutional block);
* K = 10 classes through one shared forward pass (``sk.jacobian``) over 10 single-class calls:
  ≤ 0.75;
* the newer methods (see ``bench_new_methods``).

Then each row that has a floor from its arithmetic (``bench_floors``, also ``--floors-only``;
``--lrp-only``: its LRP and DeepLIFT rows), with that floor: LRP ``epsilon`` ≤ 1.15,
``epsilon_plus_flat`` and ``epsilon_gamma_box`` ≤ 1.5, DeepLIFT ≤ 1.15, Guided IG ≤ 1.2 per step,
Grad-CAM ≤ 0.46, and SmoothGrad with S samples and integrated gradients with S steps ≤ 1.05 of
one plain compiled forward+backward over the S·B rows they form (SmoothGrad ``with_scores=False``:
the clean scores are a forward pass of B more rows, F/S of the plain pass, which integrated
gradients gets free at its path's end). Each round gives every row its
own ratio (its time over the baseline's in that round); a row whose rounds disagree by more than
5% is marked, and the script then says the machine was too noisy to tell. The LRP and DeepLIFT
rows also show what their convolutions alone cost, from the plain forward pass timed in the same
round: γ needs two transposed passes (one with w, one with w⁺), so ``epsilon_gamma_box`` cannot
reach 1.5 on a network whose forward and backward cost alike.

``--peers``: the same work through the peers that have these methods (``scripts/bench_peers.py``:
tf-keras-vis, PAIR's ``saliency``, Xplique's RISE, Zennit's LRP on a PyTorch twin of the network),
in this process, as ratios our time / theirs (target ≤ 1.0), each saying whether the numbers are
the same.

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

CAM_LAYER = "conv5_block3_out"  # ResNet50's last block: the CAM rows' layer, ours and the peers'


def _best_times(runs: dict, repeats: int) -> dict:
    """Minimum seconds of each function over ``repeats`` round-robin rounds, after a warm-up."""
    return {name: min(times) for name, times in _round_times(runs, repeats).items()}


def _round_times(runs: dict, repeats: int) -> dict:
    """Seconds of each function in each of ``repeats`` round-robin rounds, after a warm-up."""
    for fn in runs.values():
        fn()
    times: dict = {name: [] for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times


def plain_pass(model, shape: tuple, rows: int):
    """A compiled ``(inputs [rows, ...], classes [rows, 1]) -> input gradients`` of the chosen
    logits, hand-written in the backend's own way (a ``tf.function`` with a tape;
    ``jax.jit(jax.grad(...))`` over ``model.stateless_call``): the least any gradient method over
    ``rows`` model evaluations can cost."""
    import keras

    if keras.backend.backend() == "jax":
        return _jax_plain(model, gradient=True)
    if keras.backend.backend() == "torch":
        return _torch_plain(model, gradient=True)
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([rows, *shape], tf.float32), tf.TensorSpec([rows, 1], tf.int32)])
    def plain(inputs, classes):
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            score = tf.gather(model(inputs, training=False), classes, batch_dims=1)
        return tape.gradient(score, inputs)

    return plain


def plain_forward(model, shape: tuple, rows: int):
    """A compiled ``inputs [rows, ...] -> logits``: the forward share of ``plain_pass``."""
    import keras

    if keras.backend.backend() == "jax":
        return _jax_plain(model, gradient=False)
    if keras.backend.backend() == "torch":
        return _torch_plain(model, gradient=False)
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([rows, *shape], tf.float32)])
    def forward(inputs):
        return model(inputs, training=False)

    return forward


def _framework() -> str:
    """The backend's framework and version, e.g. ``TensorFlow 2.21.0``."""
    import keras

    if keras.backend.backend() == "jax":
        import jax

        return f"JAX {jax.__version__}"
    if keras.backend.backend() == "torch":
        import torch

        return f"PyTorch {torch.__version__}, {torch.get_num_threads()} threads"
    import tensorflow as tf

    return f"TensorFlow {tf.__version__}"


def _jax_plain(model, gradient: bool):
    """``plain_pass`` (``gradient=True``) or ``plain_forward`` on JAX: ``jax.jit`` over
    ``model.stateless_call`` with the variables as arguments."""
    import jax
    import jax.numpy as jnp

    trainable = [v.value for v in model.trainable_variables]
    fixed = [v.value for v in model.non_trainable_variables]

    def logits(inputs, trainable, fixed):
        return model.stateless_call(trainable, fixed, inputs, training=False)[0]

    if not gradient:
        forward = jax.jit(logits)
        return lambda inputs: forward(inputs, trainable, fixed)

    def score(inputs, classes, trainable, fixed):
        return jnp.take_along_axis(logits(inputs, trainable, fixed), classes, axis=1).sum()

    grad = jax.jit(jax.grad(score))
    return lambda inputs, classes: grad(inputs, classes, trainable, fixed)


def _torch_plain(model, gradient: bool):
    """``plain_pass`` (``gradient=True``) or ``plain_forward`` on PyTorch, written as a PyTorch user
    would: the model called eagerly, ``torch.autograd.grad`` of the gathered scores with respect to
    the inputs (forward only under ``torch.no_grad``)."""
    import torch

    def forward(inputs):
        with torch.no_grad():
            return model(inputs, training=False)

    if not gradient:
        return forward

    def grad(inputs, classes):
        leaf = inputs.detach().requires_grad_(True)
        with torch.enable_grad():
            score = torch.gather(model(leaf, training=False), 1, classes.long()).sum()
            return torch.autograd.grad(score, leaf)[0]

    return grad


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
    parser.add_argument("--lrp-only", action="store_true", help="only the LRP and DeepLIFT rows (with their floors)")
    parser.add_argument("--floors-only", action="store_true", help="only the rows with a floor")
    parser.add_argument("--peers", action="store_true", help="only the rows side by side with the installed peers")
    parser.add_argument(
        "--backend",
        choices=("tensorflow", "jax", "torch", "all"),
        default="tensorflow",
        help="the Keras backend to time, each against its own hand-written compiled gradient; "
        "'all': each in its own process, one after the other (default tensorflow)",
    )
    parser.add_argument(
        "--core-only",
        action="store_true",
        help="only the first table (the rows older versions of this script had: compare releases)",
    )
    args = parser.parse_args()
    if args.backend == "all":
        for backend in ("tensorflow", "jax", "torch"):
            rest = [a for a in sys.argv[1:] if not a.startswith("--backend") and a not in ("all",)]
            print(f"\n## Keras backend: {backend}\n", flush=True)
            subprocess.run([sys.executable, __file__, *rest, "--backend", backend], check=True)
        return
    os.environ["KERAS_BACKEND"] = args.backend
    if args.memory_child:
        memory_child(args.memory_child)
        return

    import keras
    import numpy as np
    from keras import ops

    import saliency_kit as sk

    size = 112 if args.quick else 224
    keras.utils.set_random_seed(0)
    model = keras.applications.ResNet50(weights=None, input_shape=(size, size, 3))
    x = np.random.default_rng(0).normal(size=(8, size, size, 3)).astype("float32")
    targets = np.arange(8)[:, None] * 7
    reps = args.repeats

    raw = plain_pass(model, x.shape[1:], len(x))
    classes = ops.convert_to_tensor(targets.astype(np.int32))
    xt = ops.convert_to_tensor(x)
    if args.new_methods_only:
        bench_new_methods(model, x, targets, raw, reps, args.steps, args.channels, args.masks)
        return
    if args.lrp_only or args.floors_only:
        bench_floors(model, x, targets, reps, args.samples, args.steps, lrp_only=args.lrp_only)
        return
    if args.peers:
        bench_peers(model, x, targets, reps, args.steps, args.channels, size, args.masks)
        return

    def explain(method, **options):
        return lambda: sk.explain(model, x, method, targets, batch_size=8, **options)

    ten = list(range(10))
    n_samples, n_steps = args.samples, args.steps
    runs = {  # name -> function; all warmed up, then timed round-robin so load drifts hit all alike
        "raw": lambda: ops.convert_to_numpy(raw(xt, classes)),
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
        f"{_framework()}, {os.cpu_count()} CPU cores (shared: timings are noisy)\n"
    )
    print("| measurement | seconds | ratio | target |")
    print("|---|---:|---:|---|")
    for name, seconds, ratio, target in rows:
        ratio_text = "" if ratio is None else f"{ratio:.2f}"
        print(f"| {name} | {seconds:.3f} | {ratio_text} | {target} |")

    if args.core_only:
        return
    bench_floors(model, x, targets, reps, n_samples, n_steps)
    if sk.backend() != "tensorflow":  # the newer methods' rows and the memory rows time TensorFlow code
        return
    bench_new_methods(model, x, targets, raw, reps, n_steps, args.channels, args.masks)

    low, high = _memory(20), _memory(200)
    growth = (high["peak_mb"] - high["before_mb"], low["peak_mb"] - low["before_mb"])
    print("\nSmoothGrad peak memory, small CNN (16 inputs 64×64×3, batch_size 20), one subprocess each\n")
    print("| samples | RSS before explain (MB) | peak RSS (MB) | growth during explain (MB) |")
    print("|---:|---:|---:|---:|")
    for m, g in ((low, growth[1]), (high, growth[0])):
        print(f"| {m['samples']} | {m['before_mb']:.0f} | {m['peak_mb']:.0f} | {g:.0f} |")
    print(f"\npeak RSS at 200 / at 20 samples: {high['peak_mb'] / low['peak_mb']:.3f} (target within 1.20)")


# rows with a floor ------------------------------------------------------------------------------
NOISE = 0.05  # rounds of one row that disagree by more than this cannot tell a 5% difference


def bench_floors(model, x, targets, reps: int, samples: int, steps: int, lrp_only: bool = False) -> None:
    """Rows whose floor follows from their arithmetic, each divided by the plain compiled
    forward+backward of the rows it evaluates (``plain_pass``): the batch's ``B`` rows, or the
    ``S·B`` rows SmoothGrad's samples and integrated gradients' steps form in one call
    (``batch_size=S·B``); Guided IG per step (its steps run in a loop, one batch each). ZBox
    bounds of ``epsilon_gamma_box``: the batch's min and max. Each round's ratio is the row's time
    over its baseline's in the same round; "spread" is how far the rounds' ratios lie apart."""
    import numpy as np
    from keras import ops

    import saliency_kit as sk

    batch, shape = len(x), x.shape[1:]
    classes = np.asarray(targets, np.int32)

    def explain(method, size=batch, **options):
        return lambda: sk.explain(model, x, method, targets, batch_size=size, **options)

    def plain(rows):
        fn, inputs = plain_pass(model, shape, rows), ops.convert_to_tensor(np.repeat(x, rows // batch, axis=0))
        labels = ops.convert_to_tensor(np.repeat(classes, rows // batch, axis=0))
        return lambda: ops.convert_to_numpy(fn(inputs, labels))

    forward_fn, batch_inputs = plain_forward(model, shape, batch), ops.convert_to_tensor(x)
    one_row_fn, one_input = plain_forward(model, shape, 1), ops.convert_to_tensor(x[:1])

    def forward():
        return ops.convert_to_numpy(forward_fn(batch_inputs))

    def forward_one_row():
        return ops.convert_to_numpy(one_row_fn(one_input))

    bounds = {"low": float(x.min()), "high": float(x.max())}
    #: (row, run, rows of its baseline, divided by, floor)
    rows = [
        ("lrp, composite epsilon", explain("lrp", composite="epsilon"), batch, 1, 1.15),
        ("lrp, composite epsilon_plus_flat", explain("lrp", composite="epsilon_plus_flat"), batch, 1, 1.5),
        ("lrp, composite epsilon_gamma_box", explain("lrp", composite="epsilon_gamma_box", **bounds), batch, 1, 1.5),
        ("deeplift, baseline 0", explain("deeplift"), batch, 1, 1.15),
    ]
    #: What each row's convolutions cost, in forward passes F and backward passes B of the batch
    #: (B = plain forward+backward − F, measured in the same round), over F + B: ε runs the plain
    #: ones; z⁺ adds a forward with w⁺ (its transposed pass uses w⁺ instead of w); γ adds that
    #: forward and a second transposed pass (its two groups need w and w⁺); DeepLIFT runs the
    #: batch both ways and its reference, one row F₁, forward.
    convolutions = {
        "lrp, composite epsilon": lambda f, b, f1: 1.0,
        "lrp, composite epsilon_plus_flat": lambda f, b, f1: (2 * f + b) / (f + b),
        "lrp, composite epsilon_gamma_box": lambda f, b, f1: (2 * f + 2 * b) / (f + b),
        "deeplift, baseline 0": lambda f, b, f1: (f + b + f1) / (f + b),
        "gradcam": lambda f, b, f1: f,
    }
    if not lrp_only:
        rows += [
            (
                f"guided_ig, {steps} steps, with_scores=False (per step)",
                explain("guided_ig", steps=steps, with_scores=False),
                batch,
                steps,
                1.2,
            ),
            (
                f"smoothgrad, {samples} samples, with_scores=False / plain over {samples}·B rows",
                explain("smoothgrad", samples * batch, samples=samples, seed=0, with_scores=False),
                samples * batch,
                1,
                1.05,
            ),
            (
                f"integrated_gradients, {steps} steps / plain over {steps}·B rows",
                explain("integrated_gradients", steps * batch, steps=steps),
                steps * batch,
                1,
                1.05,
            ),
            ("gradcam", explain("gradcam"), batch, 1, 0.46),
        ]
    runs = {f"plain {n}": plain(n) for n in sorted({n for _, _, n, _, _ in rows})}
    runs["forward"] = forward
    runs["forward, one row"] = forward_one_row
    runs.update({name: run for name, run, _, _, _ in rows})
    times = _round_times(runs, reps)
    f_share = min(times["forward"]) / min(times[f"plain {batch}"])  # F / (F + B)
    one_row_share = min(times["forward, one row"]) / min(times[f"plain {batch}"])  # F₁ / (F + B)
    print(f"\nRows with a floor, same model and batch ({reps} rounds; ratio from each row's best round)\n")
    print("| measurement | seconds | ratio | floor | result | its convolutions alone | rounds' spread |")
    print("|---|---:|---:|---|---|---:|---:|")
    for n in sorted({n for _, _, n, _, _ in rows}):
        print(f"| plain compiled forward+backward, {n} rows | {min(times[f'plain {n}']):.3f} | 1.00 | – | – | – | – |")
    print(f"| plain compiled forward, {batch} rows | {min(times['forward']):.3f} | {f_share:.2f} | – | – | – | – |")
    one_row = min(times["forward, one row"])
    print(f"| plain compiled forward, 1 row | {one_row:.3f} | {one_row_share:.2f} | – | – | – | – |")
    noisy = []
    for name, _, n, per, floor in rows:
        ratios = [t / b / per for t, b in zip(times[name], times[f"plain {n}"])]
        ratio = min(times[name]) / min(times[f"plain {n}"]) / per
        spread = max(ratios) / min(ratios) - 1.0
        if spread > NOISE:
            noisy.append(name)
        result = "PASS" if ratio <= floor else "MISS"
        bound = f"{convolutions[name](f_share, 1 - f_share, one_row_share):.2f}" if name in convolutions else "–"
        print(f"| {name} | {min(times[name]):.3f} | {ratio:.3f} | ≤ {floor:.2f} | {result} | {bound} | {spread:.1%} |")
    if any(name in convolutions for name, *_ in rows):
        print(
            "\n'its convolutions alone': what the row's convolutions cost over the plain pass's, from this "
            "run's forward F and backward B (epsilon: F + B; z⁺: 2F + B; γ: 2F + 2B; DeepLIFT: F + B and "
            "its reference's forward alone, one row, F₁; Grad-CAM: F, its backward pass stopping at the last block); "
            "element-wise work comes on top. γ's two groups need a transposed pass with w and one with w⁺, "
            "so its row cannot reach 1.5 where F ≈ B. SmoothGrad and Guided IG run with_scores=False: the "
            "clean scores would add a forward pass of the batch, F/S of SmoothGrad's plain pass and F/steps "
            "per step of Guided IG's."
        )
    if reps < 2:
        print("\nOne round: the spread between rounds was not measured (--repeats 2 or more to tell noise).")
    elif noisy:
        print(
            f"\nThe rounds disagree by more than {NOISE:.0%} on {len(noisy)} rows ({'; '.join(noisy)}): "
            "the machine was too noisy to tell a 5% difference there."
        )
    else:
        print(f"\nEvery row's rounds agree within {NOISE:.0%}.")


def bench_peers(model, x, targets, reps: int, steps: int, channels: int, size: int, masks: int) -> None:
    """Our time over each peer's on the same work (``model``'s logits), and whether the numbers
    are the same (``scripts/bench_peers.py``)."""
    import bench_peers as peers
    import keras

    keras.utils.disable_interactive_logging()  # tf-keras-vis predicts with a progress bar
    twin = peers.logits_twin(model, size)
    runs = {
        **peers.peer_runs(twin, x, targets, layer=CAM_LAYER, steps=steps, channels=channels, masks=masks),
        **peers.xrai_runs(x[0]),
    }
    timed = {}
    for name, (ours, theirs, _) in runs.items():
        timed[f"{name} ours"], timed[f"{name} peer"] = ours, theirs
    times = _round_times(timed, reps)
    print(f"\nSide by side with the peers, same model and batch ({reps} rounds, best of each)\n")
    print("| measurement | ours (s) | peer (s) | ratio | target | same numbers |")
    print("|---|---:|---:|---:|---|---|")
    for name, (ours, theirs, what) in runs.items():
        mine, theirs_s = min(times[f"{name} ours"]), min(times[f"{name} peer"])
        same = peers.same_numbers(ours(), theirs())
        if same.startswith("NO") and name in peers.DIFFERENCES:
            same += f": {peers.DIFFERENCES[name]}"
        print(f"| {what} | {mine:.3f} | {theirs_s:.3f} | {mine / theirs_s:.2f} | ≤ 1.00 | {same} |")
    for method, why in peers.missing_peers(runs):
        print(f"| {method}: no peer here | – | – | – | – | {why} |")


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
        "raw": lambda: np.asarray(raw(xt, classes)),
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
