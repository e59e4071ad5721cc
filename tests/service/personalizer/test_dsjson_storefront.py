"""A loop's log taken out and brought back in (docs/personalizer.md, "Importing and
exporting logs"): a loop on the embedded default learns from simulated storefront traffic
(bandit_core/storefront.py) through Personalizer's routes, its log is exported as DSJSON
(``bandit export-log``), imported into a fresh loop on Redis + PostgreSQL (``bandit
import-log``) and replayed there (``bandit rebuild``). The rebuilt model equals the one
that produced the log, and decides as well on the storefront."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis

from bandit_core import policy_from_bytes
from bandit_core.state import unpack
from bandit_core.storefront import Storefront, StorefrontRound
from service.cli import main
from service.settings import get_settings
from service.storage.sql_log import SqlEventLog
from tests.databases import database
from tests.service.conftest import running
from tests.service.personalizer.test_evaluations import logged, serve
from tests.service.personalizer.test_learning import personalizer_body
from tests.service.personalizer.test_multislot import immediate_updates

pytestmark = pytest.mark.anyio

LOOP = "personalizer"
TRAIN, EVALUATE = 2000, 2000


def model_state(data: bytes) -> dict[str, Any]:
    """Each part of the engine inside a model file (service/usecases/models.py) as its
    arrays and scalars, by ``part/name``; the engine's RNG is left out (the original's
    has drawn for every rank, the rebuilt one's starts from the seed)."""
    _, _, arrays = unpack(data, "bandit_model")
    policy = policy_from_bytes(arrays["engine"].tobytes())
    state: dict[str, Any] = {}
    for part, blob in policy.export_parts(policy.part_names()).items():
        _, meta, values = unpack(blob)
        state.update({f"{part}/{k}": v for k, v in {**meta, **values}.items()})
    return state


async def decisions(http: Any, rounds: list[StorefrontRound]) -> tuple[list[int], list[int]]:
    """Per round, the offered position served (``rewardActionId``, exploring) and the one
    the model exploits (the ranking's most probable); no reward is sent, so the model
    learns nothing from these rounds (the default reward comes after the loop's 10
    minute wait)."""
    served, greedy = [], []
    for r in rounds:
        ranked = await http.post("/personalizer/v1.0/rank", json=personalizer_body(r))
        assert ranked.status_code == 201, ranked.text
        body = ranked.json()
        served.append(r.item_ids.index(body["rewardActionId"]))
        best = max(body["ranking"], key=lambda a: a["probability"])
        greedy.append(r.item_ids.index(best["id"]))
    return served, greedy


def click_rate(rounds: list[StorefrontRound], draws: np.ndarray, chosen: list[int]) -> float:
    """The share of rounds whose chosen item is clicked, with the same draw per round
    whichever policy chose."""
    return float(np.mean([d < r.mu[k] for r, d, k in zip(rounds, draws, chosen, strict=True)]))


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """Point the ``bandit`` commands run in this process at other ``BANDIT_*`` values."""

    def point(**env: str) -> None:
        for name, value in env.items():
            monkeypatch.setenv(f"BANDIT_{name}", value)
        get_settings.cache_clear()

    try:
        yield point
    finally:
        get_settings.cache_clear()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["embedded"])
async def test_a_rebuild_after_export_and_import_decides_as_the_model_that_logged(
    make_settings: Any, redis_url: str, tmp_path: Path, cli_env: Callable[..., None]
) -> None:
    """The original loop learns each reward before its next rank (``modelUpdateFrequency``
    PT0S) and the rebuild replays the same rewards in the same order on the same JSON
    featurized again, so the rebuilt model is the original's; both then rank the same
    held-out storefront rounds without learning from them."""
    rng = np.random.default_rng(21)
    rounds = list(Storefront().rounds(TRAIN + EVALUATE, replace_at=None, rng=rng))
    draws = rng.random(TRAIN + EVALUATE)
    train, evaluate = rounds[:TRAIN], rounds[TRAIN:]
    exported = tmp_path / "personalizer.json.gz"
    original_settings = make_settings(personalizer_loop=True)
    async with running(original_settings) as (app, http, _):
        await immediate_updates(http)  # learns each reward before the next rank
        clicks, _ = await serve(http, train, draws[:TRAIN])
        await logged(app, TRAIN)
        assert await asyncio.to_thread(app.state.use_cases.sink.flush, 10.0)
        config = app.state.use_cases.event_log.policies()[LOOP]
        original = (await http.get("/personalizer/v1.0/model")).content
        cli_env(DATABASE_URL=original_settings.log_url, DATA_DIR=str(original_settings.data_dir))
        export = ["export-log", "--format", "dsjson", "--loop", LOOP, "--output", str(exported)]
        assert await asyncio.to_thread(main, export) == 0
        served_original, greedy_original = await decisions(http, evaluate)

    redis.Redis.from_url(redis_url).flushdb()
    with database("postgresql", tmp_path) as url:
        # a fresh loop with the original's settings, its history imported and replayed
        fresh = str(tmp_path / "fresh")
        cli_env(DATABASE_URL=url, REDIS_URL=redis_url, DATA_DIR=fresh, RUN_MIGRATIONS="true")
        assert main(["partitions"]) == 0  # migrates
        log = SqlEventLog(url)
        log.upsert_policy(LOOP, config)
        log.close()
        imported = ["import-log", "--format", "dsjson", "--no-progress", "--loop", LOOP]
        assert main([*imported, str(exported)]) == 0
        # the command runs its own event loop: off this test's
        assert await asyncio.to_thread(main, ["rebuild", "--policy", LOOP]) == 0
        fresh_settings = make_settings(
            personalizer_loop=True,
            redis_url=redis_url,
            database_url=url,
            data_dir=fresh,
        )
        async with running(fresh_settings) as (_, http, _):
            rebuilt = (await http.get("/personalizer/v1.0/model")).content
            served_rebuilt, greedy_rebuilt = await decisions(http, evaluate)

    # the same rewards replayed in the order they were learned: the same model
    want, got = model_state(original), model_state(rebuilt)
    assert sorted(got) == sorted(want)
    assert want["shared/n"] == TRAIN and want["shared/reward_sum"] == sum(clicks)
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, rtol=0, atol=1e-9, err_msg=key)
    # so the same item exploited every round, and the same clicks
    assert greedy_rebuilt == greedy_original
    exploited = click_rate(evaluate, draws[TRAIN:], greedy_original)
    assert click_rate(evaluate, draws[TRAIN:], greedy_rebuilt) == exploited
    # the served items differ where either loop's RNG explored (each loop draws its own):
    # each rate has a binomial standard error sqrt(q (1 - q) / M) over the M rounds, their
    # difference at most sqrt(2) times that (the shared draws correlate them positively);
    # 3 of those is the tolerance
    original_rate = click_rate(evaluate, draws[TRAIN:], served_original)
    rebuilt_rate = click_rate(evaluate, draws[TRAIN:], served_rebuilt)
    se = math.sqrt(original_rate * (1 - original_rate) / EVALUATE)
    assert abs(rebuilt_rate - original_rate) <= 3 * math.sqrt(2) * se, (
        rebuilt_rate,
        original_rate,
    )
    # and both well above a uniformly random choice's expected rate on the same rounds
    uniform = float(np.mean([r.mu.mean() for r in evaluate]))
    for rate in (exploited, original_rate, rebuilt_rate):
        assert rate > uniform + 3 * se, (rate, uniform, se)
    largest = max(float(np.max(np.abs(np.subtract(got[k], v)))) for k, v in want.items())
    print(  # the figures docs/personalizer.md states (pytest -s shows them)
        f"\nstate: largest difference {largest:.3g}; click rates over {EVALUATE} rounds: "
        f"exploited {exploited:.4f}, served by the original {original_rate:.4f} and by the "
        f"rebuilt {rebuilt_rate:.4f}, uniform {uniform:.4f}, standard error {se:.4f}"
    )
