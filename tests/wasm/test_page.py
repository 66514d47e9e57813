"""The demo page's looks in headless Chromium (a site around an untrained model, so no training):
the canvas does not move when the late lines arrive, the loading state is a veiled board and a
grey placeholder (not a big orange mark), and the backend selector shows the backend that runs.
Slow: a Pyodide page load."""

import pytest

from .conftest import Served, demo_page

pytestmark = pytest.mark.slow

ACCENT = "rgb(228, 87, 46)"  # style.css --accent: the colour of a prediction
LOOKS = """() => ({
    canvas: document.getElementById("canvas").getBoundingClientRect().toJSON(),
    digit: document.getElementById("digit").textContent,
    digitColor: getComputedStyle(document.getElementById("digit")).color,
    veil: getComputedStyle(document.querySelector(".veil")).display,
    selector: document.getElementById("backend").value,
    selectorDisabled: document.getElementById("backend").disabled,
    why: document.getElementById("why").textContent,
})"""


@pytest.mark.parametrize(
    "viewport", [{"width": 360, "height": 800}, {"width": 820, "height": 640}], ids=["narrow", "wide"]
)
def test_no_layout_shift_and_the_selector_shows_what_runs(chromium, untrained_site, viewport):
    seen = {}

    def loading(page):
        page.wait_for_selector("#canvas")
        seen["loading"] = page.evaluate(LOOKS)

    # numpy is asked for but is not in this site: the page runs python and must say so
    with (
        Served(untrained_site) as server,
        demo_page(chromium, server.url + "?backend=numpy", viewport=viewport, before_ready=loading) as page,
    ):
        ready = page.evaluate(LOOKS)
        backend = page.evaluate("emberDemo.backend")
        status = page.inner_text("#status")
    before = seen["loading"]
    assert before["veil"] == "flex" and before["selectorDisabled"]  # visibly loading
    assert before["digit"] == "?" and before["digitColor"] != ACCENT  # a grey placeholder
    assert ready["veil"] == "none" and not ready["selectorDisabled"]
    assert ready["why"].startswith("Passed over:")  # the late line arrived ...
    assert ready["canvas"] == before["canvas"]  # ... and the canvas stayed put
    assert backend == "python" and ready["selector"] == backend
    assert status.startswith("Ready on the python backend (numpy asked for)")
