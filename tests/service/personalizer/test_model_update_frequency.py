"""``modelUpdateFrequency`` of a loop's service configuration is its policy's
``model_update_interval`` (docs/personalizer.md, "Service configuration"): the default
loop's rewards wait as deltas until a fold, ``PT0S`` updates the model at once again,
an omitted field keeps the interval and a bad one is a 400 naming it."""

from __future__ import annotations

from typing import Any

import pytest

from service.personalizer.loops import DEFAULT_LOOP
from service.usecases.events import DELTA_PREFIX
from tests.service.conftest import running
from tests.service.personalizer.test_learning import personalizer_body, storefront_traffic

pytestmark = pytest.mark.anyio
CONFIG = "/personalizer/configurations/service"


@pytest.mark.parametrize("backend", ["embedded"])
async def test_model_update_frequency_is_the_loops_fold_interval(make_settings: Any) -> None:
    settings = make_settings(personalizer_loop=True, fold_check_seconds=3600.0)
    headers = {"Ocp-Apim-Subscription-Key": settings.api_keys[0]}
    async with running(settings) as (app, http, _):
        config = (await http.get(CONFIG, headers=headers)).json()
        assert config["modelUpdateFrequency"] == "PT1S"  # the default loop folds each second
        default = (await http.get(f"/policies/{DEFAULT_LOOP}")).json()
        assert default["model_update_interval"] == 1.0
        put = await http.put(
            CONFIG, json={**config, "modelUpdateFrequency": "PT30M"}, headers=headers
        )
        assert put.status_code == 200, put.text
        assert put.json()["modelUpdateFrequency"] == "PT30M"
        policy = (await http.get(f"/policies/{DEFAULT_LOOP}")).json()
        assert policy["model_update_interval"] == 1800.0

        rounds, _ = storefront_traffic(seed=4)
        for r in rounds[:5]:
            ranked = await http.post(
                "/personalizer/v1.0/rank", json=personalizer_body(r), headers=headers
            )
            assert ranked.status_code == 201, ranked.text
            rewarded = await http.post(
                f"/personalizer/v1.0/events/{ranked.json()['eventId']}/reward",
                json={"value": 1.0},
                headers=headers,
            )
            assert rewarded.status_code == 204, rewarded.text
        store = app.state.use_cases.store
        assert len(await store.keys(DEFAULT_LOOP, [DELTA_PREFIX])) == 5
        assert await app.state.use_cases.folds.fold(DEFAULT_LOOP) == 5

        kept = (await http.get(CONFIG, headers=headers)).json()
        without = {k: v for k, v in kept.items() if k != "modelUpdateFrequency"}
        assert (await http.put(CONFIG, json=without, headers=headers)).json()[
            "modelUpdateFrequency"
        ] == "PT30M"
        for bad in ("P1M", "PT25H", "soon"):
            refused = await http.put(
                CONFIG, json={**kept, "modelUpdateFrequency": bad}, headers=headers
            )
            assert refused.status_code == 400, refused.text
            assert "modelUpdateFrequency" in refused.text
        immediate = await http.put(
            CONFIG, json={**kept, "modelUpdateFrequency": "PT0S"}, headers=headers
        )
        assert immediate.json()["modelUpdateFrequency"] == "PT0S"
        assert (await http.get(f"/policies/{DEFAULT_LOOP}")).json()["model_update_interval"] is None
