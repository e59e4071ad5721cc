"""``Annotated`` dependencies of the Personalizer routers: the process's :class:`Loops`,
built over the core use cases by the app's lifespan (``app.state.loops``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from service.personalizer.loops import Loops


async def get_loops(request: Request) -> Loops:
    return request.app.state.loops


LoopsDep = Annotated[Loops, Depends(get_loops)]
