"""`cairn ingest` and a retrieval service that is still embedding a large file when the command stops waiting."""
from __future__ import annotations

import asyncio
import inspect
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI, Form, UploadFile
from fastapi.responses import JSONResponse

from cairn import ingest
from cairn.ingest import RetrievalGone, ingest_paths
from services.gateway.settings import Settings as GatewaySettings
from tests.support import serve_in_thread

pytestmark = pytest.mark.unit

TOKEN = "stand-in-token"
SLOW_S = 1.0


def slow_for(slow_name: str) -> FastAPI:
    """Retrieval ingesting synchronously: `slow_name` takes SLOW_S to embed, every other file no time."""
    app = FastAPI()

    @app.post("/documents")
    async def upload(file: UploadFile, doc_id: str = Form(...)):
        if doc_id == slow_name:
            await asyncio.sleep(SLOW_S)
        return JSONResponse({"doc_id": doc_id, "status": "added"})

    return app


def test_a_file_retrieval_is_still_embedding_is_not_reported_as_failed_outright(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "big.md").write_text("# Big\n\ntext")
    (tmp_path / "small.md").write_text("# Small\n\ntext")
    with serve_in_thread(slow_for("big.md")) as url:
        summary = ingest_paths(
            [Path("big.md"), Path("small.md")], retrieval_url=url, service_token=TOKEN, progress=False,
            timeout_s=SLOW_S / 4,
        )
    assert summary.added == 1 and summary.failed_names == ["big.md"]
    reason = dict(summary.failures)["big.md"]
    assert "may still be adding" in reason and "run the same command again" in reason


def test_ingest_waits_for_retrieval_as_long_as_the_gateway_does() -> None:
    default = inspect.signature(ingest_paths).parameters["timeout_s"].default
    assert default >= GatewaySettings().ingest_upstream_timeout_s


def test_a_connect_timeout_is_retrieval_gone_not_a_file_in_progress() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectTimeout("timed out", request=request)

    with httpx.Client(base_url="http://retrieval", transport=httpx.MockTransport(refuse)) as client:
        with pytest.raises(RetrievalGone):
            ingest._send(client, name="a.md", data=b"# A")
