"""The dashboard in headless Chromium on a running Colloc (server and simulated agents
as processes): the cluster shows, a job submitted through the API appears, runs and
finishes on the page, and every view renders. Screenshots go to tests/artifacts/."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select, WebDriverWait

from tests.e2e.harness import LocalColloc, running, simjob

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
REQUIRE_BROWSER_ENV = "COLLOC_REQUIRE_BROWSER"  # set by `make test`, which installs Chromium
RESNET = {"model": {"catalog": "resnet50"}, "batch_size": 32}


def _chromium() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    found = _chromium()
    if found is None:
        if os.environ.get(REQUIRE_BROWSER_ENV):
            pytest.fail("chromium and chromedriver are not installed (make test installs them)")
        pytest.skip("chromium and chromedriver are not installed (make test installs them)")
    binary, driver_path = found
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.add_argument("--window-size=1400,1000")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # an explicit driver path: Selenium never tries to download one
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def colloc(tmp_path: Path, database_url: str) -> Iterator[LocalColloc]:
    with running(tmp_path, database_url, {"COLLOC_USAGE_SAMPLE_INTERVAL_S": "1"}) as local:
        yield local


class Page:
    """The dashboard in the browser, with waits that say what they waited for."""

    def __init__(self, driver: webdriver.Chrome, colloc: LocalColloc, backend: str) -> None:
        self.driver = driver
        self.colloc = colloc
        self.backend = backend
        ARTIFACTS.mkdir(exist_ok=True)

    def open(self, route: str) -> None:
        self.driver.get(f"{self.colloc.url}/#/{route}")

    def wait(self, what: str, done: Callable[[WebDriver], Any], timeout_s: float = 45) -> Any:
        try:
            return WebDriverWait(self.driver, timeout_s, poll_frequency=0.2).until(done)
        except Exception as exc:
            self.shot(f"failed-{what.replace(' ', '-')}")
            status = self.texts("#status")
            raise AssertionError(
                f"the page never showed {what} (status: {status!r})\n{self.colloc.log('server')}"
            ) from exc

    def texts(self, selector: str) -> list[str]:
        """The visible text of each match, read in one step: the page re-renders every
        2 s, so element handles kept across calls go stale."""
        found: list[str] = self.driver.execute_script(
            "return [...document.querySelectorAll(arguments[0])].map((e) => e.innerText)",
            selector,
        )
        return found

    def count(self, selector: str) -> int:
        return len(self.texts(selector))

    def click(self, selector: str) -> None:
        def clicked(driver: WebDriver) -> bool:
            try:
                driver.find_element(By.CSS_SELECTOR, selector).click()
            except (NoSuchElementException, StaleElementReferenceException):
                return False
            return True

        self.wait(f"{selector} to click", clicked)

    def log_in(self, token: str) -> None:
        field = self.driver.find_element(By.ID, "token")
        field.clear()
        field.send_keys(token)
        field.submit()

    def shot(self, name: str) -> None:
        self.driver.save_screenshot(str(ARTIFACTS / f"dashboard-{self.backend}-{name}.png"))

    def errors(self) -> list[str]:
        return [
            entry["message"]
            for entry in self.driver.get_log("browser")  # type: ignore[no-untyped-call]
            if entry["level"] == "SEVERE"
        ]

    def settled_errors(self) -> list[str]:
        """The errors logged until a second passes with none: a refused token's calls
        were sent together and answer one by one, some after the refusal shows."""
        found = self.errors()
        for _ in range(30):  # a page that kept failing would still end the wait
            time.sleep(1.0)
            late = self.errors()
            if not late:
                break
            found += late
        return found

    def unclipped(self) -> bool:
        """Whether every label of every chart lies inside its chart's drawing area."""
        inside: bool = self.driver.execute_script(
            """return [...document.querySelectorAll(".chart svg")].every((svg) => {
                 const box = svg.getBoundingClientRect();
                 return [...svg.querySelectorAll("text")].every((t) => {
                   const r = t.getBoundingClientRect();
                   return r.left >= box.left - 0.5 && r.right <= box.right + 0.5
                     && r.top >= box.top - 0.5 && r.bottom <= box.bottom + 0.5;
                 });
               })"""
        )
        return inside


def job_state(page: Page, job_id: int) -> str | None:
    cells = page.texts(f'#job-table tr[data-job-id="{job_id}"] td.state')
    return cells[0] if cells else None


def test_dashboard_shows_the_cluster_and_a_job_through_its_life(
    browser: webdriver.Chrome, colloc: LocalColloc, database_url: str
) -> None:
    page = Page(browser, colloc, database_url.split(":")[0].split("+")[0])
    gpus = 3  # the harness's cluster: an A100 on node-a, two T4s on node-b

    page.open("cluster")
    page.wait("the login form", lambda d: page.count("#login") == 1)
    assert page.errors() == []  # no API call before there is a token (so no 401)
    assert colloc.http.get("/favicon.ico").status_code == 200
    page.log_in("colloc_not-a-token")
    page.wait("the refusal", lambda d: "unknown or revoked" in " ".join(page.texts("#login")))
    refused = page.settled_errors()  # the wrong token's calls, and none other
    assert refused and all("401 (Unauthorized)" in message for message in refused), refused
    page.log_in(colloc.admin_token)
    page.wait(f"{gpus} GPUs", lambda d: page.count(".gpu[data-uuid]") == gpus)
    assert page.errors() == []
    page.wait("both nodes ready", lambda d: page.texts("#nodes .badge.ready") == ["ready"] * 2)
    page.shot("cluster-idle")

    # the head of the queue is listed on the cluster page, with why each job waits
    hog = {"memory_mib": 30000, "command": simjob(1000, 300)}
    blocker = colloc.http.post("/v1/jobs", json={"name": "a100-hog", **hog}).json()["id"]
    colloc.wait_for(blocker, {"running"})
    waiter = colloc.http.post("/v1/jobs", json={"name": "a100-waiter", **hog}).json()["id"]
    pending_row = f'#pending-table tr[data-job-id="{waiter}"]'
    page.wait(
        "the waiting job and its reason", lambda d: "needs" in " ".join(page.texts(pending_row))
    )
    page.shot("cluster-pending")
    for doomed in (waiter, blocker):
        assert colloc.http.post(f"/v1/jobs/{doomed}/cancel").status_code == 200
    page.wait("an empty queue", lambda d: "No job is waiting" in " ".join(page.texts("#pending")))

    # a training job: the estimator's numbers reserve it; the simulated run uses 90% of
    # the estimated peak on whichever GPU model it gets
    estimates = colloc.http.post("/v1/estimate", json={"training": RESNET}).json()["estimates"]
    peaks = ",".join(f"{e['gpu_model']}={int(e['peak_mib'] * 0.9)}" for e in estimates)
    spec = {"name": "resnet-dash", "training": RESNET, "command": simjob(peaks, 20, ramp=1)}
    response = colloc.http.post("/v1/jobs", json=spec)
    assert response.status_code == 201, response.text
    job_id = int(response.json()["id"])

    segment = f'.seg.job[data-job-id="{job_id}"]'
    page.wait("the job's reservation on a GPU", lambda d: page.count(segment) == 1)
    page.wait(
        "observed use on its GPU",
        lambda d: any("used 0 MiB" not in text for text in page.texts(".gpu")),
    )
    page.shot("cluster-running")

    page.open("jobs")
    page.wait("the job listed as running", lambda d: job_state(page, job_id) == "running")
    page.shot("jobs-running")
    page.wait("the job finished", lambda d: job_state(page, job_id) == "succeeded", timeout_s=60)
    page.shot("jobs-succeeded")

    page.click(f'#job-table tr[data-job-id="{job_id}"]')
    page.wait("the job's page", lambda d: page.texts("#job-state") == ["succeeded"])
    page.wait("its events", lambda d: "job.succeeded" in " ".join(page.texts("#job-events td")))
    page.wait("its output", lambda d: page.texts("#job-log") and page.texts("#job-log")[0] != "")
    Select(browser.find_element(By.ID, "log-stream")).select_by_value("stderr")
    page.wait(
        "its empty stderr said to be empty, not awaited",
        lambda d: page.texts("#job-log") == ["(attempt 1 wrote nothing to stderr)"],
    )
    rows = page.texts("#job-estimates tbody tr")
    assert len(rows) == len(estimates)
    observed = colloc.job(job_id)["attempts"][0]
    assert observed["peak_mib"] and str(observed["peak_mib"]) in " ".join(rows)
    assert '"resnet50"' in page.texts("#job-spec")[0]  # the spec as submitted
    page.shot("job-detail")

    page.open("estimator")
    page.wait("estimate-vs-observed accuracy", lambda d: len(page.texts("#accuracy tbody tr")) == 1)
    page.wait("a scatter point", lambda d: page.count(".chart circle") == 1)
    assert page.count("#fixed-cost-offsets") == 1  # the cluster's learned fixed costs
    assert page.unclipped(), "a chart label runs past the chart's edge"
    page.shot("estimator")

    page.open("events")
    page.wait("the event feed", lambda d: "job.succeeded" in " ".join(page.texts("#events td")))
    nodes = {text for text in page.texts("#events td.node") if text}
    assert nodes and nodes <= {"node-a", "node-b"}, nodes  # names, not ids
    page.shot("events")

    page.open("cluster")
    page.wait("usage charts with samples", lambda d: page.count("#usage path") > 0)
    model_colors = browser.execute_script(
        "return [...document.querySelectorAll('#usage .chart:first-child .legend i')]"
        ".map((i) => i.style.background)"
    )
    assert len(model_colors) == 2 and len(set(model_colors)) == 2, model_colors
    ten = browser.execute_script(
        "return Object.values(distinctColors([...'abcdefghij']))"
    )  # the palette gives ten models ten colours
    assert len(set(ten)) == 10
    assert page.unclipped(), "a chart label runs past the chart's edge"
    page.shot("cluster-usage")
    assert page.errors() == []
