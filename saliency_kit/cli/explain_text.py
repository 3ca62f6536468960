"""``saliency explain-text --model PATH_OR_PRESET --prompt TEXT``: which prompt tokens made a causal
language model write its text.

The model is a local KerasHub preset directory (``model.save_to_preset``), a ``.keras`` file of a
causal language model, or a KerasHub preset name. The prompt is continued greedily and every
generated token explained by the tokens before it (:func:`saliency_kit.explain_generation`).
Files written to ``--out``: ``generation.html`` (the ``[generated × source]`` matrix, every
token escaped) and ``generation.png`` (the same as a figure); the matrix's data, a manifest line
and the gallery ``index.html``, where the prompt gets a card beside any images and texts already
explained into that folder (:func:`saliency_kit.batch.generation.write_generation_outputs`).
Prints the generated text and each file written.
"""

from __future__ import annotations

import argparse
import html
import os
from typing import Any

from .. import methods as registry
from ..batch.generation import write_generation_outputs
from ..files import save_png, write_atomic
from ..render.generation import generation_figure, generation_html
from .options import start_tensorflow
from .values import UsageError, did_you_mean, positive_int

__all__ = ["add_parser", "run", "load_causal_lm"]

DEFAULT_METHOD = "integrated_gradients"


def add_parser(subcommands: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``explain-text`` subcommand to ``subcommands`` (an ``argparse`` sub-parser action)."""
    parser = subcommands.add_parser(
        "explain-text",
        parents=[common],
        help="explain the text a causal language model generates from a prompt (HTML + PNG)",
        description=(
            "Continue a prompt greedily with a causal language model and explain each generated token "
            "by the tokens before it."
        ),
    )
    parser.add_argument(
        "--model",
        required=True,
        metavar="PATH_OR_PRESET",
        help="a KerasHub preset folder, a .keras file or a preset",
    )
    parser.add_argument("--prompt", required=True, metavar="TEXT", help="the text to continue")
    parser.add_argument(
        "--max-new-tokens", type=positive_int, default=16, metavar="N", help="the most tokens generated (default: 16)"
    )
    parser.add_argument(
        "--method", default=DEFAULT_METHOD, metavar="M", help=f"the attribution method (default: {DEFAULT_METHOD})"
    )
    parser.add_argument(
        "--merge", choices=("tokens", "words"), default="tokens", help="show tokens, or sub-words merged into words"
    )
    parser.add_argument("--out", default="saliency_out", metavar="DIR", help="output directory (default: saliency_out)")
    parser.set_defaults(handler=run)


def load_causal_lm(where: str) -> Any:
    """The causal language model at ``where``: a preset directory, a ``.keras`` file, or a preset name."""
    import keras
    import keras_hub

    if os.path.isdir(where):
        if not os.path.isfile(os.path.join(where, "config.json")):
            raise UsageError(f"{where} is not a KerasHub preset directory (it holds no config.json)")
        return keras_hub.models.CausalLM.from_preset(where)
    if where.endswith(".keras"):
        if not os.path.isfile(where):
            raise UsageError(f"no such file: {where}")
        return keras.saving.load_model(where)
    if os.sep in where or os.path.exists(where):
        raise UsageError(
            f"--model must be a KerasHub preset directory, a .keras file or a preset name; received {where}"
        )
    return keras_hub.models.CausalLM.from_preset(where)


def run(args: argparse.Namespace) -> int:
    """Handler of ``saliency explain-text``: returns the exit status."""
    from ..pipeline.generation import explain_generation, generated_text

    if args.method not in registry.names():
        raise UsageError(f"unknown method {args.method!r}{did_you_mean(args.method, registry.names())}")
    start_tensorflow(args.debug)
    model = load_causal_lm(args.model)
    explanation = explain_generation(model, args.prompt, max_new_tokens=args.max_new_tokens, method=args.method)
    print(f"generated: {generated_text(explanation)!r}", flush=True)
    os.makedirs(args.out, exist_ok=True)
    page = (
        '<!doctype html>\n<html><head><meta charset="utf-8">'
        f"<title>{html.escape(args.prompt)}</title></head><body>\n"
        f"{generation_html(explanation, merge=args.merge)}\n</body></html>\n"
    )
    written = [
        write_atomic(os.path.join(args.out, "generation.html"), page.encode("utf-8")),
        save_png(generation_figure(explanation, merge=args.merge), os.path.join(args.out, "generation.png")),
    ]
    written += map(str, write_generation_outputs(args.out, explanation, name=args.prompt, merge=args.merge))
    for path in written:
        print(f"wrote {path}")
    return 0
