"""Route dependencies, each named once."""
from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from services.chat.pipeline import ChatPipeline
from shared.caller import Caller, caller_from_headers


async def get_pipeline(request: Request) -> ChatPipeline:
    return request.app.state.pipeline


PipelineDep = Annotated[ChatPipeline, Depends(get_pipeline)]
CallerDep = Annotated[Caller, Depends(caller_from_headers)]
