"""The dashboard in a real headless Chromium (Debian's ``chromium``, driven by Playwright with the system
executable): bootstrap the admin from the setup link, issue a key, add memories through the API with it,
find them in the dashboard, search, open a history, erase a user after exporting, revoke the key and see the
API refuse it. A screenshot of every page is kept in ``tests/artifacts/`` (git-ignored).

Without a Chromium these tests say so loudly (a skip with the install command); with ``CI=true`` a missing
browser fails the run.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from support.service_helpers import PASSWORD, api, running_service

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
CHROMIUM = next((p for p in (os.environ.get("PGMEM_CHROMIUM"), shutil.which("chromium"), shutil.which("chromium-browser"))
                 if p), None)


def _require_browser():
    problem = None
    if CHROMIUM is None:
        problem = "no Chromium found (apt-get install -y chromium, or set PGMEM_CHROMIUM)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            problem = "the playwright package is missing (pip install -e '.[test]')"
    if problem:
        message = f"BROWSER TESTS NOT RUN: {problem}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message, pytrace=False)
        print("\n" + "!" * 100 + f"\n{message}\n" + "!" * 100)
        pytest.skip(message)


@pytest.fixture
def page():
    _require_browser()
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--no-sandbox", "--disable-dev-shm-usage"])
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        pg = context.new_page()
        pg.set_default_timeout(15000)
        try:
            yield pg
        finally:
            context.close()
            browser.close()


def shot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_the_dashboard_flow_in_chromium(dsn, page):
    with running_service(dsn) as svc:
        # 1. Bootstrap from the one-time setup link.
        page.goto(svc.setup_link())
        shot(page, "01-setup")
        page.fill("input[name=username]", "admin")
        page.fill("input[name=password]", PASSWORD)
        page.fill("input[name=password2]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(re.compile(r"/ui/keys"))
        cookie = next(c for c in page.context.cookies() if c["name"] == "pgmem_session")
        assert cookie["httpOnly"] and cookie["secure"] and cookie["sameSite"] == "Strict"
        shot(page, "02-keys-empty")

        # 2. Issue a key for alice; it is shown once.
        page.fill("input[name=label]", "alice's planner")
        page.fill("input[name=user]", "alice")
        page.click("text=Create key")
        key = page.inner_text("#new-key").strip()
        assert key.startswith("pgm_")
        shot(page, "03-key-issued")

        # 3. Memories added through the API with that key.
        with api(svc, key) as c:
            ids = [c.post("/v1/memories", json={"content": text, "agent_id": "planner", "metadata": meta}).json()["id"]
                   for text, meta in [("Alice is vegetarian and allergic to peanuts", {"topic": "food"}),
                                      ("Alice flies to Lisbon on 3 March", {"topic": "travel"}),
                                      ("Alice prefers window seats", {"topic": "travel"})]]
            c.patch(f"/v1/memories/{ids[1]}", json={"content": "Alice flies to Lisbon on 5 March"})

        # 4. Found in the dashboard, with a metadata filter.
        page.goto(svc.url + "/ui/memories?user=alice")
        assert page.locator("#memories tbody tr").count() == 3
        shot(page, "04-memories")
        page.fill("input[name=meta]", '{"topic": "travel"}')
        page.click("form.filters button[type=submit]")
        assert page.locator("#memories tbody tr").count() == 2
        shot(page, "05-memories-filtered")

        # 5. Search, with readable scores.
        page.goto(svc.url + "/ui/search")
        page.fill("input[name=user]", "alice")
        page.fill("input[name=q]", "peanuts allergy")
        page.click("form.filters button[type=submit]")
        first = page.locator("#results tbody tr").first
        assert "peanuts" in first.inner_text()
        assert re.search(r"\d\.\d{3}", first.inner_text())
        shot(page, "06-search")

        # 6. A memory's history, then an edit from the dashboard.
        page.goto(svc.url + f"/ui/memories/{ids[1]}?user=alice")
        events = page.locator("#history tbody tr")
        assert events.count() == 2 and "5 March" in events.nth(1).inner_text()
        page.fill("#content", "Alice flies to Lisbon on 6 March")
        page.click("text=Save")
        assert page.locator("#history tbody tr").count() == 3
        shot(page, "07-history")

        # 7. Entities, the request log, health.
        page.goto(svc.url + "/ui/entities")
        assert "alice" in page.inner_text("#entities")
        shot(page, "08-entities")
        page.goto(svc.url + "/ui/log")
        assert "/v1/memories" in page.inner_text("#log")
        shot(page, "09-log")
        page.goto(svc.url + "/ui/health")
        assert "ready" in page.inner_text("h1")
        shot(page, "10-health")

        # 8. Revoke the key: the API refuses it.
        page.goto(svc.url + "/ui/keys")
        page.click(f"button[data-prefix='{key[:12]}']")
        assert "revoked" in page.inner_text("#keys")
        shot(page, "11-key-revoked")
        with api(svc, key) as c:
            r = c.get("/v1/memories")
            assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"

        # 9. Erase alice: typed confirmation, after the export.
        page.goto(svc.url + "/ui/entities/alice")
        assert page.locator("input[name=confirm]").is_disabled()
        with page.expect_download() as dl:
            page.click("#export")
        export = Path(dl.value.path()).read_text(encoding="utf-8")
        assert "Alice prefers window seats" in export
        page.goto(svc.url + "/ui/entities/alice")
        page.fill("input[name=confirm]", "alice-typo")
        page.click("text=Erase alice")
        assert "Type the user id exactly" in page.inner_text("main")
        page.fill("input[name=confirm]", "alice")
        page.click("text=Erase alice")
        assert "alice was erased" in page.inner_text("h1")
        shot(page, "12-erased")
        page.goto(svc.url + "/ui/memories?user=alice")
        assert "No memories match" in page.inner_text("main")


def test_a_missing_browser_is_loud_and_fails_under_ci(monkeypatch, capsys):
    import test_service_browser as me

    monkeypatch.setattr(me, "CHROMIUM", None)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="BROWSER TESTS NOT RUN: no Chromium found"):
        me._require_browser()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="BROWSER TESTS NOT RUN"):
        me._require_browser()
    assert "BROWSER TESTS NOT RUN" in capsys.readouterr().out
