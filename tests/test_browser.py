"""A real browser (Debian's chromium, driven by Playwright): log in, rank by drag and by keyboard, submit."""

import os
import shutil
from pathlib import Path

import pytest

from tests.app_server import ROOT, AppServer
from tests.conftest import query
from tests.test_session import seed_store

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = ROOT / "test-artifacts"


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: `make test` installs Debian's chromium")
        pytest.skip("no chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
        )
        yield b
        b.close()


def _cards(page):
    """[(rank shown, text)] top to bottom."""
    return [
        (int(c.query_selector(".rank").inner_text()), c.query_selector(".text").inner_text())
        for c in page.query_selector_all("#ranker .card")
    ]


@pytest.mark.browser
def test_log_in_rank_by_drag_and_keyboard_and_submit(browser, db, tmp_path):
    seed_store(db, 3)
    users = tmp_path / "users.txt"
    users.write_text("ann:pw-ann\n")
    app = AppServer(db, "--auth", str(users))
    page = browser.new_page(viewport={"width": 1200, "height": 1000})
    try:
        page.goto(app.url)
        page.fill("input[type=text]", "ann")
        page.fill("input[type=password]", "pw-ann")
        page.keyboard.press("Enter")
        page.wait_for_selector("#ranker .card", timeout=30_000)  # the first prompt loads on login
        shown = [text for _, text in _cards(page)]
        assert [r for r, _ in _cards(page)] == [1, 2, 3, 4]
        assert "you: 0 ranked" in page.inner_text("#annotate-progress")
        # an annotator (no --admins) sees Annotate and Compare; Data and Train are not shown to them
        tabs = [t.inner_text().strip() for t in page.query_selector_all("button[role=tab]") if t.is_visible()]
        assert "Annotate" in tabs and "Compare" in tabs and "Data" not in tabs and "Train" not in tabs, tabs
        # drag the third response to the top: ranks 1..4 follow the new order
        page.drag_and_drop("#ranker .card:nth-child(3)", "#ranker .card:nth-child(1)")
        page.wait_for_function("document.querySelector('#ranker .card .text').innerText === " + repr(shown[2]))
        assert [t for _, t in _cards(page)] == [shown[2], shown[0], shown[1], shown[3]]
        # keyboard: focus the last card and give it rank 1: a tie with the top card
        page.focus("#ranker .card:nth-child(4)")
        page.keyboard.press("1")
        page.wait_for_function("document.querySelectorAll('#ranker .card.tie').length === 2")
        final = dict((t, r) for r, t in _cards(page))
        assert final == {shown[2]: 1, shown[3]: 1, shown[0]: 2, shown[1]: 3}
        page.click("#annotate-submit")
        page.wait_for_function("document.querySelector('#annotate-progress').innerText.includes('you: 1 ranked')")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "annotate.png"), full_page=True)
    finally:
        page.close()
        app.stop()
    rows = query(
        db,
        """SELECT r.text, i.rank, i.shown_position, g.annotator, g.lead_time_s
                        FROM ranking_items i JOIN responses r USING (response_id) JOIN rankings g USING (ranking_id)
                        ORDER BY i.shown_position""",
    )
    assert [(t, rank, pos) for t, rank, pos, _, _ in rows] == [(t, final[t], pos) for pos, t in enumerate(shown)]
    assert {a for *_, a, _ in rows} == {"ann"} and all(lead > 0 for *_, lead in rows)
    assert query(db, "SELECT count(*) FROM pairs") == [(5,)]  # ranks 1,1,2,3: 6 pairs less the tie


@pytest.mark.browser
def test_an_admin_login_shows_the_data_and_train_tabs(browser, db, tmp_path):
    seed_store(db, 1)
    users = tmp_path / "users.txt"
    users.write_text("ann:pw-ann\nboss:pw-boss\n")
    app = AppServer(db, "--auth", str(users), "--admins", "boss")
    page = browser.new_page()
    try:
        page.goto(app.url)
        page.fill("input[type=text]", "boss")
        page.fill("input[type=password]", "pw-boss")
        page.keyboard.press("Enter")
        page.wait_for_selector("button[role=tab]:has-text('Train')", timeout=30_000)
        tabs = [t.inner_text().strip() for t in page.query_selector_all("button[role=tab]") if t.is_visible()]
        assert tabs == ["Annotate", "Data", "Train", "Compare"]
    finally:
        page.close()
        app.stop()
