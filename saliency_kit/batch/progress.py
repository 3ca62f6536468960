"""Progress of a long run (``saliency batch``, ``saliency evaluate``): tqdm's bar on a terminal, a
plain line every few seconds elsewhere."""

from __future__ import annotations

import os
import sys
import time

import numpy as np

__all__ = ["Progress"]


class Progress:
    """tqdm's bar on a terminal; otherwise a plain line at most every ``every`` seconds, e.g.
    ``saliency batch: 3/10 images (30%), 1.2 images/s, 0 failed, eta 6s``.

    ``name``: the command the lines are of; ``unit``: what ``total`` counts (plural)."""

    def __init__(
        self, total: int, *, stream=None, every: float = 10.0, name: str = "saliency batch", unit: str = "images"
    ):
        self.total, self.done, self.failed = total, 0, 0
        self.stream = stream or sys.stderr
        self.every, self.name, self.unit = every, name, unit
        self.start = self.last = time.monotonic()
        self.bar = None
        if self.stream.isatty():
            from tqdm import tqdm

            try:
                width = os.get_terminal_size(self.stream.fileno()).columns
            except (OSError, ValueError, AttributeError):
                width = 0
            # A terminal that reports no width (e.g. a pty without a size) would get an empty bar.
            size = {"dynamic_ncols": True} if width > 0 else {"ncols": 100}
            self.bar = tqdm(total=total, unit=unit, file=self.stream, desc=name, **size)

    def update(self, done: int, failed: int = 0) -> None:
        self.done += done
        self.failed += failed
        if self.bar is not None:
            self.bar.update(done + failed)
            self.bar.set_postfix(failed=self.failed, refresh=False)
            return
        now = time.monotonic()
        if now - self.last >= self.every or self.done + self.failed >= self.total:
            self.last = now
            count = self.done + self.failed
            rate = count / max(now - self.start, 1e-9)
            eta = (self.total - count) / rate if rate > 0 else float("inf")
            print(
                f"{self.name}: {count}/{self.total} {self.unit} ({100 * count / max(self.total, 1):.0f}%), "
                f"{rate:.1f} {self.unit}/s, {self.failed} failed, eta {_duration(eta)}",
                file=self.stream,
                flush=True,
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _duration(seconds: float) -> str:
    if not np.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    return (
        f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
        if seconds >= 3600
        else f"{seconds // 60}m{seconds % 60:02d}s"
        if seconds >= 60
        else f"{seconds}s"
    )
