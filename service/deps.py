"""``Annotated`` dependencies shared by the routers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from service.auth import recommend_key, require_key
from service.decision import DecisionService
from service.settings import Settings


# ``async def`` on purpose: FastAPI runs a plain ``def`` dependency in its thread pool,
# a thread hop per request for an attribute lookup.
async def get_service(request: Request) -> DecisionService:
    return request.app.state.service


async def get_app_settings(request: Request) -> Settings:
    return request.app.state.settings


ServiceDep = Annotated[DecisionService, Depends(get_service)]
SettingsDep = Annotated[Settings, Depends(get_app_settings)]
ApiKey = Depends(require_key)
RecommendKey = Depends(recommend_key)
