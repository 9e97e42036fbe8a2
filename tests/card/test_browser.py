"""card.html in a real browser: headless Chromium (Debian's ``chromium``; .ci/run installs it).

The page of a tiny card is loaded from disk with its Content-Security-Policy: it must load with no
console message at all (a blocked fetch is one), decode every embedded plot, show the verdict of
card.json, and render a non-blank screenshot. A control page with one external image and one
console error proves that the check sees both.
"""

from __future__ import annotations

import base64
import html
import io
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _browser() -> str | None:
    return next((p for p in map(shutil.which, BROWSERS) if p), None)


pytestmark = [pytest.mark.skipif(_browser() is None, reason="no Chromium on PATH (apt-get install chromium; CI has it)"),
              pytest.mark.xdist_group("card")]


def _load(page: Path, tmp_path: Path) -> tuple[str, list[str], Path]:
    """The DOM after load, the console lines, and a full-page screenshot of ``page``."""
    common = [_browser(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--enable-logging=stderr",
              "--v=0", "--virtual-time-budget=5000", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*common, "--dump-dom", page.resolve().as_uri()], capture_output=True, text=True, timeout=120)
    shot = tmp_path / "shot.png"
    subprocess.run([*common, f"--screenshot={shot}", "--window-size=1000,2600", page.resolve().as_uri()],
                   capture_output=True, text=True, timeout=120)
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    return dom.stdout, console, shot


def _images(dom: str) -> tuple[int, int]:
    m = re.search(r'<body[^>]*data-images="(\d+)/(\d+)"', dom)
    assert m, "the page's script did not run"
    return int(m.group(1)), int(m.group(2))


def test_card_page_loads_offline_with_plots_and_the_verdict_of_card_json(card_world, tmp_path):
    card = card_world["card"]
    page = card.paths["html"]
    text = page.read_text(encoding="utf-8")
    assert len(text.encode()) <= 3 * 1024 * 1024  # one file to mail: at most 3 MB
    assert not re.search(r'(src|href)\s*=\s*["\']?(https?:)?//', text)  # nothing outside the file
    dom, console, shot = _load(page, tmp_path)
    assert console == [], console  # no error, no blocked request, no log
    ok, total = _images(dom)
    assert ok == total >= 4, (ok, total)  # linkage bars, rank histogram, utility ROC, match grid
    verdict = re.search(r'<div class="verdict [a-z]+" id="verdict">(.*?)</div>', dom, re.S)
    expected = json.loads(card.paths["json"].read_text(encoding="utf-8"))["verdict"]["text"]
    assert verdict and html.unescape(verdict.group(1)) == expected
    for uri in re.findall(r'src="data:image/png;base64,([^"]+)"', text):  # every plot has content
        img = np.asarray(Image.open(io.BytesIO(base64.b64decode(uri))).convert("L"), dtype=np.float64)
        assert img.std() > 5, img.std()
    screen = np.asarray(Image.open(shot).convert("L"), dtype=np.float64)
    assert screen.shape[0] >= 1000 and screen.std() > 10  # a rendered page, not a blank one


def test_the_check_sees_an_external_request_and_a_console_error(card_world, tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text(card_world["card"].paths["html"].read_text(encoding="utf-8").replace(
        "</body>", '<img src="http://example.invalid/x.png"><script>console.error("boom")</script></body>'))
    dom, console, _ = _load(bad, tmp_path)
    assert any("example.invalid" in line for line in console) and any("boom" in line for line in console)
    ok, total = _images(dom)
    assert ok == total - 1  # the external image was blocked by the page's policy


def test_attack_report_page_loads_too(card_world, tmp_path):
    page = Path(card_world["card"].paths["html"]).parent / "privacy" / "report.html"
    dom, console, _ = _load(page, tmp_path)
    assert console == []
    ok, total = _images(dom)
    assert ok == total >= 3
