"""A real browser (Debian's chromium, driven by Playwright): log in, rank by drag and by keyboard, submit."""

import json

import pytest

from bench.app_server import AppServer
from store.db import write
from store.guidelines import set_guideline
from tests.builders import ARTIFACTS, seed_store
from tests.conftest import query


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
    users.chmod(0o600)
    app = AppServer(db, "--auth", str(users))
    page = browser.new_page(viewport={"width": 1200, "height": 1000})
    try:
        page.goto(app.page_url)
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
        page.drag_and_drop(":nth-match(#ranker .card, 3)", ":nth-match(#ranker .card, 1)")
        page.wait_for_function("document.querySelector('#ranker .card .text').innerText === " + repr(shown[2]))
        assert [t for _, t in _cards(page)] == [shown[2], shown[0], shown[1], shown[3]]
        # keyboard: focus the last card and give it rank 1: a tie with the top card
        page.focus(":nth-match(#ranker .card, 4)")
        page.keyboard.press("1")
        page.wait_for_function("document.querySelectorAll('#ranker .card.tie').length === 2")
        final = dict((t, r) for r, t in _cards(page))
        assert final == {shown[2]: 1, shown[3]: 1, shown[0]: 2, shown[1]: 3}
        page.click("#annotate-submit")
        page.wait_for_function("document.querySelector('#annotate-progress').innerText.includes('you: 1 ranked')")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "annotate.png"), full_page=True)
        # Log out ends the session: the login form again, and a reload does not get past it
        page.click("#logout")
        page.wait_for_selector("input[type=password]", timeout=30_000)
        page.reload()
        page.wait_for_selector("input[type=password]", timeout=30_000)
        assert page.locator("#ranker").count() == 0
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
    users.chmod(0o600)
    app = AppServer(db, "--auth", str(users), "--admins", "boss")
    page = browser.new_page()
    try:
        page.goto(app.page_url)
        page.fill("input[type=text]", "boss")
        page.fill("input[type=password]", "pw-boss")
        page.keyboard.press("Enter")
        page.wait_for_selector("button[role=tab]:has-text('Train')", timeout=30_000)
        tabs = [t.inner_text().strip() for t in page.query_selector_all("button[role=tab]") if t.is_visible()]
        assert tabs == ["Annotate", "Data", "Train", "Compare"]
    finally:
        page.close()
        app.stop()


def _log_in(page, url: str, user: str) -> None:
    page.goto(url)
    page.fill("input[type=text]", user)
    page.fill("input[type=password]", f"pw-{user}")
    page.keyboard.press("Enter")


def _selected_tab(page) -> str:
    return page.inner_text("button[role=tab][aria-selected=true]").strip()


@pytest.mark.browser
def test_an_empty_store_opens_on_the_data_tab_and_tells_an_annotator_why(browser, db, tmp_path):
    """The first screen on an empty store: an admin lands on the Data tab (load prompts, sample); an annotator, who
    has no Data tab, reads one line on the Annotate tab saying what has to happen first."""
    users = tmp_path / "users.txt"
    users.write_text("ann:pw-ann\nboss:pw-boss\n")
    users.chmod(0o600)
    app = AppServer(db, "--auth", str(users), "--admins", "boss")
    page = browser.new_page()
    try:
        _log_in(page, app.url, "ann")
        page.wait_for_selector("#annotate-prompt:has-text('Nothing to annotate yet')", timeout=30_000)
        assert page.inner_text("#annotate-prompt").strip() == (
            "Nothing to annotate yet: an admin loads prompts and samples responses in the Data tab."
        )
        assert _selected_tab(page) == "Annotate"
        page.context.clear_cookies()
        _log_in(page, app.url, "boss")
        page.wait_for_selector("#store-counts:has-text('The store is empty')", timeout=30_000)
        page.wait_for_selector("button[role=tab][aria-selected=true]:has-text('Data')", timeout=10_000)
        assert page.is_visible("#load-examples")
    finally:
        page.close()
        app.stop()
    solo = AppServer(db)  # no --auth: the one local user is the admin
    page = browser.new_page()
    try:
        page.goto(solo.page_url)
        page.wait_for_selector("#store-counts:has-text('The store is empty')", timeout=30_000)
        page.wait_for_selector("button[role=tab][aria-selected=true]:has-text('Data')", timeout=10_000)
        # before anyone types, no box is marked invalid (the Label Studio project id was outlined red at its default)
        invalid = page.evaluate("() => [...document.querySelectorAll('input:invalid')].map(e => e.ariaLabel)")
        assert invalid == []
    finally:
        page.close()
        solo.stop()


HOSTILE = (
    "## Steps\n\n- first step\n- second step\n\n```python\nprint('hi')\n```\n\n"
    '<img src=x onerror="window.__pwned=1"> <script>window.__pwned=2</script> [link](javascript:window.__pwned=3)'
)
HOSTILE_TEXT = ('<img src=x onerror="window.__pwned=1">', "<script>window.__pwned=2</script>", "[link](javascript:")


# a conversation prompt (store/conversations.py) whose last turn is the hostile text
CONVERSATION = [
    {"role": "system", "content": "Answer in Markdown."},
    {"role": "user", "content": "What is Markdown?"},
    {"role": "assistant", "content": "A light markup language."},
    {"role": "user", "content": HOSTILE},
]


def _seed_hostile(db) -> None:
    """One prompt with Markdown and hostile HTML in it, whose first sample is the same, and three plain samples;
    then a conversation ending in the same text, with two samples."""
    from store.conversations import conversation_text
    from store.db import write
    from store.prompts import prompt_ids
    from store.responses import Sample, add_samples

    texts = [HOSTILE, "plain one", "plain two", "plain three"]
    with write(db) as con:
        (pid,) = prompt_ids(con, ["Show me\n\n" + HOSTILE], "test").values()
        add_samples(con, [Sample(pid, t, j, 3, "eos", 0) for j, t in enumerate(texts)], model_id="test")
        (cid,) = prompt_ids(con, [conversation_text(CONVERSATION)], "test").values()
        add_samples(con, [Sample(cid, t, j, 3, "eos", 0) for j, t in enumerate(["reply one", "reply two"])], "test")


def _check_rendered(page, where: str) -> None:
    """Markdown shaped (heading, list, code block) and the response's HTML shown as text, not as elements."""
    box = page.locator(where)
    assert box.locator("pre code").count() >= 1 and box.locator("li").count() >= 2, where
    assert box.locator("h2").count() >= 1, where
    text = box.inner_text()
    assert all(h in text for h in HOSTILE_TEXT), (where, text)
    assert box.locator("img[src=x], script, a[href^='javascript' i]").count() == 0, where


@pytest.mark.browser
def test_responses_render_markdown_and_never_run_their_html(browser, db, tiny_model_dir, tmp_path):
    """Markdown in the ranker and the Compare chat, the response's own HTML shown as text and never run; and, on
    the way, blind Compare keeps the reward model's scores for after the vote."""
    from app.jobs.compare import BLIND_LINE
    from tests.builders import build_liked_token_rm

    _seed_hostile(db)
    rm = build_liked_token_rm(tiny_model_dir, tmp_path / "rm")
    app = AppServer(db)
    page = browser.new_page(viewport={"width": 1200, "height": 1400})
    try:
        page.goto(app.page_url)
        page.fill("#annotator-name textarea", "ann")
        page.click("#annotate-start")
        page.wait_for_selector("#ranker .card", timeout=30_000)
        card = "#ranker .card:has(h2)"
        _check_rendered(page, card)
        _check_rendered(page, "#annotate-prompt")  # the prompt renders as the responses do
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "ranker-markdown.png"), full_page=True)
        page.click(f"{card} .text")  # interact: click the text, move the card by its rank key, submit
        rank = "1" if page.inner_text(f"{card} .rank") != "1" else "4"
        page.focus(card)
        page.keyboard.press(rank)
        page.wait_for_selector(f"{card} .rank:text-is('{rank}')")
        page.click("#annotate-submit")
        page.wait_for_selector("#annotate-progress:has-text('you: 1 ranked')", timeout=30_000)
        # the next task is the conversation: every turn shown with its role, each rendered as a response is
        page.wait_for_selector("#annotate-prompt .turn-system", timeout=30_000)
        assert page.locator("#annotate-prompt .turn").count() == 4
        assert "A light markup language." in page.inner_text("#annotate-prompt .turn-assistant")
        _check_rendered(page, "#annotate-prompt .turn-user >> nth=1")
        page.screenshot(path=str(ARTIFACTS / "ranker-conversation.png"), full_page=True)
        # the Compare chat, from the stored conversation: its earlier turns in both panes, its last turn to send
        page.get_by_role("tab", name="Compare").click()
        page.fill("#cmp-reward textarea", "pending")  # picking the actor fills in its defaults: reward '' for a folder
        page.fill("#cmp-actor input", str(tiny_model_dir))
        page.keyboard.press("Enter")
        page.locator("#cmp-actor input").blur()
        page.wait_for_function("document.querySelector('#cmp-reward textarea').value === ''")
        page.fill("#cmp-reference textarea", str(tiny_model_dir))
        page.fill("#cmp-reward textarea", str(rm))
        page.get_by_label("max new tokens").fill("4")
        page.click("#cmp-start input")
        page.get_by_role("option").first.click()
        page.wait_for_function("document.querySelector('#cmp-message textarea').value.startsWith('## Steps')")
        assert "A light markup language." in page.inner_text("#cmp-left")
        page.click("#cmp-send")
        page.wait_for_selector("#vote-left:not([disabled])", timeout=120_000)
        for side in ("#cmp-left", "#cmp-right"):
            _check_rendered(page, side)
        page.screenshot(path=str(ARTIFACTS / "compare-markdown.png"), full_page=True)
        assert page.inner_text("#cmp-reveal") == BLIND_LINE and page.inner_text("#cmp-left-score") == ""
        page.locator("#cmp-left").get_by_text("[link](javascript:").first.click()
        page.click("#vote-left")
        page.wait_for_selector("#cmp-reveal:has-text('Left was')", timeout=30_000)
        assert page.inner_text("#cmp-reveal").count("reward model score") == 2
        assert page.inner_text("#cmp-left-score").startswith("reward model score: ")
        assert page.evaluate("window.__pwned") is None
    finally:
        page.close()
        app.stop()
    stored = "SELECT i.rank FROM ranking_items i JOIN responses r USING (response_id) WHERE r.text = ?"
    assert query(db, stored, [HOSTILE]) == [(int(rank),)]  # the response's own text, ranked as the page showed it
    # the vote keeps the whole conversation: the earlier turns as each side's context, and as what both answered
    ((context, prompt),) = query(db, "SELECT context, prompt FROM votes")
    assert json.loads(context) == [CONVERSATION[:3], CONVERSATION[:3]] and json.loads(prompt) == CONVERSATION


@pytest.mark.browser
def test_the_lead_sees_who_to_look_at_on_the_data_tab(browser, db):
    """The annotator dashboard renders in the Data tab: cy, who disagrees with everyone and fails the gold
    prompts, has both reasons in the 'look at' column (tests/test_dashboard.py works out the numbers)."""
    from annotation.gold import mark
    from tests.builders import campaign_store

    campaign_store(db)
    mark(db, [], annotator="ann", by="lead")
    app = AppServer(db)
    page = browser.new_page(viewport={"width": 1300, "height": 1100})
    try:
        page.goto(app.page_url)
        page.click("button[role=tab]:has-text('Data')")
        page.wait_for_function(
            "document.querySelector('#annotators') && document.querySelector('#annotators').innerText"
            ".includes('low agreement')",
            timeout=30_000,
        )
        table = page.inner_text("#annotators")
        assert "gold: 0% right on 5 gold prompts" in table and "ann" in table and "dee" in table
        page.wait_for_selector("#answers-over-time", state="visible", timeout=30_000)
        ARTIFACTS.mkdir(exist_ok=True)
        page.locator("#annotators").screenshot(path=str(ARTIFACTS / "annotators.png"))
    finally:
        page.close()
        app.stop()


@pytest.mark.browser
def test_a_whole_task_by_keyboard_with_strengths_a_tag_and_an_edit(browser, db):
    """Rank and say how much better, by keyboard only: Arrow Down moves the first card below the second (order
    B, A, C, D), then digits on the rows between them give the steps 3, 1, 0, and Enter on Submit stores them.
    Each pair gets the largest step between its responses: B>A 3, B>C 3, B>D 3, A>C 1, A>D 1, C>D 0. On the last
    card, "o" tags it off topic. Then Tab from the last card to "Start from the best", Enter copies B into the edit
    box, and typing adds to it: the edit is stored ranked above all four (store/edits.py), its pairs without a
    strength. The guideline set before is shown above the prompt, and the ranking records its version."""
    seed_store(db, 2)
    with write(db) as con:
        set_guideline(con, "Prefer **short** answers.", "lead")
    app = AppServer(db, "--edits")
    page = browser.new_page(viewport={"width": 1200, "height": 1200})
    try:
        page.goto(app.page_url)
        page.focus("#annotator-name textarea")
        page.keyboard.type("kim")
        page.focus("#annotate-start")
        page.keyboard.press("Enter")
        page.wait_for_selector("#ranker .card", timeout=30_000)
        shown = [t for _, t in _cards(page)]
        assert page.locator("#annotate-guideline summary").inner_text() == "Guidelines (version 1)"
        assert page.locator("#annotate-guideline strong").inner_text() == "short"
        assert page.locator("#ranker .gap").count() == 3  # one row between each response and the next
        page.focus(":nth-match(#ranker .card, 1)")
        page.keyboard.press("ArrowDown")
        page.wait_for_function("document.querySelector('#ranker .card .text').innerText === " + repr(shown[1]))
        for gap, level in ((0, "3"), (1, "1"), (2, "0")):
            page.focus(f"#ranker .gap[data-gap='{gap}']")
            page.keyboard.press(level)
            page.wait_for_selector(f"#ranker .gap[data-gap='{gap}'] button.on", timeout=10_000)
        page.focus(":nth-match(#ranker .card, 4)")
        page.keyboard.press("o")
        page.wait_for_selector(":nth-match(#ranker .card, 4) .tags button.on", timeout=10_000)
        assert page.evaluate("document.activeElement.classList.contains('card')")  # the card keeps the focus
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.className") == "edit-start"
        page.keyboard.press("Enter")
        page.wait_for_function("document.activeElement.tagName === 'TEXTAREA'")
        page.keyboard.type(" Fixed.")
        page.focus("#annotate-submit")
        page.keyboard.press("Enter")
        page.wait_for_function("document.querySelector('#annotate-progress').innerText.includes('you: 1 ranked')")
    finally:
        page.close()
        app.stop()
    got = dict(((c, r), s) for c, r, s in query(db, "SELECT chosen, rejected, strength FROM pairs"))
    a, b, c, d = shown
    e = b + " Fixed."
    assert got == {(b, a): 3, (b, c): 3, (b, d): 3, (a, c): 1, (a, d): 1, (c, d): 0, **{(e, x): None for x in shown}}
    assert query(db, "SELECT annotator FROM edits") == [("kim",)]
    assert query(db, "SELECT r.text, t.tag FROM response_tags t JOIN responses r USING (response_id)") == [
        (d, "off topic")
    ]
    assert query(db, "SELECT guideline_version FROM rankings") == [(1,)]


@pytest.mark.browser
def test_a_question_registered_by_a_team_is_asked_and_stored_without_a_tab_knowing_it(browser, db):
    """tests/toy_question.py's `confidence`, loaded by RLHF_QUESTIONS alone: the widget shows its row of choices
    under the cards; "2" clicked and then the order changed is cleared (it was said of the old order, as the
    strengths are); clicking "4" and submitting stores it with the ranking, and each of the ranking's C(4,2) = 6
    pairs carries it (annotation/judgement.py)."""
    seed_store(db, 2)
    app = AppServer(db, env={"RLHF_QUESTIONS": "tests.toy_question:CONFIDENCE"})
    page = browser.new_page(viewport={"width": 1200, "height": 1200})
    try:
        page.goto(app.page_url)
        page.focus("#annotator-name textarea")
        page.keyboard.type("kim")
        page.click("#annotate-start")
        page.wait_for_selector("#ranker .more [data-question='confidence'] button", timeout=30_000)
        assert page.locator("#ranker .more [data-question='confidence'] button").all_inner_texts() == list("12345")
        page.click(":nth-match(#ranker .more [data-question='confidence'] button, 2)")
        page.wait_for_selector("#ranker .more [data-question='confidence'] button.on", timeout=10_000)
        page.focus(":nth-match(#ranker .card, 1)")
        page.keyboard.press("ArrowDown")  # not the shown order: no warning to confirm; the answer was of the old one
        page.wait_for_selector("#ranker .more [data-question='confidence'] button.on", state="detached", timeout=10_000)
        page.click(":nth-match(#ranker .more [data-question='confidence'] button, 4)")
        page.wait_for_selector("#ranker .more [data-question='confidence'] button.on", timeout=10_000)
        page.click("#annotate-submit")
        page.wait_for_function("document.querySelector('#annotate-progress').innerText.includes('you: 1 ranked')")
    finally:
        page.close()
        app.stop()
    assert query(db, "SELECT annotator, question, value FROM ranking_answers JOIN rankings USING (ranking_id)") == [
        ("kim", "confidence", "4")
    ]
    assert query(db, "SELECT count(*), count(DISTINCT answers) FROM pairs WHERE answers IS NOT NULL") == [(6, 1)]
