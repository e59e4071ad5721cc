"""Offline work on a real two-node Ray cluster on loopback (``tests.ray_cluster``, started
and removed here): every offline command and the service's evaluation and
feature-importance routes give, on Ray, exactly what the local engine gives; a node
killed mid-run is survived by Ray's retries with the same result; an actor whose worker
process is killed after a partition goes on from its checkpoint to the undisturbed
result; a running evaluation reports its events done and, deleted, has its actors
killed; a cluster stopped mid-evaluation fails it with a clear message, and the
evaluation runs again once the cluster is back. The commands run on Ray in a subprocess
(a driver whose cluster is gone is ended by Ray, which must not be the test process)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.api.app import LEARNING_SETTINGS
from service.cli import main
from service.cli.log_sources import LogSpec, load_log, partitions
from service.cli.replay import ReplayStream, replay_one
from service.schemas import PolicySpec
from service.storage.sql_log import SqlEventLog
from service.usecases.evaluation_jobs import importance_groups
from service.usecases.evaluation_streams import DecisionQuery, evaluate_on
from service.usecases.evaluations import Candidate, evaluate, load_decisions
from service.usecases.importance import scores_over_log_in_worker
from service.usecases.offline_engine import OfflineEngine
from tests.ray_cluster import RayCluster, command_line, descendants, require_ray
from tests.servers import ROOT
from tests.service.conftest import running
from tests.service.offline_results import untimed
from tests.service.test_estimate_partitions import respaced_copy
from tests.service.test_offline_dsjson import FEATURES, dsjson_lines, split_log
from tests.service.test_partition_streams import evaluation_plan, news_files

# a two-node Ray cluster per module, on one worker (two clusters of two nodes each, one
# per worker, took the two cores): the slow tier; a cluster's start on a loaded machine
# takes minutes
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800), pytest.mark.xdist_group(__name__)]

EVENTS = 300
WHOLE_LOG = {"start_time": "2020-01-01T00:00:00Z", "end_time": "2100-01-01T00:00:00Z"}
EPSILON_SETTING = {"name": "eps", "arguments": "--cb_explore_adf --epsilon 0.1"}


@pytest.fixture
def backend() -> str:
    """The embedded default only: the engine, not the state store, is under test."""
    return "embedded"


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    require_ray()
    ray_cluster = RayCluster(nodes=2, cpus=1)
    try:
        ray_cluster.start()
        yield ray_cluster
    finally:
        ray_cluster.destroy()


@pytest.fixture(scope="module")
def storefront_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = ROOT / "examples" / "event_log.py"
    spec = importlib.util.spec_from_file_location("event_log", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    log = tmp_path_factory.mktemp("storefront") / "events.sqlite3"
    assert asyncio.run(example.fill(f"sqlite:///{log}", EVENTS, 0, storefront=True)) == EVENTS
    return log


def _local(argv: list[str], out: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code = main([*argv, "--json", str(out), "--no-progress"])
    assert code == 0, capsys.readouterr().err
    return json.loads(out.read_text())


def _ray_argv(argv: list[str], out: Path, cluster: RayCluster) -> list[str]:
    """``argv`` writing its JSON to ``out``, on ``cluster``."""
    ray = ["--engine", "ray", "--ray-address", cluster.address]
    return [*argv, "--json", str(out), "--no-progress", *ray]


def _on_ray(argv: list[str], out: Path, cluster: RayCluster) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "service.cli", *_ray_argv(argv, out, cluster)]
    return subprocess.Popen(
        command, env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


# one driver for several commands: an interpreter's start, its imports and its connection
# to the cluster (ray.init once per process, service/usecases/offline_engine.py) paid once
DRIVER = """
import json, sys
from service.cli import main
for argv in json.loads(sys.argv[1]):
    if (code := main(argv)) != 0:
        sys.exit(f"{argv}: exit status {code}")
"""


def _all_on_ray(
    commands: dict[str, list[str]], tmp_path: Path, cluster: RayCluster
) -> subprocess.Popen[str]:
    """One driver process running ``commands`` on Ray one after another, each writing
    ``<name>-ray.json`` under ``tmp_path``."""
    argvs = [
        _ray_argv(argv, tmp_path / f"{name}-ray.json", cluster) for name, argv in commands.items()
    ]
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER, json.dumps(argvs)],
        env=cluster.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finished(proc: subprocess.Popen[str], out: Path) -> dict[str, Any]:
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    return json.loads(out.read_text())


COMPARE = ["compare", "--format", "news", "--policy", "linucb", "--policy", "lnucb_ta"]


def test_offline_commands_on_ray_equal_the_local_engine(
    cluster: RayCluster, storefront_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    days = respaced_copy(storefront_log, tmp_path / "days.sqlite3", 3 * 3600.0)
    *files, _ = news_files(tmp_path, [700, 500])  # a log of two files, a partition each
    parts, _ = split_log(tmp_path, dsjson_lines(240, 3))  # three DSJSON files
    dsjson = ["--format", "dsjson", "--data", str(parts), "--features", FEATURES]
    commands = {
        "estimate": [
            "estimate", "--format", "eventlog", "--data", days, "--log-policy", "shop",
            "--policy", "linucb", "--alpha", "0", "--bootstrap", "50",
        ],
        "compare": [*COMPARE, "--alpha", "0.1", "1", "--rounds", "100", "--seeds", "2", "--jobs", "1"],
        "replay": ["replay", "--format", "news", "--policy", "linucb", "--rounds", "100", "--seeds", "3"],
        "replay-files": [
            "replay", "--format", "news", "--data", *files, "--policy", "linucb", "--seeds", "2",
        ],
        "compare-files": [
            "compare", "--format", "news", "--data", *files, "--policy", "linucb",
            "--policy", "lnucb_ta", "--jobs", "1",
        ],
        "replay-days": [
            "replay", "--format", "eventlog", "--data", days, "--log-policy", "shop",
            "--policy", "linucb", "--alpha", "0.5", "--rejection", "--seeds", "2",
        ],
        "compare-days": [
            "compare", "--format", "eventlog", "--data", days, "--log-policy", "shop",
            "--policy", "linucb", "--policy", "hybrid_linucb", "--rounds", "20", "--jobs", "1",
        ],
        "replay-dsjson": ["replay", *dsjson, "--policy", "linucb", "--rejection", "--seeds", "2"],
        "estimate-dsjson": [
            "estimate", *dsjson, "--policy", "linucb", "--alpha", "0", "--bootstrap", "50",
        ],
        "evaluate": [
            "evaluate", "--data", f"sqlite:///{storefront_log}", "--log-policy", "shop",
            "--policy", "interactions=--cb_explore_adf --epsilon 0.2 -q ::",
            "--offline-experimentation",
        ],
    }  # fmt: skip
    driver = _all_on_ray(commands, tmp_path, cluster)
    results = {
        name: _local(argv, tmp_path / f"{name}.json", capsys) for name, argv in commands.items()
    }
    _, stderr = driver.communicate(timeout=600)
    assert driver.returncode == 0, stderr
    for name, local in results.items():
        on_ray = json.loads((tmp_path / f"{name}-ray.json").read_text())
        if name in ("compare", "compare-days", "compare-files", "estimate", "estimate-dsjson"):
            assert (local.pop("engine"), on_ray.pop("engine")) == ("local", "ray")
        assert untimed(on_ray) == untimed(local), name
        assert local.get("results") or local.get("per_seed") or local.get("estimates")
    assert json.loads((tmp_path / "estimate.json").read_text())["partitions"] == 38  # 300 x 3 h
    assert json.loads((tmp_path / "replay-files.json").read_text())["data"] == files


@pytest.mark.anyio
async def test_service_evaluations_and_feature_importance_on_ray(
    cluster: RayCluster, storefront_log: Path, tmp_path: Path, make_settings: Any
) -> None:
    log = tmp_path / "events.sqlite3"
    shutil.copy(storefront_log, log)
    url = f"sqlite:///{log}"
    settings = make_settings(database_url=url, offline_engine="ray", ray_address=cluster.address)
    async with running(settings) as (app, http, _):
        body = {
            "name": "on ray",
            **WHOLE_LOG,
            "policies": [EPSILON_SETTING],
            "offline_experimentation": True,
        }
        created = await http.post("/policies/shop/evaluations", json=body)
        assert created.status_code == 202, created.text
        evaluation_id = created.json()["evaluation_id"]
        record = await _finished_evaluation(app, evaluation_id)
        assert record.status == "succeeded", record.message
        assert record.result == _expected_evaluation(url, record)

        job = await http.put(
            "/policies/shop/feature-importances/j1", json={"since": 0, "until": 4e9}
        )
        assert job.status_code in (200, 201, 202), job.text
        deadline = time.monotonic() + 180
        while (view := (await http.get("/policies/shop/feature-importances/j1")).json())[
            "status"
        ] == "Running":
            assert time.monotonic() < deadline
            await asyncio.sleep(0.5)
        assert view["status"] == "Succeeded", view
        info = (await app.state.use_cases.admin.get_policy("shop")).model_dump_json()
        expected = scores_over_log_in_worker(url, info, 0, 4e9)
        assert view["feature_scores"] == [s.model_dump(mode="json") for s in expected.scores]
        assert expected.scores


async def _finished_evaluation(app: Any, evaluation_id: str, timeout: float = 240) -> Any:
    store = app.state.use_cases.evaluations.store
    deadline = time.monotonic() + timeout
    while (record := await asyncio.to_thread(store.get, "shop", evaluation_id)).status in (
        "pending",
        "running",
    ):
        assert time.monotonic() < deadline, record
        await asyncio.sleep(0.5)
    return record


def _expected_evaluation(url: str, record: Any) -> Any:
    """The local engine's result of ``record``'s request, as stored (JSON), with the
    feature importance an evaluation with offline experimentation adds."""
    event_log = SqlEventLog(url)
    try:
        decisions = load_decisions(event_log, "shop", record.start_time, record.end_time)
        candidates = [Candidate.from_json(c) for c in record.request["candidates"]]
        grid = [PolicySpec.model_validate(g) for g in record.request["grid"]]
        result = evaluate(decisions, candidates, grid, describe=LEARNING_SETTINGS.arguments)
        if record.request.get("policy_info") is not None:
            result["feature_importance"] = importance_groups(OfflineEngine(), url, record)
    finally:
        event_log.close()
    return json.loads(json.dumps(result))


def _ray_server(pid: int) -> bool:
    """Whether process ``pid`` is a Ray head's or node's server (GCS or raylet)."""
    command = command_line(pid)
    return "gcs_server" in command or "raylet" in command


def _wait_for_task(cluster: RayCluster, node: int, task: str, timeout: float = 600) -> None:
    """Until a worker of ``node`` runs ``task`` (its process title names it); the deadline
    covers the driver's start and its connection to the cluster, minutes on a loaded machine."""
    deadline = time.monotonic() + timeout
    while True:
        if any(task in command_line(pid) for pid in descendants(cluster.procs[node].pid)):
            return
        assert time.monotonic() < deadline, f"no {task} on node {node}"
        time.sleep(0.2)


def test_a_node_killed_mid_run_is_retried_with_the_same_result(
    cluster: RayCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [*COMPARE, "--rounds", "600", "--seeds", "2", "--jobs", "1"]
    proc = _on_ray(argv, tmp_path / "ray.json", cluster)
    _wait_for_task(cluster, 1, "StreamActor")
    cluster.stop_node(1)  # the worker node and its worker processes
    on_ray = _finished(proc, tmp_path / "ray.json")
    local = _local(argv, tmp_path / "local.json", capsys)
    on_ray.pop("engine"), local.pop("engine")
    assert untimed(on_ray) == untimed(local)


def _actors(cluster: RayCluster) -> list[int]:
    """The worker processes of the cluster that hold a :class:`StreamActor`."""
    return [
        pid
        for proc in cluster.procs
        for pid in descendants(proc.pid)
        if "StreamActor" in command_line(pid)
    ]


def test_an_actor_killed_after_a_partition_goes_on_from_its_checkpoint(
    cluster: RayCluster, storefront_log: Path, tmp_path: Path
) -> None:
    spec = LogSpec(
        respaced_copy(storefront_log, tmp_path / "days.sqlite3", 3 * 3600.0), "eventlog", "shop"
    )
    parts = tuple(partitions(spec))
    _, d = load_log(spec, "linucb", {})
    stream = ReplayStream(parts, "linucb", {"alpha": 0.5}, d, 5, None, None)
    killed: list[int] = []
    restarted: list[int] = []

    def done(_: int, __: int) -> None:
        # the driver calls this between two partitions: the actor is idle, its state
        # checkpointed; the first time, its worker process is killed
        if not killed:
            (pid,) = _actors(cluster)
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        elif not restarted:
            restarted.extend(_actors(cluster))

    try:
        (result,) = OfflineEngine("ray", cluster.address).stream([stream], done)
    finally:
        import ray

        ray.shutdown()
    assert killed and restarted and killed[0] not in restarted  # Ray restarted the actor
    whole = replay_one(spec, "linucb", {"alpha": 0.5}, 5, None, False)
    assert (result.cumulative_reward, result.matched, result.events_seen) == (
        whole.cumulative_reward,
        whole.matched,
        whole.events_seen,
    )
    assert result.curve.tolist() == whole.curve.tolist()
    assert whole.events_seen == EVENTS and len(parts) == 38


def test_an_evaluation_on_ray_counts_the_events_the_local_engine_counts(
    cluster: RayCluster, storefront_log: Path, tmp_path: Path
) -> None:
    url = respaced_copy(storefront_log, tmp_path / "days.sqlite3", 3 * 3600.0)
    candidates, grid = evaluation_plan(url)
    query = DecisionQuery(url, "shop", -math.inf, math.inf)
    decisions = len(query.load())
    learning = sum(c.spec is not None for c in candidates) + len(grid)
    assert learning < len(candidates) + len(grid)  # Baseline and Random replay nothing
    results, steps = [], []
    for engine in (OfflineEngine(), OfflineEngine("ray", cluster.address)):
        calls: list[tuple[int, int]] = []

        def called(done: int, to_do: int, calls: list[tuple[int, int]] = calls) -> None:
            calls.append((done, to_do))

        results.append(
            evaluate_on(
                engine,
                query,
                candidates,
                grid,
                called,
                describe=LEARNING_SETTINGS.arguments,
            )
        )
        steps.append(calls)
    cpus = OfflineEngine("ray", cluster.address).cpus()  # 1 once a test has stopped a node
    import ray

    ray.shutdown()
    assert results[0] == results[1]
    for calls in steps:  # events done add up to the events to do, the same on both
        assert {to_do for _, to_do in calls} == {learning * decisions}
        assert sum(done for done, _ in calls) == learning * decisions
    # on Ray, one stream per CPU of the cluster, each reporting its 38 days
    assert len(steps[1]) == cpus * len(query.days()) == cpus * 38


@pytest.mark.anyio
async def test_an_evaluation_reports_its_events_and_deleting_it_kills_its_actors(
    cluster: RayCluster, storefront_log: Path, tmp_path: Path, make_settings: Any
) -> None:
    url = respaced_copy(storefront_log, tmp_path / "days.sqlite3", 3 * 3600.0)
    settings = make_settings(database_url=url, offline_engine="ray", ray_address=cluster.address)
    policies = [
        {"name": f"eps{i}", "arguments": f"--cb_explore_adf --epsilon 0.{i}"} for i in range(1, 7)
    ]
    body = {"name": "deleted", **WHOLE_LOG, "policies": policies}
    async with running(settings) as (_, http, __):
        created = await http.post("/policies/shop/evaluations", json=body)
        assert created.status_code == 202, created.text
        path = f"/policies/shop/evaluations/{created.json()['evaluation_id']}"
        deadline = time.monotonic() + 600
        while (view := (await http.get(path)).json())["progress"] == 0:
            assert view["status"] in ("pending", "running"), view
            assert time.monotonic() < deadline, view
            await asyncio.sleep(0.2)
        # events done over events to do: 7 learning settings x the rewarded decisions
        assert view["status"] == "running" and 0 < view["progress"] < 1, view
        assert _actors(cluster)
        assert (await http.delete(path)).status_code in (200, 204)
        deadline = time.monotonic() + 120
        while _actors(cluster):
            assert time.monotonic() < deadline, "the deleted evaluation's actors still run"
            await asyncio.sleep(0.2)
        assert (await http.get(path)).status_code == 404


@pytest.mark.anyio
async def test_a_cluster_stopped_mid_evaluation_fails_it_and_a_rerun_succeeds(
    cluster: RayCluster, storefront_log: Path, tmp_path: Path, make_settings: Any
) -> None:
    log = tmp_path / "events.sqlite3"
    shutil.copy(storefront_log, log)
    url = f"sqlite:///{log}"
    settings = make_settings(database_url=url, offline_engine="ray", ray_address=cluster.address)
    body = {"name": "lost", **WHOLE_LOG, "offline_experimentation": True}
    async with running(settings) as (app, http, _):
        created = await http.post("/policies/shop/evaluations", json=body)
        assert created.status_code == 202, created.text
        await asyncio.to_thread(_wait_for_task, cluster, 0, "StreamActor")
        cluster.stop()
        record = await _finished_evaluation(app, created.json()["evaluation_id"], timeout=120)
        assert record.status == "failed"
        assert f"the Ray cluster at {cluster.address}" in record.message, record.message
        # the evaluation's worker process started no Ray instance of its own
        ray_processes = [p for p in descendants(os.getpid()) if _ray_server(p)]
        assert ray_processes == [], ray_processes
        view = (await http.get(f"/policies/shop/evaluations/{record.evaluation_id}")).json()
        assert view["status"] == "failed" and view["message"] == record.message

        # the rerun needs only to reach the cluster again: one setting, no grid (the grid
        # on Ray is compared with the local engine above)
        await asyncio.to_thread(cluster.start)
        rerun = {"name": "again", **WHOLE_LOG, "policies": [EPSILON_SETTING]}
        again = await http.post("/policies/shop/evaluations", json=rerun)
        assert again.status_code == 202, again.text
        record = await _finished_evaluation(app, again.json()["evaluation_id"])
        assert record.status == "succeeded", record.message
        assert record.result == _expected_evaluation(url, record)
