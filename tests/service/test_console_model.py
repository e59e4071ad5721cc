"""The console's model page (docs/console.md, "Model") in process: the properties are the
API's; the exported file and snapshot, uploaded after a confirmed reset, bring back what
was learned; a reset without its confirmation, a file that is no model and a snapshot
that is no JSON show the error beside the field and change nothing; a read-only key and
a missing token change nothing; a missing policy is the 404 page."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.service.conftest import POLICY, running
from tests.service.console_client import console_client, csrf_of, sign_in

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("backend", ["embedded"])]
READONLY_KEY = "read-only-key-0123"


async def _learned(http: Any) -> str:
    """The learned state, as the API's snapshot holds it."""
    snapshot = (await http.get("/policies/p/snapshot")).json()
    return str(snapshot["data"])


async def test_export_reset_and_import_the_model_and_a_snapshot(make_settings: Any) -> None:
    settings = make_settings(console_readonly_keys=[READONLY_KEY])
    async with running(settings) as (app, http, _), console_client(app) as browser:
        assert (await http.put("/policies/p", json=POLICY)).status_code == 200
        for i in range(12):
            decision = (
                await http.post("/recommend", json={"policy": "p", "context": [1.0, i / 12, 0.5]})
            ).json()
            await http.post("/reward", json={"event_id": decision["event_id"], "reward": 1.0})
        learned = await _learned(http)
        await sign_in(browser)
        page = await browser.get("/console/policies/p/model")
        assert page.status_code == 200
        created = (await http.get("/policies/p/model/properties")).json()["created_at"]
        shown = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(created))
        assert f'id="created-at">{shown}<' in page.text
        token = csrf_of(page.text)

        model = await browser.get("/console/policies/p/model/file")
        assert model.status_code == 200 and "attachment" in model.headers["content-disposition"]
        snapshot = await browser.get("/console/policies/p/model/snapshot")
        assert snapshot.status_code == 200 and snapshot.json()["policy"] == "p"

        unconfirmed = await browser.post(
            "/console/policies/p/model/reset", data={"csrf_token": token}
        )
        assert unconfirmed.status_code == 422 and 'id="confirm-error"' in unconfirmed.text
        async with console_client(app) as readonly:
            await sign_in(readonly, READONLY_KEY)
            seen = await readonly.get("/console/policies/p/model")
            assert seen.status_code == 200 and 'id="reset-form"' not in seen.text
            refused = await readonly.post(
                "/console/policies/p/model/reset",
                data={"csrf_token": csrf_of(seen.text), "confirm": "on"},
            )
            assert refused.status_code == 403
        no_token = await browser.post("/console/policies/p/model/reset", data={"confirm": "on"})
        assert no_token.status_code == 403
        not_a_model = await browser.post(
            "/console/policies/p/model/import",
            data={"csrf_token": token},
            files={"model_file": ("x.model", b"not a model", "application/octet-stream")},
        )
        assert not_a_model.status_code == 422 and 'id="model_file-error"' in not_a_model.text
        assert "not a usable model file" in not_a_model.text
        not_json = await browser.post(
            "/console/policies/p/model/snapshot",
            data={"csrf_token": token},
            files={"snapshot_file": ("s.json", b"[", "application/json")},
        )
        assert not_json.status_code == 422 and 'id="snapshot_file-error"' in not_json.text
        assert await _learned(http) == learned

        reset = await browser.post(
            "/console/policies/p/model/reset", data={"csrf_token": token, "confirm": "on"}
        )
        assert reset.status_code == 303 and reset.headers["location"].endswith("done=reset")
        prior = await _learned(http)
        assert prior != learned
        imported = await browser.post(
            "/console/policies/p/model/import",
            data={"csrf_token": token},
            files={"model_file": ("p.model", model.content, "application/octet-stream")},
        )
        assert imported.status_code == 303, imported.text
        assert await _learned(http) == learned

        await browser.post(
            "/console/policies/p/model/reset", data={"csrf_token": token, "confirm": "on"}
        )
        assert await _learned(http) == prior
        restored = await browser.post(
            "/console/policies/p/model/snapshot",
            data={"csrf_token": token},
            files={"snapshot_file": ("p.json", snapshot.content, "application/json")},
        )
        assert restored.status_code == 303, restored.text
        assert await _learned(http) == learned
        flash = await browser.get(restored.headers["location"])
        assert 'data-done="restored"' in flash.text

        assert (await browser.get("/console/policies/nope/model")).status_code == 404
        assert (await browser.get("/console/policies/nope/model/file")).status_code == 404


async def test_the_upload_forms_take_model_files_beyond_the_body_limit(make_settings: Any) -> None:
    """The console's model upload has ``max_model_bytes``, as ``PUT .../model`` has; its
    other forms keep ``max_body_bytes``."""
    settings = make_settings(max_body_bytes=500, max_model_bytes=100_000)
    async with running(settings) as (app, http, _), console_client(app) as browser:
        assert (await http.put("/policies/p", json=POLICY)).status_code == 200
        model = (await http.get("/policies/p/model")).content
        assert 500 < len(model) < 90_000
        await sign_in(browser)
        token = csrf_of((await browser.get("/console/policies/p/model")).text)
        upload = {"data": {"csrf_token": token}}
        imported = await browser.post(
            "/console/policies/p/model/import",
            files={"model_file": ("p.model", model, "application/octet-stream")},
            **upload,
        )
        assert imported.status_code == 303, imported.text
        too_big = await browser.post(
            "/console/policies/p/model/import",
            files={"model_file": ("p.model", model + b"\0" * 100_000, "application/octet-stream")},
            **upload,
        )
        assert too_big.status_code == 413
        padded = await browser.post(
            "/console/policies/p/model/reset", data={"csrf_token": token, "pad": "x" * 1000}
        )
        assert padded.status_code == 413
