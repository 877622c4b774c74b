"""The quickstart's report.html in a real browser: headless Chromium (Debian's `chromium`
package, installed by .ci/run) loads it, and a script appended to a copy checks, after
the page's load event, that every in-page link (the table of contents and the summary's
section links) names an element that exists and that every image decoded. The test
skips, saying why, only where `chromium` is not installed."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from _quickstart_once import Quick, quickstart_once

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed (apt-get install chromium; .ci/run installs it)",
)

CHECK = """
<script>
window.addEventListener("load", function () {
  var out = {images: [], anchors: []};
  document.querySelectorAll("img").forEach(function (img) {
    out.images.push({alt: img.getAttribute("alt") || "",
                     ok: img.complete && img.naturalWidth > 0 && img.naturalHeight > 0});
  });
  document.querySelectorAll('a[href^="#"]').forEach(function (a) {
    var id = decodeURIComponent(a.getAttribute("href").slice(1));
    out.anchors.push({href: id, ok: id.length > 0 && document.getElementById(id) !== null});
  });
  var pre = document.createElement("pre");
  pre.id = "replay-check";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>
"""


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Quick:
    return quickstart_once(tmp_path_factory)


def _render(page: Path, profile: Path) -> dict[str, list[dict[str, object]]]:
    assert CHROMIUM is not None
    done = subprocess.run(
        [
            CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--disable-quic", f"--user-data-dir={profile}",
            "--virtual-time-budget=10000", "--dump-dom", page.as_uri(),
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    match = re.search(r'<pre id="replay-check">(.*?)</pre>', done.stdout, re.S)
    assert match is not None, f"no check result (exit {done.returncode}): {done.stderr[-2000:]}"
    return json.loads(html.unescape(match.group(1)))


def test_report_html_anchors_resolve_and_images_load(quick: Quick, tmp_path: Path) -> None:
    text = (quick.out / "report.html").read_text()
    assert text.count("</body>") == 1
    page = tmp_path / "report.html"
    page.write_text(text.replace("</body>", CHECK + "</body>"))
    result = _render(page, tmp_path / "profile")
    contents = text.split('id="contents"', 1)[1].split("</ul>", 1)[0]
    assert contents.count('href="#') >= 8  # the table of contents is there to check
    assert len(result["anchors"]) >= contents.count('href="#')
    broken = [a["href"] for a in result["anchors"] if not a["ok"]]
    assert not broken, f"in-page links to no element: {broken}"
    figures = sorted(p.name for p in (quick.out / "figures").iterdir())
    assert len(result["images"]) == len(figures)
    unloaded = [i["alt"] for i in result["images"] if not i["ok"]]
    assert not unloaded, f"images that did not load: {unloaded}"


def test_a_broken_anchor_and_image_are_caught(tmp_path: Path) -> None:
    """The check can fail: a link to a missing id and an image that cannot decode."""
    page = tmp_path / "bad.html"
    page.write_text(
        '<html><body><h2 id="here">x</h2><a href="#here">ok</a><a href="#gone">bad</a>'
        '<img alt="broken" src="data:image/png;base64,AAAA">' + CHECK + "</body></html>"
    )
    result = _render(page, tmp_path / "profile")
    assert [a["ok"] for a in result["anchors"]] == [True, False]
    assert [i["ok"] for i in result["images"]] == [False]
