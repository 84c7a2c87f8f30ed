from __future__ import annotations

from pydantic import Field

from services.chat.settings import OFFLINE_MODEL
from shared.settings import CommonSettings, aliases


class OfflineSettings(CommonSettings):
    host: str = Field("127.0.0.1", validation_alias=aliases("OFFLINE_LLM_HOST"))
    port: int = Field(8004, validation_alias=aliases("OFFLINE_LLM_PORT"))
    model: str = Field(OFFLINE_MODEL, validation_alias=aliases("OFFLINE_LLM_MODEL"))
