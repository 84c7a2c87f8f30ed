"""Two retrieval processes on one `chroma run` server: what one writes, the other finds by keyword (and
by its exact dense scan) within 5 seconds, and what one deletes, the other stops finding."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.retrieval.chroma_server import ChromaServer
from tests.support import free_port, wait_until

pytestmark = pytest.mark.integration

TOKEN = "replica-test-token"
AUTH = {"X-Service-Token": TOKEN}
REPO = Path(__file__).resolve().parents[3]
PROMISE_S = 5.0


class Replica:
    def __init__(self, *, name: str, chroma_url: str, collection: str, data_dir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = data_dir / f"{name}.log"
        env = os.environ | {
            "RETRIEVAL_HOST": "127.0.0.1",
            "RETRIEVAL_PORT": str(self.port),
            "CHROMA_URL": chroma_url,
            "CHROMA_COLLECTION": collection,
            "CAIRN_SERVICE_TOKEN": TOKEN,
            "CAIRN_DATA_DIR": str(data_dir / name),
            "TORCH_THREADS": "1",  # two models on two cores
            "HF_HUB_OFFLINE": "1",
            "LOG_LEVEL": "WARNING",
        }
        with self.log.open("wb") as out:
            self.process = subprocess.Popen([sys.executable, "-m", "services.retrieval"], cwd=REPO, env=env, stdout=out, stderr=out)

    def ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"replica exited with {self.process.returncode}:\n{self.log.read_text()[-3000:]}")
        try:
            return httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def keyword_hits(self, word: str) -> list[str]:
        return self.hits(word, mode="keyword")

    def hits(self, query: str, *, mode: str) -> list[str]:
        response = httpx.post(f"{self.url}/search", json={"query": query, "mode": mode}, headers=AUTH, timeout=10)
        assert response.status_code == 200, response.text
        return [r["doc_id"] for r in response.json()["results"]]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()


@pytest.fixture
def replicas(chroma_server: ChromaServer, tmp_path: Path, unique: str) -> Iterator[tuple[Replica, Replica]]:
    first = Replica(name="first", chroma_url=chroma_server.url, collection=unique, data_dir=tmp_path)
    second = Replica(name="second", chroma_url=chroma_server.url, collection=unique, data_dir=tmp_path)
    try:
        for replica in (first, second):
            wait_until(replica.ready, timeout=180, interval=0.5, what=f"retrieval replica on {replica.url}")
        yield first, second
    finally:
        first.stop()
        second.stop()


def seconds_until(condition, *, limit: float = 30.0) -> float:
    started = time.monotonic()
    wait_until(condition, timeout=limit, interval=0.1, what="the other replica to catch up")
    return time.monotonic() - started


def test_keyword_index_follows_writes_made_through_the_other_replica(replicas: tuple[Replica, Replica]) -> None:
    first, second = replicas
    assert first.keyword_hits("quokkas") == [] and second.keyword_hits("quokkas") == []

    added = httpx.post(
        f"{first.url}/documents",
        json={"text": "# Wildlife\n\nQuokkas live on Rottnest Island.", "doc_id": "wildlife.md"},
        headers=AUTH,
        timeout=30,
    )
    assert added.status_code == 200 and added.json()["status"] == "added"
    assert first.keyword_hits("quokkas") == ["wildlife.md"], "the writing replica sees its write at once"
    assert first.hits("marsupials on an island", mode="dense") == ["wildlife.md"]
    took = seconds_until(lambda: second.keyword_hits("quokkas") == ["wildlife.md"])
    assert took < PROMISE_S, f"the other replica took {took:.1f}s"
    # Dense queries are answered from the vectors each replica keeps in memory (small collection: exact scan).
    took = seconds_until(lambda: second.hits("marsupials on an island", mode="dense") == ["wildlife.md"])
    assert took < PROMISE_S, f"the other replica's dense search took {took:.1f}s"

    replaced = httpx.post(
        f"{second.url}/documents",
        json={"text": "# Wildlife\n\nWombats dig burrows.", "doc_id": "wildlife.md"},
        headers=AUTH,
        timeout=30,
    )
    assert replaced.json()["status"] == "replaced"
    took = seconds_until(lambda: first.keyword_hits("wombats") == ["wildlife.md"] and first.keyword_hits("quokkas") == [])
    assert took < PROMISE_S, f"the replacement took {took:.1f}s to reach the first replica"

    assert httpx.delete(f"{second.url}/documents/wildlife.md", headers=AUTH, timeout=30).status_code == 200
    assert second.keyword_hits("wombats") == []
    took = seconds_until(lambda: first.keyword_hits("wombats") == [] and first.hits("wombats", mode="dense") == [])
    assert took < PROMISE_S, f"the delete took {took:.1f}s to reach the first replica"
