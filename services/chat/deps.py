"""Route dependencies, each named once."""
from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from services.chat.pipeline import ChatPipeline
from services.chat.settings import Settings
from shared.caller import Caller, caller_from_headers


async def get_pipeline(request: Request) -> ChatPipeline:
    return request.app.state.pipeline


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


PipelineDep = Annotated[ChatPipeline, Depends(get_pipeline)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
CallerDep = Annotated[Caller, Depends(caller_from_headers)]
