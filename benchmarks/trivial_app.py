"""The HTTP ceiling for :mod:`benchmarks.service_load`: an ``async def`` FastAPI handler
that parses a ``/recommend``-shaped body into a pydantic model and answers a small JSON
object, with no state, storage or logging. Served by uvicorn exactly like the service.
"""

from __future__ import annotations

from fastapi import FastAPI
from pydantic import BaseModel


class Body(BaseModel):
    policy: str
    context: list[float]


app = FastAPI()


@app.post("/recommend")
async def recommend(body: Body) -> dict[str, object]:
    return {"arm_id": "arm0", "policy": body.policy, "n": len(body.context)}


@app.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}
