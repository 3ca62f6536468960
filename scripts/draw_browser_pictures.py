"""Draw the README's screenshots in headless Chromium (``chromium`` and ``chromedriver`` on the path,
``pip install selenium``).

    PYTHONPATH=. python scripts/draw_browser_pictures.py [--out docs] [--only NAME]

- ``gallery.png``: the ``index.html`` of ``saliency batch`` on the five example shapes
  (``examples/shapes/{circle,square,triangle,star,cross}.png``) with ``--method guided_backprop
  --method gradcam --target top2``, at 1280×757 (a minute);
- ``callback_tensorboard.png``: TensorBoard's IMAGES tab on the event files of
  ``scripts/callback_demo.py --epochs 8`` at 1300×757 (trains the shapes CNN: several minutes;
  ``--logs DIR`` takes the logs of an earlier run instead).

``--no-browser`` does everything but the screenshot and keeps what the browser would show:
``OUT/gallery/`` (the batch run: its ``index.html``, manifest and maps) and
``OUT/callback_tensorboard/`` (``images.json``: ``{run: {tag: {"steps": [...], "last": FILE}}}``
as TensorBoard's images plugin lists them, and ``FILE``, the image it serves at the last step);
``tests/test_pictures.py`` checks those, where a screenshot's pixels would depend on the fonts.
``scripts/pictures.py`` declares these pictures with this command.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")


def browser(width: int, height: int):
    """A headless Chromium (selenium) whose page area is ``width`` × ``height``."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = next(b for b in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if b)
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars"):
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tempfile.mkdtemp(prefix='pictures-chromium-')}")
    driver = webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"))
    driver.set_window_size(width, height)
    inner = driver.execute_script("return [window.innerWidth, window.innerHeight]")
    driver.set_window_size(2 * width - inner[0], 2 * height - inner[1])
    return driver


def gallery(path: Path, logs: Path | None, screenshot: bool = True) -> None:
    with tempfile.TemporaryDirectory() as work:
        out, shapes = Path(work) / "out", Path(work) / "shapes"
        shapes.mkdir()
        for name in ("circle", "square", "triangle", "star", "cross"):
            shutil.copyfile(ROOT / "examples" / "shapes" / f"{name}.png", shapes / f"{name}.png")
        arguments = ["batch", str(shapes), "--method", "guided_backprop", "--method", "gradcam"]
        subprocess.run(
            [sys.executable, "-m", "saliency_kit", *arguments, "--target", "top2", "--out", str(out)],
            cwd=ROOT,
            env=ENV,
            check=True,
            capture_output=True,
        )
        if not screenshot:
            shutil.copytree(out, path.with_suffix(""), dirs_exist_ok=True)
            return
        driver = browser(1280, 757)
        try:
            driver.get((out / "index.html").as_uri())
            time.sleep(2)  # the cards' images load lazily
            driver.save_screenshot(str(path))
        finally:
            driver.quit()


def callback_tensorboard(path: Path, logs: Path | None, screenshot: bool = True) -> None:
    with tempfile.TemporaryDirectory() as work:
        if logs is None:
            demo = [sys.executable, "scripts/callback_demo.py", "--epochs", "8", "--out", str(Path(work) / "run")]
            subprocess.run(demo, cwd=ROOT, env=ENV, check=True)
            logs = Path(work) / "run" / "logs"
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        board = shutil.which("tensorboard") or str(Path(sys.executable).parent / "tensorboard")
        server = subprocess.Popen([board, "--logdir", str(logs), "--port", str(port), "--host", "127.0.0.1"])
        if not screenshot:
            try:
                _wait_for(port, server)
                _save_images_tab(f"http://127.0.0.1:{port}", path.with_suffix(""))
            finally:
                server.terminate()
                server.wait()
            return
        driver = browser(1300, 757)
        try:
            _wait_for(port, server)
            driver.get(f"http://127.0.0.1:{port}/#images")
            time.sleep(8)
            driver.save_screenshot(str(path))
        finally:
            driver.quit()
            server.terminate()
            server.wait()


def _wait_for(port: int, server: subprocess.Popen, seconds: float = 120.0) -> None:
    """Until a server on ``port`` accepts connections; ``RuntimeError`` if it exits or takes longer."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"tensorboard exited with status {server.returncode}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(1)
    raise RuntimeError(f"tensorboard did not listen on port {port} within {seconds:.0f} s")


def _save_images_tab(url: str, folder: Path, seconds: float = 60.0) -> None:
    """What TensorBoard's IMAGES tab at ``url`` shows, from its images plugin: each run's tags and
    steps in ``folder/images.json``, and each tag's image at its last step as a PNG beside it. The
    server reads the logs after it starts listening: the listing is taken once two reads 2 s apart
    agree and are not empty (``RuntimeError`` after ``seconds``)."""

    def get(route: str, query: str) -> bytes:
        with urllib.request.urlopen(f"{url}/data/plugin/images/{route}?{query}") as answer:
            return answer.read()

    def listing() -> dict[str, dict[str, list[dict]]]:
        return {
            run: {
                tag: json.loads(get("images", urllib.parse.urlencode({"run": run, "tag": tag, "sample": 0})))
                for tag in tags
            }
            for run, tags in json.loads(get("tags", "")).items()
        }

    deadline, before, now = time.monotonic() + seconds, None, listing()
    while not now or now != before:
        if time.monotonic() > deadline:
            raise RuntimeError(f"TensorBoard's image listing did not settle within {seconds:.0f} s: {now}")
        time.sleep(2)
        before, now = now, listing()
    folder.mkdir(parents=True, exist_ok=True)
    shown: dict[str, dict[str, dict]] = {}
    for number, (run, tag, images) in enumerate((r, t, i) for r, tags in now.items() for t, i in tags.items()):
        (folder / f"last-{number}.png").write_bytes(get("individualImage", images[-1]["query"]))
        shown.setdefault(run, {})[tag] = {"steps": [image["step"] for image in images], "last": f"last-{number}.png"}
    (folder / "images.json").write_text(json.dumps(shown, indent=1) + "\n", encoding="utf-8")


PICTURES = {"gallery.png": gallery, "callback_tensorboard.png": callback_tensorboard}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="the folder to write the pictures to")
    parser.add_argument("--only", action="append", choices=sorted(PICTURES), help="draw this picture only")
    parser.add_argument("--logs", type=Path, help="callback_demo.py's logs to show in TensorBoard")
    parser.add_argument("--no-browser", action="store_true", help="keep what the browser would show, no screenshot")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, draw in PICTURES.items():
        if args.only is None or name in args.only:
            draw(args.out / name, args.logs, screenshot=not args.no_browser)
            print(f"wrote {args.out / name if not args.no_browser else args.out / Path(name).stem}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
