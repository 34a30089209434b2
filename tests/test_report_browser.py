"""The report in real headless Chromium at 1400 px wide: every page's script runs without a console error, the
boards need no horizontal scroll, no chart's axis label overlaps a tick label, and screenshots of the index, a
candidate page, a lineage page and a call page are saved for a person to look at (into $KFORGE_TEST_ARTEFACTS, else
the test's tmp dir; the folder is printed). Without a chromium binary the tests skip, unless KFORGE_REQUIRE_BROWSER
is set (CI): then they fail."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from test_report import AGENT_PROBLEM, generated_run

from db import Database
from kforge.report import page_of, write_report

WIDTH = 1400
REQUIRE = "KFORGE_REQUIRE_BROWSER"

# Injected into a copy of a page, after its own script: what the layout came to, written into the DOM for --dump-dom.
MEASURE = """<script>
"use strict";
const measured = { viewport: innerWidth, ready: document.documentElement.dataset.ready ?? null,
  page: [document.documentElement.scrollWidth, document.documentElement.clientWidth],
  boards: [...document.querySelectorAll("section.board .scroll")].map((e) => [e.scrollWidth, e.clientWidth]),
  tables: [...document.querySelectorAll(".scroll")].map((e) => [e.scrollWidth, e.clientWidth]),
  overlaps: [] };
const meets = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
for (const svg of document.querySelectorAll("svg")) {
  for (const label of svg.querySelectorAll("text.label")) {
    for (const tick of svg.querySelectorAll("text.tick")) {
      if (meets(label.getBoundingClientRect(), tick.getBoundingClientRect())) {
        measured.overlaps.push([label.textContent, tick.textContent]);
      }
    }
  }
}
const out = document.createElement("pre");
out.id = "measured";
out.hidden = true;
out.textContent = JSON.stringify(measured);
document.body.append(out);
</script>
"""


@pytest.fixture(scope="module")
def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        if os.environ.get(REQUIRE):
            pytest.fail(f"{REQUIRE} is set but no chromium binary is on PATH")
        pytest.skip(f"chromium is not installed (CI installs Debian's chromium package and sets {REQUIRE})")
    return exe


def browse(exe: str, page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess:
    """Loads a page in headless Chromium with a window 1400 px wide."""
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
           f"--user-data-dir={profile}", f"--window-size={WIDTH},900", "--enable-logging=stderr", "--v=0", *args,
           page.resolve().as_uri()]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def console(proc: subprocess.CompletedProcess) -> list[str]:
    """The lines a page wrote to the console, or an uncaught error."""
    return [ln for ln in proc.stderr.splitlines() if ":CONSOLE" in ln or "Uncaught" in ln]


def measure(exe: str, page: Path, tmp_path: Path, *args: str) -> dict:
    """The layout of a page, read by MEASURE in a copy of it beside the original (its links still resolve; what
    MEASURE adds is hidden, so a screenshot of the copy is one of the page)."""
    copy = page.with_name(f"measured-{page.name}")
    copy.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    proc = browse(exe, copy, tmp_path / "profile", "--dump-dom", *args)
    copy.unlink()
    assert console(proc) == [], console(proc)
    found = re.search(r'<pre id="measured"[^>]*>(.*?)</pre>', proc.stdout, re.S)
    assert found, proc.stdout[-2000:]
    return json.loads(html.unescape(found.group(1)))


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", data[16:24])


@pytest.fixture
def site(tmp_path: Path) -> tuple[Path, dict]:
    """The report of an agent's run (test_report.generated_run): its root and the ids of what it stored."""
    with Database(f"sqlite:///{tmp_path / 'kforge.db'}") as db:
        ids = generated_run(db)
        return write_report(db, tmp_path / "report").parent, ids


@pytest.fixture
def artefacts(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("KFORGE_TEST_ARTEFACTS") or tmp_path) / "report-browser"
    folder.mkdir(parents=True, exist_ok=True)
    print(f"screenshots in {folder}")
    return folder


def test_report_at_1400px_fits_without_overlaps_and_is_screenshot(chromium: str, site, tmp_path: Path,
                                                                  artefacts: Path) -> None:  # fmt: skip
    root, ids = site
    pages = {"index": root / "index.html", "candidate": root / page_of(ids["fast"]),
             "lineage": root / f"lineage/{AGENT_PROBLEM}.html", "call": root / f"calls/{ids['g_draft']}.html"}
    for what, page in pages.items():
        shot = artefacts / f"{what}.png"
        m = measure(chromium, page, tmp_path, f"--screenshot={shot}")
        assert png_size(shot) == (WIDTH, 900)
        assert m["viewport"] == WIDTH and m["ready"] == "1", (what, m)  # the page's own script ran to its end
        assert m["page"][0] <= m["page"][1], (what, m)  # the page itself does not scroll sideways
        assert all(scroll <= client for scroll, client in m["boards"]), (what, m)  # the boards, as the ask was
        assert all(scroll <= client for scroll, client in m["tables"]), (what, m)  # and every other table
        assert m["overlaps"] == [], (what, m)
        if what == "index":
            assert len(m["boards"]) == 2  # the board and its by-model table


def test_the_measurement_sees_a_board_too_wide_and_a_label_on_a_tick(chromium: str, site, tmp_path: Path) -> None:
    """The checks above are only worth something if a page that fails them is seen to."""
    index = site[0] / "index.html"
    broken = index.with_name("broken.html")
    text = index.read_text().replace("<td>", '<td><span style="display:inline-block;width:3000px">wide</span>', 1)
    broken.write_text(text.replace('<text class="label"', '<text class="tick" x="13" y="120">overlap</text><text class="label"', 1))
    m = measure(chromium, broken, tmp_path)
    assert m["boards"][0][0] > m["boards"][0][1] >= 1000
    assert ["fast_p", "overlap"] in m["overlaps"] or ["p (speedup over eager)", "overlap"] in m["overlaps"], m


def test_chromium_check_catches_a_broken_page(chromium: str, tmp_path: Path) -> None:
    """A failing script shows up in what the checks read."""
    page = tmp_path / "broken.html"
    page.write_text("<!doctype html><title>x</title><link rel=icon href='data:,'><script>missingFunction()</script>")
    lines = console(browse(chromium, page, tmp_path / "profile", "--dump-dom"))
    assert any("Uncaught ReferenceError: missingFunction" in ln for ln in lines), lines
