"""The results browser in a real browser: Debian's chromium, headless, driven by
Selenium through Debian's chromedriver (never a driver Selenium would download).

A small sweep runs on the emulated testbed in a background process; `serve` reads its
results folder from a thread of this process. The browser opens the runs page,
follows the running run, and sees a point finish on the run's page without reloading
it; then compares the sweep with a simulated run of the same spec, and opens a broken
run folder. A screenshot of each page goes to the test's folder (printed); with
RAINMAKER_DOCS_IMG=docs/img the documentation's three are written there too."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.serve import make_app
from orchestrator.serve.server import start
from tests.integration.test_sweep import spec_file

pytestmark = pytest.mark.integration
RAINMAKER = str(Path(sys.executable).parent / "rainmaker")
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
DOCS = {"runs": "serve-runs.png", "run-live": "serve-run-live.png", "compare": "serve-compare.png"}


@pytest.fixture
def browser(monkeypatch):
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.skip(f"needs Debian's chromium and chromium-driver ({CHROMIUM}, {CHROMEDRIVER}): apt-get install them")
    pytest.importorskip("selenium")
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    monkeypatch.setenv("SE_OFFLINE", "true")  # Selenium Manager never downloads a driver or a browser
    opts = Options()
    opts.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1150",
    ):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=opts)
    try:
        yield driver
    finally:
        driver.quit()


def _spec(tmp_path: Path) -> Path:
    """Two loads, each window measured in two segments: the page sees segments land."""
    p = spec_file(tmp_path, "serve-demo", [0.3, 0.5], measure=2.0)
    spec = yaml.safe_load(p.read_text())
    spec["emulated"]["segment_s"] = 1.0
    p.write_text(yaml.safe_dump(spec, sort_keys=False))
    return p


def test_the_browser_follows_a_run_compares_and_reads_a_broken_one(testbed, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    tb, _ = testbed
    results, shots = tmp_path / "results", tmp_path / "screenshots"
    shots.mkdir()
    spec = _spec(tmp_path)
    env = dict(os.environ, RAINMAKER_INVENTORY=str(tb.inventory_path))
    out = tmp_path / "run.out"
    with open(out, "w") as f:
        sweep = subprocess.Popen(
            [RAINMAKER, "run", str(spec), "--results", str(results), "--no-calibrate"],
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
        )
    server = start(make_app(results))
    print(f"\nscreenshots: {shots}")

    def shot(name: str) -> None:
        browser.save_screenshot(str(shots / f"{name}.png"))

    try:
        d = browser
        # the runs page: the run appears once `rainmaker run` made its folder
        d.get(server.url + "/")

        def run_listed(drv):
            links = drv.find_elements(By.CSS_SELECTOR, 'a.run-link[href^="/run/serve-demo/"]')
            if not links:
                drv.refresh()
            return links

        link = WebDriverWait(d, 60, poll_frequency=0.5).until(run_listed)[0]
        run_id = link.get_attribute("href").split("/run/", 1)[1]
        shot("runs-while-running")
        link.click()

        # the run's page: its progress comes in without a reload
        live = WebDriverWait(d, 10).until(lambda drv: drv.find_element(By.ID, "live"))
        WebDriverWait(d, 30).until(lambda drv: live.get_attribute("data-state") == "running")
        WebDriverWait(d, 30).until(lambda drv: drv.find_elements(By.CSS_SELECTOR, "#live-points tbody tr"))
        d.execute_script("window.rainmakerMark = 1")  # gone if the page were reloaded
        done0 = int(live.get_attribute("data-done") or 0)
        WebDriverWait(d, 90, poll_frequency=0.2).until(lambda drv: int(live.get_attribute("data-done") or 0) > done0)
        WebDriverWait(d, 20).until(lambda drv: drv.find_elements(By.CSS_SELECTOR, "#live-landed tbody tr"))
        assert d.execute_script("return window.rainmakerMark") == 1, "the page was reloaded"
        assert "done" in d.find_element(By.ID, "live-points").text
        shot("run-live")

        # the run ends: the page says so, still without a reload
        assert sweep.wait(timeout=180) == 0, out.read_text()
        WebDriverWait(d, 30).until(lambda drv: live.get_attribute("data-state") == "finished")
        assert d.find_element(By.ID, "live-ended").is_displayed()
        assert d.execute_script("return window.rainmakerMark") == 1
        d.refresh()
        WebDriverWait(d, 10).until(lambda drv: drv.find_elements(By.ID, "report-frame"))
        shot("run-finished")

        # a simulated run of the same spec, and the two overlaid
        sim = subprocess.run(
            [RAINMAKER, "simulate", str(spec), "--results", str(results)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert sim.returncode == 0, sim.stdout + sim.stderr
        sim_id = next(
            p.parent.relative_to(results).as_posix()
            for p in results.glob("serve-demo/*/manifest.json")
            if p.parent.relative_to(results).as_posix() != run_id
        )
        d.get(server.url + "/compare?experiment=serve-demo")
        for box in d.find_elements(By.CSS_SELECTOR, 'input[name="runs"]'):
            if not box.is_selected():
                box.click()
        d.find_element(By.ID, "overlay-button").click()
        overlay = WebDriverWait(d, 30).until(lambda drv: drv.find_element(By.ID, "overlay"))
        WebDriverWait(d, 30).until(
            lambda drv: drv.execute_script(
                "const i = document.getElementById('overlay-img'); return i && i.naturalWidth"
            )
        )
        text = overlay.text
        assert run_id in text and sim_id in text, text
        assert "(emulated)" in text and "(simulated)" in text, text
        shot("compare")

        # a broken run folder: what is readable, and what is not
        broken = results / "serve-demo" / "20200101-000000"
        broken.mkdir()
        (broken / "manifest.json").write_text('{"experiment": "serve-demo", "spec": {"na')
        (broken / "sweep.json").write_text('{"points": {"rain-f0.3-r1": {"status": "do')
        d.get(server.url + "/run/serve-demo/20200101-000000")
        body = d.find_element(By.TAG_NAME, "body").text
        assert "manifest.json is damaged" in body and "sweep.json is damaged" in body, body
        assert "Validity" in body and "Provenance" in body, body
        shot("broken")

        d.get(server.url + "/")
        WebDriverWait(d, 10).until(lambda drv: len(drv.find_elements(By.CSS_SELECTOR, "a.run-link")) == 3)
        shot("runs")
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait(10)
        server.stop()
    docs = os.environ.get("RAINMAKER_DOCS_IMG")
    if docs:
        for name, dest in DOCS.items():
            shutil.copy(shots / f"{name}.png", Path(docs) / dest)
        print(f"documentation screenshots written to {docs}")
