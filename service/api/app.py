"""The FastAPI application: ``create_app(settings)``.

The lifespan owns every connection and background task: the state store (Redis pool
or in-process), the event log (SQLAlchemy engine) and its batching writer, the
default-reward sweeper, the periodic snapshots and the event-log upkeep (partitions,
retention). Nothing connects at import time.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.middleware.cors import CORSMiddleware
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.auth import warn_if_open
from service.api.errors import NO_ROUTE, NOT_FOUND_REASON, install_handlers
from service.api.oidc import OidcVerifier
from service.observability import metrics
from service.observability.request_context import REQUEST_ID_HEADER, RequestIds
from service.personalizer import routers as personalizer
from service.personalizer.learning_mode_view import LoopLearningModes
from service.personalizer.learning_modes import ApprenticeTally
from service.personalizer.learning_settings import LoopLearningSettings
from service.personalizer.loops import DEFAULT_LOOP, Loops
from service.personalizer.routers.errors import ERROR_CODE_HEADER, error_response
from service.policies import DEMO_POLICY, DEMO_SPEC, load_policies_file
from service.routers import audit, decisions, evaluations, health, policies
from service.settings import Settings, get_settings
from service.startup import usable_directory
from service.storage.base import StoreUnavailableError
from service.storage.breaker import BreakerState, CircuitBreaker
from service.storage.state_store import StateStore
from service.usecases import UseCases, build_use_cases
from service.usecases.policies_file import PoliciesFile

log = logging.getLogger("bandit.service")

LEARNING_SETTINGS = LoopLearningSettings()
"""How the service reads learning settings: as the Personalizer adapter writes them
(evaluations, rebuilds; the CLI's ``evaluate`` and ``rebuild`` take it from here)."""

YOUNG_GC_THRESHOLD = 10_000  # allocations between young collections (CPython's default: 700)


def make_store(settings: Settings) -> StateStore:
    """Redis when ``redis_url`` is set, otherwise the in-process store. A single Redis or
    a Sentinel group's master is behind a circuit breaker whose state and transitions
    are metrics; a Redis Cluster is not (one breaker for every node would fail the
    slots of the healthy masters when one master hangs)."""
    if settings.redis_url:
        from service.storage.redis_store import RedisStateStore
        from service.storage.redis_urls import parse_redis_url

        breaker = None
        if parse_redis_url(settings.redis_url).kind != "cluster":
            breaker = CircuitBreaker(
                settings.store_breaker_failures,
                settings.store_breaker_open_seconds,
                on_change=_publish_breaker_change,
            )
            metrics.show_store_breaker(breaker.state, BreakerState)
        return RedisStateStore(
            settings.redis_url, socket_timeout=settings.redis_timeout_seconds, breaker=breaker
        )
    from service.storage.memory_store import InProcessStateStore

    return InProcessStateStore()


def _publish_breaker_change(state: BreakerState) -> None:
    metrics.STORE_BREAKER_TRANSITIONS.labels(state).inc()
    metrics.show_store_breaker(state, BreakerState)
    level = logging.INFO if state is BreakerState.CLOSED else logging.WARNING
    log.log(level, "state store circuit breaker %s", state)


def make_event_log(settings: Settings) -> Any:
    """The SQLAlchemy event log, migrated to head and its day partitions prepared
    (PostgreSQL; docs/operations.md "Event-log partitions") when ``run_migrations``,
    before the writer's first insert could wait for them; otherwise a
    :class:`~service.startup.StartupError` unless its schema is the code's."""
    from service.storage.migrate import check_schema, upgrade_head
    from service.storage.sql_log import SqlEventLog

    usable_directory(settings.data_dir, "BANDIT_DATA_DIR")
    event_log = SqlEventLog(settings.log_url)
    try:
        if settings.run_migrations:
            upgrade_head(settings.log_url)
            event_log.prepare_partitions(time.time(), settings.log_partition_days_ahead)
        else:
            check_schema(settings.log_url)
    except StoreUnavailableError as exc:
        # A database outage must not keep the service down: events spool until it is back.
        log.warning(
            "event log unreachable at start, schema not migrated or checked, events will spool: %s",
            exc,
        )
    return event_log


def make_writer(settings: Settings, event_log: Any) -> Any:
    from service.storage.writer import EventLogWriter

    settings.spool_dir.mkdir(parents=True, exist_ok=True)
    return EventLogWriter(
        event_log,
        spool_dir=settings.spool_dir,
        batch_size=settings.log_batch_size,
        flush_interval=settings.log_flush_seconds,
    )


async def load_initial_policies(use_cases: UseCases, settings: Settings, loops: Loops) -> None:
    """Start the rebuild of every policy of the event log the store lacks (its decisions
    degraded meanwhile: service/usecases/recovery.py), apply the policies file (to a
    policy being rebuilt once it is back), then the demo policy if there is no policy at
    all, then the default Personalizer loop (docs/personalizer.md) unless it exists."""
    recovery = use_cases.recovery
    specs = (
        load_policies_file(settings.policies_file, settings.allow_import_guardrails)
        if settings.policies_file
        else {}
    )
    policies_file = PoliciesFile(use_cases.admin, specs)
    recovery.after_rebuild = policies_file.apply
    try:
        missing = set(await recovery.check())
    except StoreUnavailableError as exc:  # checked again every rebuild_check_seconds
        if not await use_cases.store.list_policies():
            raise  # a store with no policy serves nothing until the log is read
        log.warning("policies missing from the state store not checked at start: %s", exc)
        missing = set()
    for name in specs:
        if name not in missing:
            await policies_file.apply(name)
    existing = await use_cases.store.list_policies()
    if not existing and not missing and settings.demo_policy:
        await use_cases.admin.put_policy(DEMO_POLICY, DEMO_SPEC)
        log.info("no policy configured: created the demo policy %r", DEMO_POLICY)
    if (
        settings.personalizer_loop
        and DEFAULT_LOOP not in missing  # being rebuilt: it exists
        and await loops.ensure_default_loop()
    ):
        log.info("created the default Personalizer loop %r", DEFAULT_LOOP)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    warn_if_open(settings)
    metrics.publish_build_info(settings.build_commit)
    async with AsyncExitStack() as stack:
        event_log = await asyncio.to_thread(make_event_log, settings)
        stack.push_async_callback(asyncio.to_thread, event_log.close)
        store = make_store(settings)
        stack.push_async_callback(store.close)
        writer = make_writer(settings, event_log)
        stack.push_async_callback(asyncio.to_thread, writer.close)  # flushes what was submitted
        use_cases = build_use_cases(
            store, writer, event_log, settings, LEARNING_SETTINGS, tally=ApprenticeTally()
        )
        app.state.use_cases = use_cases
        # the Personalizer adapter over the core use cases
        loops = Loops(use_cases.admin, use_cases.recommender, use_cases.rewards, use_cases.store)
        app.state.loops = loops
        app.state.apply_setting = loops.apply_setting
        app.state.learning_modes = LoopLearningModes(loops)  # the console's Apprentice page
        use_cases.auto_optimizer.apply = loops.apply_setting
        stack.push_async_callback(use_cases.feature_importances.close)
        stack.push_async_callback(use_cases.monitor.close)
        stack.callback(use_cases.evaluations.close)
        stack.callback(use_cases.retrains.close)
        await load_initial_policies(use_cases, settings, loops)
        # Everything allocated so far (modules, schemas, engines) lives as long as the
        # process: keep it out of the cyclic collector's full passes, which otherwise
        # scan it again every second or so under load (43 ms pauses at K = 50).
        gc.freeze()
        # A request's garbage is freed by reference counting; what the young collections
        # find is mostly objects still in use (queued log records, pending requests), which
        # every 700 allocations they scanned and promoted. Every 10,000: fewer scans, and
        # fewer records promoted before the writer drops them.
        gc.set_threshold(YOUNG_GC_THRESHOLD, *gc.get_threshold()[1:])
        stop = asyncio.Event()
        tasks = [
            asyncio.create_task(use_cases.sweeper.run(stop)),
            asyncio.create_task(use_cases.folds.run(stop)),
            asyncio.create_task(use_cases.snapshots.run(stop)),
            asyncio.create_task(use_cases.monitor.run(stop)),
            asyncio.create_task(use_cases.evaluations.run(stop)),
            asyncio.create_task(use_cases.log_upkeep.run(stop)),
            asyncio.create_task(use_cases.recovery.run(stop)),
            asyncio.create_task(
                use_cases.auto_optimizer.run(stop, settings.auto_optimize_check_seconds)
            ),
            asyncio.create_task(use_cases.retrains.run(stop, settings.retrain_check_seconds)),
        ]

        async def stop_tasks() -> None:
            stop.set()
            await asyncio.gather(*tasks)

        stack.push_async_callback(stop_tasks)
        yield
    metrics.process_exit()


CONSOLE_UPLOADS = ("/model/import", "/model/snapshot")  # the console's model upload forms


def carries_model_file(method: str, path: str) -> bool:
    """Whether a request's body is a model file (``max_model_bytes``): ``PUT .../model``
    or an upload form of the console's model page."""
    if method == "PUT":
        return path.endswith("/model")
    return method == "POST" and path.startswith("/console/") and path.endswith(CONSOLE_UPLOADS)


class BodyLimitAndTiming:
    """Pure ASGI middleware: 413 for bodies over ``max_body_bytes`` (``max_model_bytes`` for
    a model file: :func:`carries_model_file`; read before the app sees them), the
    request-latency histogram per route template, the requests in flight and the 404s
    by reason (:data:`service.api.errors.NOT_FOUND_REASON`)."""

    def __init__(self, app: ASGIApp, max_body_bytes: int, max_model_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_model_bytes = max_model_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = {"code": 500}
        metrics.REQUESTS_IN_FLIGHT.inc()

        async def send_status(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            if scope["method"] in ("POST", "PUT", "PATCH"):
                model_file = carries_model_file(scope["method"], scope["path"])
                limit = self.max_model_bytes if model_file else self.max_body_bytes
                body = await self._read_body(receive, limit)
                if body is None:
                    await self._too_large(send_status, limit, scope["path"])
                    return
                receive = _replay(body, receive)
            await self.app(scope, receive, send_status)
        finally:
            metrics.REQUESTS_IN_FLIGHT.dec()
            route = scope.get("route")
            path = getattr(route, "path", "unmatched")
            metrics.REQUEST_LATENCY.labels(path, scope["method"], str(status["code"])).observe(
                time.perf_counter() - start
            )
            if status["code"] == 404:
                metrics.NOT_FOUND.labels(scope.get(NOT_FOUND_REASON, NO_ROUTE)).inc()

    async def _read_body(self, receive: Receive, limit: int) -> bytes | None:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

    async def _too_large(self, send: Send, limit: int, path: str) -> None:
        message = f"request body exceeds the limit of {limit} bytes"
        headers = [(b"content-type", b"application/json")]
        if personalizer.PERSONALIZER_PATH.match(path):  # Personalizer's error shape
            response = error_response(413, "PayloadSizeExceeded", message)
            body = response.body
            headers.append((ERROR_CODE_HEADER.encode(), b"PayloadSizeExceeded"))
        else:
            body = json.dumps({"detail": message}, separators=(",", ":")).encode()
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _replay(body: bytes, downstream: Receive) -> Receive:
    """A receive that yields the already-read body once, then defers to the server."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await downstream()

    return receive


@functools.cache
def shared_routes(console: bool) -> tuple[BaseRoute, ...]:
    """The routes of every app of the process (the console's with ``console``): the
    routers included once into a host router, whose inclusions the apps share. FastAPI
    builds an included route's request handler (its dependencies, parameter and response
    models) on the first request that reaches its router, once per inclusion: each app
    including the routers itself built them again, 50 ms of an app's first requests. The
    host has the defaults of an app's router but is no app: ``app.dependency_overrides``
    does not reach these routes."""
    host = APIRouter()
    for router in (
        decisions.router,
        policies.router,
        evaluations.router,
        health.router,
        audit.router,
        *personalizer.routers(),
    ):
        host.include_router(router)
    if console:
        from service.console import mount_console  # Jinja2 is imported only when served

        mount_console(host)
    return tuple(host.routes)


def create_app(settings: Settings | None = None) -> FastAPI:
    """The application for ``settings`` (default: :func:`get_settings`)."""
    settings = settings or get_settings()
    app = FastAPI(
        title="bandit-service",
        version="0.1.0",
        summary="Contextual-bandit recommendations: POST /recommend, then POST /reward.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.oidc = (
        None
        if settings.oidc_issuer is None or settings.oidc_audience is None
        else OidcVerifier(settings.oidc_issuer, settings.oidc_audience)
    )
    install_handlers(app, settings.redis_retry_after_seconds)
    app.router.routes.extend(shared_routes(settings.console))
    personalizer.install_handlers(app)
    app.add_middleware(
        BodyLimitAndTiming,
        max_body_bytes=settings.max_body_bytes,
        max_model_bytes=settings.max_model_bytes,
    )
    app.add_middleware(RequestIds)
    if settings.cors_origins:
        # outermost, so a preflight is answered before any other layer sees it
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "PUT", "DELETE"],
            allow_headers=["Authorization", "Content-Type", REQUEST_ID_HEADER],
            expose_headers=[REQUEST_ID_HEADER],
        )
    return app
