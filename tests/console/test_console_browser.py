"""The console in a real browser: Playwright for Python driving Debian's Chromium
(launched by its path, installed by ``tests/tools.py`` when missing) against a real ``bandit serve`` on the session's Redis and a
PostgreSQL schema of its own, with an API key and a read-only key; the traffic is sent
through the API. Screenshots of the pages go to docs/console/ (docs/console.md)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest
import redis
from playwright.sync_api import Browser, Locator, Page, expect, sync_playwright

from bandit_core.storefront import Storefront
from service.storage.sql_log import SqlEventLog
from tests.databases import postgres_schema
from tests.servers import wait_until_serving
from tests.tools import system_tool

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(__name__)]

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "docs" / "console"
API_KEY = "console-test-key"
READONLY_KEY = "console-readonly-key"
POLICY = "storefront"
ARMS = ["shoes", "hats", "bags"]
# the reward each arm earns: a fixed value, so the log's mean is known exactly
ARM_REWARD = {"shoes": 1.0, "hats": 0.25, "bags": 0.0}
DECISIONS = 40
SHOP = "shop"  # a shared model over the storefront simulation's JSON features
SHOP_ROUNDS = 60
SHOP_SPEC = {
    "algorithm": "hybrid_linucb",
    "params": {"alpha": 0.0, "context_dim": 0},
    "features": {"bits": 8, "interactions": [["user", "item"]]},
    "epsilon": 0.2,
}
LOOP = "apprentice-loop"  # a Personalizer loop in Apprentice mode
LOOP_BASE = f"/loops/{LOOP}/personalizer/v1.1-preview.3"
LOOP_RANKS = 20


@dataclass(frozen=True)
class Served:
    """A running ``bandit serve`` with traffic logged: its URL, the event ids served with
    their arm and reward, and the mean of the rewards sent."""

    base: str
    events: dict[str, tuple[str, float]]
    reward_mean: float
    created_at: float
    latencies: list[tuple[float, int]]  # each logged decision's time and latency (µs)
    # the log's IPS estimates of the baseline's and uniform random's mean reward
    ips: tuple[float, float]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _send_traffic(base: str) -> tuple[dict[str, tuple[str, float]], float]:
    headers = {"Authorization": f"Bearer {API_KEY}"}
    events: dict[str, tuple[str, float]] = {}
    with httpx.Client(base_url=base, timeout=10.0) as client:
        spec = {"algorithm": "linucb", "dimension": 2, "arms": ARMS}
        client.put(f"/policies/{POLICY}", json=spec, headers=headers).raise_for_status()
        for i in range(DECISIONS):
            request = {"policy": POLICY, "context": [1.0, (i % 5) / 5]}
            if i < len(ARMS):  # each arm served once at least: every arm has a logged row
                request["arms"] = [{"id": ARMS[i]}]
            answer = client.post("/recommend", json=request)
            answer.raise_for_status()
            event_id, arm = answer.json()["event_id"], answer.json()["arm_id"]
            value = ARM_REWARD[arm]
            sent = {"event_id": event_id, "reward": value}
            client.post("/reward", json=sent, headers=headers).raise_for_status()
            events[event_id] = (arm, value)
    values = [value for _, value in events.values()]
    return events, sum(values) / len(values)


def _send_shop_traffic(base: str) -> None:
    """The storefront simulation's shoppers on a shared model, each context with the
    request's time (a timestamp, which the features page flags), and a Personalizer loop
    ranking the same shoppers in Apprentice mode."""
    headers = {"Authorization": f"Bearer {API_KEY}"}
    shop = Storefront(catalog_size=20, offered=5)
    rng = np.random.default_rng(7)
    with httpx.Client(base_url=base, timeout=10.0, headers=headers) as client:
        client.put(f"/policies/{SHOP}", json=SHOP_SPEC).raise_for_status()
        client.put(f"/policies/{LOOP}", json=SHOP_SPEC).raise_for_status()
        config = client.get(f"{LOOP_BASE}/configurations/service").json()
        config.pop("latestApprenticeModeMetrics", None)
        config["learningMode"] = "Apprentice"
        client.put(f"{LOOP_BASE}/configurations/service", json=config).raise_for_status()
        for i, round_ in enumerate(shop.rounds(SHOP_ROUNDS, None, rng)):
            context = {
                **round_.context,
                "request": {"at": f"2026-11-28T00:{i // 60:02d}:{i % 60:02d}Z"},
            }
            arms = [
                {"id": a, "features": f}
                for a, f in zip(round_.item_ids, round_.actions, strict=True)
            ]
            answer = client.post(
                "/recommend", json={"policy": SHOP, "context": context, "arms": arms}
            )
            answer.raise_for_status()
            chosen = round_.item_ids.index(answer.json()["arm_id"])
            click = float(rng.random() < round_.mu[chosen])
            client.post(
                "/reward", json={"event_id": answer.json()["event_id"], "reward": click}
            ).raise_for_status()
            if i < LOOP_RANKS:
                actions = [
                    {"id": a, "features": [f]}
                    for a, f in zip(round_.item_ids, round_.actions, strict=True)
                ]
                ranked = client.post(
                    f"{LOOP_BASE}/rank",
                    json={"contextFeatures": [round_.context], "actions": actions},
                )
                ranked.raise_for_status()
                reward = {"value": float(rng.random() < round_.mu[0])}  # the baseline's click
                client.post(
                    f"{LOOP_BASE}/events/{ranked.json()['eventId']}/reward", json=reward
                ).raise_for_status()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[Served]:
    redis.Redis.from_url(redis_url).flushdb()
    directory = tmp_path_factory.mktemp("console")
    port = _free_port()
    with postgres_schema() as database_url:
        env = {k: v for k, v in os.environ.items() if not k.startswith("BANDIT_")}
        env.update(
            PYTHONPATH=str(ROOT),
            BANDIT_REDIS_URL=redis_url,
            BANDIT_DATABASE_URL=database_url,
            BANDIT_API_KEYS=API_KEY,
            BANDIT_CONSOLE_READONLY_KEYS=READONLY_KEY,
            BANDIT_DATA_DIR=str(directory),
            BANDIT_DEMO_POLICY="false",
            BANDIT_PERSONALIZER_LOOP="false",
            BANDIT_SNAPSHOT_INTERVAL_SECONDS="0",
            BANDIT_LOG_FLUSH_SECONDS="0.05",
        )
        cmd = [sys.executable, "-m", "service.cli", "serve", "--port", str(port)]
        proc = subprocess.Popen(cmd, cwd=directory, env=env)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_until_serving(proc, f"{base}/readyz", timeout=60)
            created_at = time.time()
            events, mean = _send_traffic(base)
            _send_shop_traffic(base)
            _wait_logged(database_url, POLICY, len(events))
            _wait_logged(database_url, SHOP, SHOP_ROUNDS)
            _wait_logged(database_url, LOOP, LOOP_RANKS)
            yield Served(
                base,
                events,
                mean,
                created_at,
                _latencies(database_url, POLICY),
                _ips_estimates(database_url, POLICY),
            )
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def _wait_logged(database_url: str, policy: str, rewards: int, timeout: float = 30.0) -> None:
    """Until the event log holds every reward sent to ``policy`` (the writer batches
    them)."""
    event_log = SqlEventLog(database_url)
    try:
        deadline = time.monotonic() + timeout
        while event_log.count(policy)[1] < rewards:
            assert time.monotonic() < deadline, f"the log lacks rewards after {timeout} s"
            time.sleep(0.1)
    finally:
        event_log.close()


def _latencies(database_url: str, policy: str) -> list[tuple[float, int]]:
    """The time and latency of each decision of ``policy`` in the event log."""
    event_log = SqlEventLog(database_url)
    try:
        logged = event_log.recent_decisions(policy, 10 * DECISIONS)
    finally:
        event_log.close()
    assert all(d.latency_us is not None for d in logged)
    return [(d.created_at, d.latency_us) for d in logged if d.latency_us is not None]


def _ips_estimates(database_url: str, policy: str) -> tuple[float, float]:
    """The IPS estimates of the baseline's (the first candidate's) and uniform random's
    mean reward over the rewarded decisions of ``policy`` in the event log:
    ``Σ r·1{a = first}/p / n`` and ``Σ r/(K p) / n``."""
    event_log = SqlEventLog(database_url)
    try:
        logged = [(e.decision, e.reward) for e in event_log.iter_events(policy)]
    finally:
        event_log.close()
    baseline, uniform = [], []
    for d, r in logged:
        assert r is not None and isinstance(d.candidates, list)
        first = d.candidates[0]["id"]
        baseline.append(r.value * (d.arm_id == first) / d.propensity)
        uniform.append(r.value / (len(d.candidates) * d.propensity))
    return sum(baseline) / len(baseline), sum(uniform) / len(uniform)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=system_tool("chromium"), args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    try:
        yield context.new_page()
    finally:
        context.close()


def sign_in(page: Page, base: str, key: str = API_KEY) -> None:
    page.goto(f"{base}/console/")
    expect(page).to_have_url(f"{base}/console/signin?next=/console/")
    page.fill("#key", key)
    page.click("button[type=submit]")


def shot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def test_signing_in_shows_the_policies_with_their_logged_activity(
    served: Served, page: Page
) -> None:
    sign_in(page, served.base)
    expect(page).to_have_url(f"{served.base}/console/")
    row = page.locator(f"#policies tr[data-policy={POLICY}]")
    expect(row).to_contain_text("linucb")
    expect(row).to_contain_text(f"{served.reward_mean:.4f} ({DECISIONS} rewards)")
    expect(row).to_contain_text(time.strftime("%Y-%m-%d", time.gmtime(served.created_at)))
    expect(page.locator("#health")).to_contain_text("postgresql")
    cookie = next(c for c in page.context.cookies() if c["name"] == "bandit_console")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["expires"] > 0
    shot(page, "home")


def test_the_policy_page_charts_the_logged_rewards(served: Served, page: Page) -> None:
    sign_in(page, served.base)
    page.click(f"text={POLICY}")
    expect(page.locator("#reward-mean")).to_have_text(f"{served.reward_mean:.4f}")
    # the points (each a bucket's mean over its count of rewards) average to the log's
    # mean; the baseline's and random's to their IPS estimates from the logged decisions
    for name, expected in (
        ("policy", served.reward_mean),
        ("baseline (IPS)", served.ips[0]),
        ("random (IPS)", served.ips[1]),
    ):
        series = page.locator(f'#reward-chart g.series[data-name="{name}"]')
        points = series.locator("circle.point")
        expect(points.first).to_be_visible()
        values = [float(v) for v in points.evaluate_all("ps => ps.map(p => p.dataset.value)")]
        counts = [int(c) for c in points.evaluate_all("ps => ps.map(p => p.dataset.count)")]
        assert sum(counts) == DECISIONS
        weighted = sum(v * c for v, c in zip(values, counts)) / sum(counts)
        assert abs(weighted - expected) < 1e-5, (name, weighted, expected)
        # each line with its 95% interval: a band in the line's colour, and at each
        # point a whisker through it
        colour = series.locator("polyline").get_attribute("stroke")
        band = page.locator(f'#reward-chart polygon.band[data-name="{name}"]')
        expect(band).to_have_attribute("style", f"fill: {colour}")
        through = series.locator("line.whisker").evaluate_all(
            "ws => ws.map(w => [+w.getAttribute('y1'), +w.getAttribute('y2')])"
        )
        heights = points.evaluate_all("ps => ps.map(p => +p.getAttribute('cy'))")
        assert len(through) == len(heights)
        assert all(min(w) <= y <= max(w) for w, y in zip(through, heights))
    expect(page.locator("#shares")).to_contain_text("%")
    expect(page.locator("#settings")).to_contain_text('"algorithm": "linucb"')
    _assert_latency_chart_is_the_logged_latencies(page, served.latencies)
    shot(page, "policy")


def _assert_latency_chart_is_the_logged_latencies(
    page: Page, latencies: list[tuple[float, int]]
) -> None:
    """The latency chart's p50 and p99 points (1-minute buckets) are the nearest-rank
    percentiles of the logged latencies of each minute within one 9% bin."""
    by_minute: dict[float, list[int]] = {}
    for created_at, latency_us in latencies:
        by_minute.setdefault(created_at // 60, []).append(latency_us)
    for name, percent in (("p50", 50), ("p99", 99)):
        points = page.locator(f"#latency-chart g.series[data-name={name}] circle.point")
        expect(points.first).to_be_visible()
        values = [float(v) for v in points.evaluate_all("ps => ps.map(p => p.dataset.value)")]
        counts = [int(c) for c in points.evaluate_all("ps => ps.map(p => p.dataset.count)")]
        assert counts == [len(v) for _, v in sorted(by_minute.items())]
        for got, (_, minute) in zip(values, sorted(by_minute.items()), strict=True):
            exact_ms = sorted(minute)[-(-percent * len(minute) // 100) - 1] / 1000
            # data-value has 6 decimals: 1 ns, far below a bin at these latencies
            assert exact_ms * 2 ** (-1 / 8) - 1e-6 <= got <= exact_ms * 2 ** (2 / 8) + 1e-6


def test_the_event_page_shows_the_served_arm_and_its_reward(served: Served, page: Page) -> None:
    sign_in(page, served.base)
    event_id, (arm, value) = list(served.events.items())[-1]  # one ranked of all arms
    page.fill("#event-search", event_id)
    page.click("form.search button")
    expect(page).to_have_url(f"{served.base}/console/events/{event_id}")
    expect(page.locator("#chosen-arm")).to_have_text(arm)
    expect(page.locator("#rewards .reward-value")).to_have_text(f"{value:.4f}")
    expect(page.locator("#candidates tr.chosen")).to_contain_text(arm)
    shot(page, "event")
    page.goto(f"{served.base}/console/events/no-such-event")
    expect(page.locator("h1")).to_contain_text("404")


def test_a_wrong_key_is_refused(served: Served, page: Page) -> None:
    sign_in(page, served.base, key="not-a-key")
    expect(page.locator("#key-error")).to_contain_text("not an API key")
    page.goto(f"{served.base}/console/policies/{POLICY}")
    expect(page).to_have_url(f"{served.base}/console/signin?next=/console/policies/{POLICY}")


def test_a_post_without_the_csrf_token_is_refused_and_changes_nothing(
    served: Served, page: Page
) -> None:
    sign_in(page, served.base)
    page.goto(f"{served.base}/console/policies/{POLICY}/arms")
    page.evaluate("document.querySelector('#retire-form input[name=csrf_token]').remove()")
    page.fill("#arm", "shoes")
    page.click("#retire-form button")
    expect(page.locator("h1")).to_contain_text("403")
    expect(page.locator("#error-message")).to_contain_text("CSRF")
    page.goto(f"{served.base}/console/policies/{POLICY}/arms")
    expect(page.locator("#arms tr[data-arm=shoes]")).to_contain_text("registered")


def test_a_bad_form_value_shows_the_error_beside_the_field(served: Served, page: Page) -> None:
    sign_in(page, served.base)
    page.goto(f"{served.base}/console/policies/{POLICY}/arms")
    page.fill("#arm", "")
    page.click("#retire-form button")
    expect(page.locator("#arm-error")).to_contain_text("at least 1")
    page.fill("#arm", "no-such-arm")
    page.click("#retire-form button")
    expect(page.locator("#arm-error")).to_contain_text("no-such-arm")
    expect(page.locator("#arms tr[data-arm]")).to_have_count(len(ARMS))
    shot(page, "arms")


def test_a_read_only_key_sees_the_pages_and_cannot_retire(served: Served, page: Page) -> None:
    sign_in(page, served.base, key=READONLY_KEY)
    page.goto(f"{served.base}/console/policies/{POLICY}/arms")
    expect(page.locator("#arms tr[data-arm]")).to_have_count(len(ARMS))
    expect(page.locator("#retire-form")).to_have_count(0)
    token = page.locator("header input[name=csrf_token]").get_attribute("value")
    assert token
    answer = page.context.request.post(
        f"{served.base}/console/policies/{POLICY}/arms/retire",
        form={"arm": "hats", "csrf_token": token},
    )
    assert answer.status == 403 and "read-only" in answer.text()
    page.reload()
    expect(page.locator("#arms tr[data-arm=hats]")).to_contain_text("registered")


def test_retiring_an_arm_and_signing_out(served: Served, page: Page) -> None:
    sign_in(page, served.base)
    page.goto(f"{served.base}/console/policies/{POLICY}/arms")
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("#arms tr[data-arm=bags] form button").click()
    expect(page.locator("#retired")).to_have_text("Retired bags.")
    expect(page.locator("#arms tr[data-arm=bags]")).to_contain_text("unregistered")
    page.click("header button:has-text('Sign out')")
    expect(page).to_have_url(f"{served.base}/console/signin")
    page.goto(f"{served.base}/console/")
    expect(page).to_have_url(f"{served.base}/console/signin?next=/console/")


def _reload_until_shown(page: Page, locator: Locator, text: str, timeout: float = 30.0) -> None:
    """Reload until ``locator`` shows ``text``: the audit trail is read from the event
    log, which the writer fills within BANDIT_LOG_FLUSH_SECONDS."""
    deadline = time.monotonic() + timeout
    while text not in ((locator.text_content() if locator.count() else "") or ""):
        assert time.monotonic() < deadline, f"{text!r} not shown in {timeout} s"
        time.sleep(0.1)
        page.reload()


def _settings_text(page: Page) -> dict[str, object]:
    loaded: dict[str, object] = json.loads(page.locator("#settings").input_value())
    return loaded


def test_settings_change_through_a_preview_and_roll_back(served: Served, page: Page) -> None:
    sign_in(page, served.base)
    page.goto(f"{served.base}/console/policies/{POLICY}/settings")
    settings = _settings_text(page)
    epsilon = settings["epsilon"]
    page.fill("#settings", json.dumps({**settings, "epsilon": 2}))
    page.click("#preview-button")
    expect(page.locator("#settings-error")).to_contain_text("epsilon: Input should be less")
    page.goto(f"{served.base}/console/policies/{POLICY}/settings")
    assert _settings_text(page)["epsilon"] == epsilon  # the bad value changed nothing

    page.fill("#settings", json.dumps({**settings, "epsilon": 0.25}))
    page.click("#preview-button")
    expect(page.locator("#diff tr[data-setting]")).to_have_count(1)
    expect(page.locator("#diff tr[data-setting=epsilon]")).to_contain_text("0.25")
    page.click("#save")
    expect(page.locator("#saved")).to_be_visible()
    assert _settings_text(page)["epsilon"] == 0.25
    newest = page.locator("#history tr[data-action=update]").first
    _reload_until_shown(page, newest, '"epsilon": 0.25')
    expect(newest).to_contain_text("key:")  # who: the signed-in key's hash
    shot(page, "settings")

    page.locator("#history tr[data-action=create] button").click()
    expect(page.locator("#diff tr[data-setting=epsilon]")).to_contain_text("0.25")
    page.click("#save")
    expect(page.locator("#saved")).to_be_visible()
    assert _settings_text(page)["epsilon"] == epsilon
    headers = {"Authorization": f"Bearer {API_KEY}"}
    served_settings = httpx.get(f"{served.base}/policies/{POLICY}", headers=headers).json()
    assert served_settings["epsilon"] == epsilon


def test_an_evaluation_is_created_waited_for_applied_and_rolled_back(
    served: Served, page: Page
) -> None:
    sign_in(page, served.base)
    page.goto(f"{served.base}/console/policies/{POLICY}/settings")
    settings = _settings_text(page)
    candidate = {**settings, "epsilon": 0.3}
    page.goto(f"{served.base}/console/policies/{POLICY}/evaluations")
    expect(page.locator("#log-range")).to_contain_text("The log holds decisions from")
    page.fill("#name", "nightly")
    page.fill("#candidate-0-name", "wider")
    page.fill("#candidate-0-arguments", json.dumps({**candidate, "epsilon": 2}))
    page.click("#create-evaluation")
    expect(page.locator("#candidate-0-arguments-error")).to_contain_text("epsilon")
    page.fill("#candidate-0-arguments", json.dumps(candidate))
    page.click("#create-evaluation")
    # the page reloads itself while the evaluation runs
    expect(page.locator("#status")).to_have_text("succeeded", timeout=180_000)
    for name in ("Baseline", "Random", "wider"):
        for estimator in ("IPS", "SNIPS"):
            mark = page.locator(
                f"#estimate-chart g[data-candidate={name}][data-estimator={estimator}]"
            )
            low, value, high = (
                float(mark.get_attribute(a) or "nan")
                for a in ("data-low", "data-value", "data-high")
            )
            assert low <= value <= high
    wider = page.locator("#candidates tr[data-candidate=wider]")
    expect(wider.locator("li[data-setting=epsilon]")).to_contain_text("0.3")
    expect(wider.locator(".ess")).not_to_have_text("0.0")
    shot(page, "evaluation")

    page.once("dialog", lambda dialog: dialog.accept())
    wider.locator("button.apply").click()
    expect(page.locator("#applied")).to_contain_text("Applied wider")
    expect(page.locator("#status")).to_have_text("optimal_policy_applied")
    page.goto(f"{served.base}/console/policies/{POLICY}/settings")
    assert _settings_text(page)["epsilon"] == 0.3
    newest = page.locator("#history tbody tr").first
    _reload_until_shown(page, newest, '"epsilon": 0.3')
    page.locator("#history tbody tr").nth(1).locator("button").click()
    expect(page.locator("#diff tr[data-setting=epsilon]")).to_contain_text("0.3")
    page.click("#save")
    expect(page.locator("#saved")).to_be_visible()
    assert _settings_text(page)["epsilon"] == settings["epsilon"]


def test_feature_importance_ranks_the_storefront_features_and_flags_the_timestamp(
    served: Served, page: Page
) -> None:
    sign_in(page, served.base)
    page.goto(f"{served.base}/console/policies/{SHOP}/features")
    page.fill("#since", "yesterday")
    page.click("#create-job")
    expect(page.locator("#since-error")).to_be_visible()
    page.goto(f"{served.base}/console/policies/{SHOP}/features")
    page.fill("#name", "all of the log")
    page.click("#create-job")
    expect(page.locator("#status")).to_have_text("Succeeded", timeout=180_000)
    bars = page.locator("#importance-chart g.ranked")
    values = [float(v) for v in bars.evaluate_all("bs => bs.map(b => b.dataset.value)")]
    assert values == sorted(values, reverse=True) and values[0] == 1.0
    flagged = bars.evaluate_all(
        "bs => bs.filter(b => b.dataset.flagged == 'true').map(b => b.dataset.feature)"
    )
    assert flagged == ["request.at"]
    shot(page, "features")


def test_the_model_page_exports_and_asks_before_a_reset(served: Served, page: Page) -> None:
    sign_in(page, served.base)
    page.goto(f"{served.base}/console/policies/{SHOP}/model")
    expect(page.locator("#algorithm")).to_have_text("hybrid_linucb")
    with page.expect_download() as download:
        page.click("#export-model")
    assert Path(download.value.path()).stat().st_size > 0
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#reset-model")  # the confirmation not ticked: nothing is reset
    expect(page.locator("#confirm-error")).to_contain_text("tick the confirmation")
    headers = {"Authorization": f"Bearer {API_KEY}"}
    stats = httpx.get(f"{served.base}/policies/{SHOP}/stats", headers=headers).json()
    assert stats["decisions"] == SHOP_ROUNDS
    shot(page, "model")


def test_the_log_page_lists_the_partitions_and_asks_before_deleting(
    served: Served, page: Page
) -> None:
    sign_in(page, served.base)
    page.click("header a:has-text('Event log')")
    today = time.strftime("%Y%m%d", time.gmtime())
    expect(page.locator(f"#partitions tr[data-partition=decisions_p{today}]")).to_be_visible()
    row = page.locator(f"#log-policies tr[data-policy={SHOP}]")
    expect(row.locator(".retention")).to_have_text("keeps everything")
    row.locator("input[name=confirm]").fill("not the name")
    page.once("dialog", lambda dialog: dialog.accept())
    row.locator("button").click()
    expect(page.locator(".confirm-error")).to_contain_text("type the policy's name")
    expect(page.locator(f"#log-policies tr[data-policy={SHOP}] .first")).not_to_have_text("none")
    shot(page, "log")


def test_the_apprentice_page_shows_the_matching_ratio_and_switches_to_online(
    served: Served, page: Page
) -> None:
    sign_in(page, served.base)
    page.goto(f"{served.base}/console/policies/{LOOP}/apprentice")
    expect(page.locator("#mode")).to_have_text("Apprentice")
    expect(page.locator("#matching-ratio")).to_contain_text("%")
    expect(page.locator("#events")).to_have_text(str(LOOP_RANKS))
    shot(page, "apprentice")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#switch-online")
    expect(page.locator("#switched")).to_be_visible()
    expect(page.locator("#mode")).to_have_text("Online")
    headers = {"Authorization": f"Bearer {API_KEY}"}
    config = httpx.get(f"{served.base}{LOOP_BASE}/configurations/service", headers=headers)
    assert config.json()["learningMode"] == "Online"
