"""The console in a real headless Chromium (Debian's chromium and chromium-driver,
driven by Selenium; `make test` installs them) against a real server: what a person
does, checked on the server with redis-py.  One browser for the module.

STREAMDB_CONSOLE_SCREENSHOTS=1 also saves the pages' screenshots under
docs/console/ (the ones docs/CONSOLE.md shows); otherwise they go to a temporary
directory, so a test run leaves the repository as it was."""

from __future__ import annotations

import datetime
import os
import shutil
from pathlib import Path

import pytest

from console_helpers import ADMIN, READER, STREAM_ENTRIES, ConsoleServer, pending_ids
from helpers import ROOT, wait_until

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (make test installs it)")
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(CHROMEDRIVER is None or shutil.which("chromium") is None,
                                reason="chromium and chromium-driver are not installed (make test installs them)")


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    with ConsoleServer(tmp_path_factory.mktemp("console-browser")) as cs:
        yield cs


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,1000", "--no-first-run", "--disable-extensions"):
        options.add_argument(arg)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    try:
        driver = webdriver.Chrome(service=webdriver.ChromeService(CHROMEDRIVER), options=options)
    except WebDriverException as e:
        pytest.skip(f"headless chromium did not start: {e.msg}")
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    if os.environ.get("STREAMDB_CONSOLE_SCREENSHOTS") == "1":
        target = ROOT / "docs" / "console"
        target.mkdir(exist_ok=True)
        return target
    return tmp_path_factory.mktemp("screenshots")


def _replaced(old_page) -> bool:
    """Whether the element ``old_page`` left the document: stale, as WebDriver says it,
    or (Chromium, while the next document is being swapped in) "Node with given id does
    not belong to the document", an inspector error expected_conditions.staleness_of
    does not take for staleness (seen failing a click's wait once in a few runs)."""
    try:
        old_page.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as e:
        if "does not belong to the document" in str(e):
            return True
        raise
    return False


class Console:
    """The browser pointed at one server's console."""

    def __init__(self, driver, cs: ConsoleServer) -> None:
        self.driver = driver
        self.base = f"http://127.0.0.1:{cs.console_port}"

    def open(self, path: str) -> None:
        self.driver.get(self.base + path)

    def path(self) -> str:
        return self.driver.current_url[len(self.base):]

    def find(self, css: str):
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def all(self, css: str):
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def click(self, target) -> None:
        """Click a link or button (a CSS selector or an element) and wait until the
        page it loads has replaced this one and is whole: an element found while
        the new document still loads can belong to none once it has (Chromium's
        "Node with given id does not belong to the document", seen under load)."""
        element = self.find(target) if isinstance(target, str) else target
        old_page = self.find("html")
        element.click()
        wait = WebDriverWait(self.driver, 15)
        wait.until(lambda _: _replaced(old_page))
        wait.until(lambda d: d.execute_script("return document.readyState") == "complete")

    def log_in(self, user: str, password: str) -> None:
        self.open("/login")
        self.find("#user").send_keys(user)
        self.find("#password").send_keys(password)
        self.click("#login")
        wait_until(lambda: self.path() == "/", what="the overview after the login")

    def log_out(self) -> None:
        self.click("#logout")
        wait_until(lambda: self.path() == "/login", what="the login page after logging out")

    def message(self) -> str:
        return self.find(".msg").text


@pytest.fixture
def ui(browser, console):
    console.fill()
    browser.delete_all_cookies()
    return Console(browser, console)


def test_without_a_session_every_page_goes_to_the_login(ui):
    for path in ("/", "/streams", "/stream?key=orders", "/group?key=orders&group=billing"):
        ui.open(path)
        assert ui.path() == "/login"
        assert ui.find("#login-form")


def test_an_operator_browses_and_acts_on_a_group(ui, console, shots):
    r = console.redis
    ui.log_in(*ADMIN)
    assert "master" in ui.find("#server").text
    assert ui.all("svg.chart")
    ui.driver.save_screenshot(str(shots / "overview.png"))

    # The stream list, and a stream's entries page by page.
    ui.open("/streams")
    rows = {row.find_element(By.CSS_SELECTOR, "td").text: row for row in ui.all("#streams tr")[1:]}
    assert set(rows) == {"orders", "audit"}
    assert str(STREAM_ENTRIES) in rows["orders"].text
    ui.driver.save_screenshot(str(shots / "streams.png"))
    ui.click(rows["orders"].find_element(By.LINK_TEXT, "orders"))
    first_page = [e.text for e in ui.all("#entries td.entry-id")]
    all_ids = [i.decode() for i, _ in r.xrange("orders")]
    assert first_page == all_ids[:20]
    ui.click("#newer")
    assert [e.text for e in ui.all("#entries td.entry-id")] == all_ids[20:40]
    ui.click("#older")
    assert [e.text for e in ui.all("#entries td.entry-id")] == list(reversed(all_ids[:20]))
    Select(ui.find("select[name=fmt]")).select_by_value("hex")
    ui.click("#browse button")
    assert "00 ff" in ui.find("#entries").text
    ui.driver.save_screenshot(str(shots / "stream.png"))

    # The group: its pending entries, then ack one and reset the group.
    ui.click("#groups a")
    assert ui.path().startswith("/group?")
    pending_rows = ui.all("#pending tr")[1:]
    assert len(pending_rows) == 8
    ui.driver.save_screenshot(str(shots / "group.png"))
    target = pending_ids(r)[0]
    ui.find(f'#pending input[value="{target.decode()}"]').click()
    ui.click("#ack")
    assert ui.message() == "Acknowledged 1 entries."
    assert target not in pending_ids(r) and len(pending_ids(r)) == 7

    Select(ui.find("#setid-target")).select_by_value("0")
    ui.click("#setid")
    assert "last delivered id is now 0-0, entries read 0." in ui.message()
    group = r.xinfo_groups("orders")[0]
    assert group["last-delivered-id"] == b"0-0" and group["lag"] == STREAM_ENTRIES
    Select(ui.find("#setid-target")).select_by_value("id")
    ui.find("#setid-to").send_keys(all_ids[9])
    ui.click("#setid")
    assert r.xinfo_groups("orders")[0]["last-delivered-id"] == all_ids[9].encode()

    # Reset to a time: the group's last id is the last entry before it, its
    # entries-read the number of entries before it (so its lag is exact), and it
    # next reads the first entry at or after it.
    ms = int(all_ids[20].split("-")[0])
    when = datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)
    Select(ui.find("#setid-target")).select_by_value("time")
    ui.find("#setid-to").send_keys(when.isoformat(timespec="milliseconds").replace("+00:00", "Z"))
    ui.click("#setid")
    before = [i for i in all_ids if int(i.split("-")[0]) < ms]
    group = r.xinfo_groups("orders")[0]
    assert group["last-delivered-id"] == (before[-1].encode() if before else b"0-0")
    assert (group["entries-read"], group["lag"]) == (len(before), STREAM_ENTRIES - len(before))
    first_at_or_after = next(i for i in all_ids if int(i.split("-")[0]) >= ms)
    delivered = r.xreadgroup("billing", "worker-9", {"orders": ">"}, count=1)
    assert delivered[0][1][0][0] == first_at_or_after.encode()

    ui.log_out()
    ui.open("/streams")
    assert ui.path() == "/login"


def test_an_operator_dead_letters_a_pending_entry_and_replays_it(ui, console, shots):
    r = console.redis
    r.delete("orders-dlq")
    ui.log_in(*ADMIN)
    ui.open("/group?key=orders&group=billing")
    assert ui.find("#time-lag") and ui.all("svg.chart")
    assert not ui.all("#dead-letter")          # no policy yet: FATAL would dead-letter nothing
    ui.find("#policy-max").send_keys("3")
    ui.find("#policy-dlq").send_keys("orders-dlq")
    ui.click("#set-policy")
    assert ui.message() == "Entries delivered 3 times now go to orders-dlq."

    target = pending_ids(r)[0]
    original = r.xrange("orders", target, target)[0][1]
    ui.find(f'#pending input[value="{target.decode()}"]').click()
    ui.click("#dead-letter")
    assert ui.message() == "Dead-lettered 1 entries."
    assert target not in pending_ids(r)
    [(dead_id, dead)] = r.xrange("orders-dlq")
    assert (dead[b"dlq-source"], dead[b"dlq-id"]) == (b"orders", target)
    assert target.decode() in ui.find("#dead-letters").text
    ui.driver.execute_script("document.getElementById('dead-letter-policy').scrollIntoView()")
    ui.driver.save_screenshot(str(shots / "group-dead-letters.png"))

    last_before = r.xinfo_stream("orders")["last-generated-id"]
    ui.find(f'#dead-letters input[value="{dead_id.decode()}"]').click()
    ui.click("#replay")
    assert f"{dead_id.decode()} -> orders" in ui.message()
    assert r.xlen("orders-dlq") == 0
    [(_, fields)] = r.xrange("orders", f"({last_before.decode()}", "+")
    assert fields == original
    ui.log_out()


def test_a_read_only_user_sees_no_action_and_its_forged_one_is_refused(ui, console, shots):
    r = console.redis
    r.delete("orders-dlq")
    r.execute_command("STREAMDB.GROUP", "SET", "orders", "billing", "MAXDELIVERIES", "2", "DEADLETTER", "orders-dlq")
    r.execute_command("XNACK", "orders", "billing", "FATAL", "IDS", "1", pending_ids(r)[0])
    ui.log_in(*READER)
    ui.open("/group?key=orders&group=billing")
    assert len(ui.all("#pending tr")) == 8
    assert ui.find("#time-lag") and len(ui.all("#dead-letters tr")) == 2     # it sees them
    for action in ("#pending-form", "#setid-form", "#ack", ".delconsumer", "input[type=checkbox]",
                   "#nack", "#dead-letter", "#policy-form", "#replay", "#dead-letter-form"):
        assert not ui.all(action)
    ui.driver.save_screenshot(str(shots / "group-read-only.png"))
    # Forge the ack form into the reader's own page (its CSRF token is valid):
    # the server's ACL refuses the XACK.
    before = pending_ids(console.redis)
    ui.driver.execute_script(
        "const f = document.createElement('form'); f.method = 'post'; f.action = location.href;"
        "for (const [n, v] of [['csrf', document.querySelector('input[name=csrf]').value],"
        "                      ['action', 'ack'], ['id', arguments[0]]]) {"
        "  const i = document.createElement('input'); i.type = 'hidden'; i.name = n; i.value = v;"
        "  f.appendChild(i); }"
        "document.body.appendChild(f); f.submit();", before[0].decode())
    wait_until(lambda: ui.all(".msg"), what="the refused action's message")
    assert "NOPERM" in ui.message()
    assert pending_ids(console.redis) == before
    ui.log_out()
