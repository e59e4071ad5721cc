"""Python clients of the service (httpx), sync and async, with typed methods.

>>> from service.client import BanditClient
>>> client = BanditClient("http://127.0.0.1:8000", api_key=None)  # doctest: +SKIP
>>> dec = client.recommend("demo", context=[0.1, 0.2, 0.3, 0.4])  # doctest: +SKIP
>>> client.reward(dec.event_id, 1.0).applied  # doctest: +SKIP
True

A non-2xx answer raises :class:`BanditAPIError` carrying the status and ``detail``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Self, TypeVar, overload

import httpx
from pydantic import BaseModel

from service.schemas import (
    ActivateResponse,
    ArmCandidate,
    FeatureImportanceJob,
    FeatureImportanceReport,
    FeatureImportanceRequest,
    ModelProperties,
    PolicyInfo,
    PolicyList,
    PolicySpec,
    PolicyStats,
    RecommendRequest,
    RecommendResponse,
    RewardRequest,
    RewardResponse,
    Snapshot,
)

M = TypeVar("M", bound=BaseModel)
Request = tuple[str, str, dict[str, Any] | None, type[BaseModel] | None]


class BanditAPIError(Exception):
    """The service answered ``status`` with ``detail``."""

    def __init__(self, status: int, detail: Any) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


Context = Sequence[float] | Mapping[str, Any] | Sequence[Mapping[str, Any]]
"""A float vector, named float features, or JSON feature objects (a policy with ``features``)."""


def _recommend_body(
    policy: str,
    context: Context,
    arms: Sequence[ArmCandidate | Mapping[str, Any] | str] | None,
    **options: Any,
) -> dict[str, Any]:
    cands = None
    if arms is not None:
        cands = [
            ArmCandidate(id=a) if isinstance(a, str) else ArmCandidate.model_validate(a)
            for a in arms
        ]
    body = RecommendRequest(policy=policy, context=context, arms=cands, **options)
    return body.model_dump(mode="json", exclude_none=True)


class _Requests:
    """Method, path, JSON body and response model of every call, written once for the
    sync and the async client."""

    @staticmethod
    def recommend(policy: str, context: Any, arms: Any, options: dict[str, Any]) -> Request:
        if not isinstance(context, Mapping):
            context = list(context)
        body = _recommend_body(policy, context, arms, **options)
        return ("POST", "/recommend", body, RecommendResponse)

    @staticmethod
    def reward(event_id: str, reward: float, arm_id: str | None) -> Request:
        body = RewardRequest(event_id=event_id, reward=reward, arm_id=arm_id)
        return ("POST", "/reward", body.model_dump(exclude_none=True), RewardResponse)

    @staticmethod
    def activate(event_id: str) -> Request:
        return ("POST", f"/events/{event_id}/activate", None, ActivateResponse)

    @staticmethod
    def put_policy(name: str, spec: PolicySpec | Mapping[str, Any]) -> Request:
        spec = spec if isinstance(spec, PolicySpec) else PolicySpec.model_validate(spec)
        return ("PUT", f"/policies/{name}", spec.model_dump(mode="json"), PolicyInfo)

    @staticmethod
    def get_policy(name: str) -> Request:
        return ("GET", f"/policies/{name}", None, PolicyInfo)

    @staticmethod
    def list_policies() -> Request:
        return ("GET", "/policies", None, PolicyList)

    @staticmethod
    def delete_policy(name: str) -> Request:
        return ("DELETE", f"/policies/{name}", None, None)

    @staticmethod
    def add_arms(name: str, arms: Sequence[str]) -> Request:
        return ("POST", f"/policies/{name}/arms", {"arms": list(arms)}, PolicyInfo)

    @staticmethod
    def retire_arms(name: str, arms: Sequence[str]) -> Request:
        return ("POST", f"/policies/{name}/arms/retire", {"arms": list(arms)}, PolicyInfo)

    @staticmethod
    def reset(name: str) -> Request:
        return ("POST", f"/policies/{name}/reset", None, PolicyInfo)

    @staticmethod
    def stats(name: str) -> Request:
        return ("GET", f"/policies/{name}/stats", None, PolicyStats)

    @staticmethod
    def features(name: str, top: int) -> Request:
        return ("GET", f"/policies/{name}/features?top={top}", None, FeatureImportanceReport)

    @staticmethod
    def export_snapshot(name: str) -> Request:
        return ("GET", f"/policies/{name}/snapshot", None, Snapshot)

    @staticmethod
    def import_snapshot(name: str, data: str) -> Request:
        return ("PUT", f"/policies/{name}/snapshot", {"data": data}, Snapshot)

    @staticmethod
    def start_feature_importance(
        name: str, job_id: str, since: float, until: float, label: str
    ) -> Request:
        body = FeatureImportanceRequest(name=label, since=since, until=until).model_dump()
        return ("PUT", f"/policies/{name}/feature-importances/{job_id}", body, FeatureImportanceJob)

    @staticmethod
    def feature_importance_job(name: str, job_id: str) -> Request:
        return ("GET", f"/policies/{name}/feature-importances/{job_id}", None, FeatureImportanceJob)

    @staticmethod
    def model_properties(name: str) -> Request:
        return ("GET", f"/policies/{name}/model/properties", None, ModelProperties)


MODEL_HEADERS = {"Content-Type": "application/octet-stream"}


def _import_params(replace_settings: bool) -> dict[str, str]:
    """The query of ``PUT /policies/{name}/model``."""
    return {"replace_settings": "true"} if replace_settings else {}


@overload
def _parse(response: httpx.Response, model: type[M]) -> M: ...
@overload
def _parse(response: httpx.Response, model: None) -> None: ...
@overload
def _parse(response: httpx.Response, model: type[M] | None) -> M | None: ...
def _parse(response: httpx.Response, model: type[M] | None) -> M | None:
    if response.status_code >= 400:
        try:
            detail = response.json().get("detail")
        except ValueError:
            detail = response.text
        raise BanditAPIError(response.status_code, detail)
    return None if model is None else model.model_validate(response.json())


class BanditClient:
    """Synchronous client; ``transport`` lets tests pass an ``httpx`` transport."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(
            base_url=base_url, headers=headers, timeout=timeout, transport=transport
        )

    def _call(self, request: Request) -> Any:
        method, path, body, model = request
        return _parse(self._http.request(method, path, json=body), model)

    def recommend(
        self,
        policy: str,
        context: Context = (),
        arms: Sequence[ArmCandidate | Mapping[str, Any] | str] | None = None,
        **options: Any,
    ) -> RecommendResponse:
        """``POST /recommend``; ``options``: exclude, user_id, event_id, top_k, explore,
        defer_activation. For a policy with ``features``, ``context`` and each arm's
        ``features`` are JSON feature objects (or lists of them):
        ``recommend("shop", {"user": {"tier": "gold"}}, [{"id": "sku-1", "features":
        {"item": {"category": "food"}}}])``."""
        return self._call(_Requests.recommend(policy, context, arms, options))

    def reward(self, event_id: str, reward: float, arm_id: str | None = None) -> RewardResponse:
        return self._call(_Requests.reward(event_id, reward, arm_id))

    def activate(self, event_id: str) -> ActivateResponse:
        return self._call(_Requests.activate(event_id))

    def put_policy(self, name: str, spec: PolicySpec | Mapping[str, Any]) -> PolicyInfo:
        return self._call(_Requests.put_policy(name, spec))

    def get_policy(self, name: str) -> PolicyInfo:
        return self._call(_Requests.get_policy(name))

    def list_policies(self) -> list[PolicyInfo]:
        return self._call(_Requests.list_policies()).policies

    def delete_policy(self, name: str) -> None:
        self._call(_Requests.delete_policy(name))

    def add_arms(self, name: str, arms: Sequence[str]) -> PolicyInfo:
        return self._call(_Requests.add_arms(name, arms))

    def retire_arms(self, name: str, arms: Sequence[str]) -> PolicyInfo:
        return self._call(_Requests.retire_arms(name, arms))

    def reset(self, name: str) -> PolicyInfo:
        return self._call(_Requests.reset(name))

    def stats(self, name: str) -> PolicyStats:
        return self._call(_Requests.stats(name))

    def features(self, name: str, top: int = 20) -> FeatureImportanceReport:
        """``GET /policies/{name}/features``: the ``top`` features by importance."""
        return self._call(_Requests.features(name, top))

    def export_snapshot(self, name: str) -> Snapshot:
        return self._call(_Requests.export_snapshot(name))

    def import_snapshot(self, name: str, data: str) -> Snapshot:
        return self._call(_Requests.import_snapshot(name, data))

    def export_model(self, name: str) -> bytes:
        """``GET /policies/{name}/model``: the model file (docs/personalizer.md)."""
        response = self._http.get(f"/policies/{name}/model")
        _parse(response, None)
        return response.content

    def import_model(self, name: str, data: bytes, replace_settings: bool = False) -> PolicyInfo:
        """``PUT /policies/{name}/model``: replace the model with an exported file (409
        when its settings differ from the policy's, unless ``replace_settings``)."""
        response = self._http.put(
            f"/policies/{name}/model",
            content=data,
            headers=MODEL_HEADERS,
            params=_import_params(replace_settings),
        )
        return _parse(response, PolicyInfo)

    def model_properties(self, name: str) -> ModelProperties:
        return self._call(_Requests.model_properties(name))

    def start_feature_importance(
        self, name: str, job_id: str, since: float, until: float, label: str = ""
    ) -> FeatureImportanceJob:
        """Start a feature-importance job over ``[since, until)`` of the log."""
        return self._call(_Requests.start_feature_importance(name, job_id, since, until, label))

    def feature_importance_job(self, name: str, job_id: str) -> FeatureImportanceJob:
        return self._call(_Requests.feature_importance_job(name, job_id))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncBanditClient:
    """Asynchronous client with the same methods as :class:`BanditClient`."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=headers, timeout=timeout, transport=transport
        )

    async def _call(self, request: Request) -> Any:
        method, path, body, model = request
        return _parse(await self._http.request(method, path, json=body), model)

    async def recommend(
        self,
        policy: str,
        context: Context = (),
        arms: Sequence[ArmCandidate | Mapping[str, Any] | str] | None = None,
        **options: Any,
    ) -> RecommendResponse:
        return await self._call(_Requests.recommend(policy, context, arms, options))

    async def reward(
        self, event_id: str, reward: float, arm_id: str | None = None
    ) -> RewardResponse:
        return await self._call(_Requests.reward(event_id, reward, arm_id))

    async def activate(self, event_id: str) -> ActivateResponse:
        return await self._call(_Requests.activate(event_id))

    async def put_policy(self, name: str, spec: PolicySpec | Mapping[str, Any]) -> PolicyInfo:
        return await self._call(_Requests.put_policy(name, spec))

    async def get_policy(self, name: str) -> PolicyInfo:
        return await self._call(_Requests.get_policy(name))

    async def list_policies(self) -> list[PolicyInfo]:
        return (await self._call(_Requests.list_policies())).policies

    async def delete_policy(self, name: str) -> None:
        await self._call(_Requests.delete_policy(name))

    async def add_arms(self, name: str, arms: Sequence[str]) -> PolicyInfo:
        return await self._call(_Requests.add_arms(name, arms))

    async def retire_arms(self, name: str, arms: Sequence[str]) -> PolicyInfo:
        return await self._call(_Requests.retire_arms(name, arms))

    async def reset(self, name: str) -> PolicyInfo:
        return await self._call(_Requests.reset(name))

    async def stats(self, name: str) -> PolicyStats:
        return await self._call(_Requests.stats(name))

    async def features(self, name: str, top: int = 20) -> FeatureImportanceReport:
        return await self._call(_Requests.features(name, top))

    async def export_snapshot(self, name: str) -> Snapshot:
        return await self._call(_Requests.export_snapshot(name))

    async def import_snapshot(self, name: str, data: str) -> Snapshot:
        return await self._call(_Requests.import_snapshot(name, data))

    async def export_model(self, name: str) -> bytes:
        response = await self._http.get(f"/policies/{name}/model")
        _parse(response, None)
        return response.content

    async def import_model(
        self, name: str, data: bytes, replace_settings: bool = False
    ) -> PolicyInfo:
        response = await self._http.put(
            f"/policies/{name}/model",
            content=data,
            headers=MODEL_HEADERS,
            params=_import_params(replace_settings),
        )
        return _parse(response, PolicyInfo)

    async def model_properties(self, name: str) -> ModelProperties:
        return await self._call(_Requests.model_properties(name))

    async def start_feature_importance(
        self, name: str, job_id: str, since: float, until: float, label: str = ""
    ) -> FeatureImportanceJob:
        request = _Requests.start_feature_importance(name, job_id, since, until, label)
        return await self._call(request)

    async def feature_importance_job(self, name: str, job_id: str) -> FeatureImportanceJob:
        return await self._call(_Requests.feature_importance_job(name, job_id))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
