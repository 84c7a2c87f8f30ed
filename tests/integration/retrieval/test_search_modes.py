"""The three search modes, filters and similar documents with the real MiniLM model and embedded Chroma.

The corpus is built so that each leg alone gets one question wrong: a ticket number only keywords
match, and a question in other words than its answer, which only the embeddings match.
"""
from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from services.retrieval.adapters.embedder import SentenceTransformerEmbedder
from services.retrieval.main import create_app
from services.retrieval.settings import Settings

pytestmark = pytest.mark.integration

TOKEN = "integration-token"
AUTH = {"X-Service-Token": TOKEN}
DOCS = {
    "notes/weekly.md": (
        "notes",
        "# Weekly notes\n\nThe team discussed the cafeteria menu, the parking rules and the holiday calendar. Someone "
        "asked about new chairs for the office. Ticket ZK-99812 was closed on Friday. Lunch on Thursday is pizza.",
    ),
    "support/tickets.md": (
        "support",
        "# Support tickets\n\nTo see the progress of a support ticket, open the helpdesk and search for it; open "
        "tickets show who is working on them.",
    ),
    "account/recover.md": (
        "account",
        "# Forgotten credentials\n\nIf you cannot sign in, use the link on the login page to set a new secret by e-mail.",
    ),
    "account/password-policy.md": (
        "account",
        "# Password policy\n\nA password must have twelve characters. Passwords expire after a year; the policy "
        "applies to every password.",
    ),
    "ops/backups.md": ("ops", "# Backups\n\nBackups run nightly and are kept for thirty days."),
}
TICKET = "status of ticket ZK-99812"  # only keywords find the notes
FORGOT = "I forgot my password, how do I reset it?"  # only embeddings find the recovery page


@pytest.fixture
def client(tmp_path: Path, embedder: SentenceTransformerEmbedder) -> Iterator[TestClient]:
    settings = Settings(service_token=TOKEN, data_dir=tmp_path, chroma_collection="modes")
    with TestClient(create_app(settings, embedder=embedder)) as client:
        for source, (category, text) in DOCS.items():
            assert client.post("/documents", json={"text": text, "source": source, "category": category}, headers=AUTH).status_code == 200
        yield client


def ranked(client: TestClient, query: str, **body) -> list[dict]:
    response = client.post("/search", json={"query": query, "top_k": 5, **body}, headers=AUTH)
    assert response.status_code == 200, response.text
    return response.json()["results"]


def test_keywords_find_the_exact_ticket_number_that_embeddings_miss(client: TestClient) -> None:
    keyword = ranked(client, TICKET, mode="keyword")
    assert keyword[0]["doc_id"] == "notes/weekly.md"
    assert keyword[0]["keyword_score"] > 1.5 * keyword[1]["keyword_score"]
    assert ranked(client, TICKET, mode="dense")[0]["doc_id"] == "support/tickets.md"
    assert "notes/weekly.md" in [r["doc_id"] for r in ranked(client, TICKET)[:2]]


def test_embeddings_find_the_answer_in_other_words_that_keywords_miss(client: TestClient) -> None:
    dense = ranked(client, FORGOT, mode="dense")
    assert dense[0]["doc_id"] == "account/recover.md" and dense[0]["score"] > dense[1]["score"] + 0.1
    assert "account/recover.md" not in [r["doc_id"] for r in ranked(client, FORGOT, mode="keyword")]
    hybrid = ranked(client, FORGOT)
    assert "account/recover.md" in [r["doc_id"] for r in hybrid[:2]]


def test_a_chinese_word_inside_an_unspaced_sentence_is_found_by_keywords(client: TestClient) -> None:
    text = "# 备份\n\n数据库的备份每天晚上自动运行，并保留三十天。恢复备份时请先停止服务。"
    assert client.post("/documents", json={"text": text, "source": "zh/backups.md"}, headers=AUTH).status_code == 200
    keyword = ranked(client, "恢复备份", mode="keyword")
    assert [r["doc_id"] for r in keyword] == ["zh/backups.md"]
    assert ranked(client, "恢复备份")[0]["doc_id"] == "zh/backups.md"


def test_dense_search_reads_a_query_up_to_the_models_limit_and_keywords_read_all_of_it(client: TestClient) -> None:
    """As docs/documents.md says: 1000 characters of Chinese are over the model's 254 tokens; the rest is cut
    off without an error, so the words after the cut change nothing in dense search."""
    head = "恢复备份时请先停止服务然后检查日志" * 20  # 340 characters, a token or more each
    dense = ranked(client, head + " I forgot my password, how do I reset it?", mode="dense")
    assert [(r["chunk_id"], r["score"]) for r in dense] == [
        (r["chunk_id"], pytest.approx(r["score"], abs=1e-5)) for r in ranked(client, head, mode="dense")
    ]
    keyword = ranked(client, head + " password", mode="keyword")
    assert "account/password-policy.md" in [r["doc_id"] for r in keyword]


def test_a_documents_own_date_field_filters_every_mode_and_shows_in_results(client: TestClient) -> None:
    for doc_id, published in (("news/2023.md", "2023-06-01"), ("news/2024.md", "2024-06-01")):
        epoch = int(datetime.fromisoformat(published).replace(tzinfo=UTC).timestamp())
        body = {"doc_id": doc_id, "text": f"# Release news\n\nThe backup tool was released on {published}.",
                "metadata": {"published": epoch, "team": "ops"}}
        assert client.post("/documents", json=body, headers=AUTH).status_code == 200
    since_2024 = {"published": {"$gte": "2024-01-01"}, "team": "ops"}
    for mode in ("hybrid", "dense", "keyword"):
        found = ranked(client, "backup tool release", mode=mode, filters=since_2024)
        assert [r["doc_id"] for r in found] == ["news/2024.md"], mode
        assert found[0]["metadata"]["team"] == "ops" and found[0]["metadata"]["published"] == 1717200000
        assert "content_hash" not in found[0]["metadata"] and "chunking" not in found[0]["metadata"]


def test_hybrid_reports_a_real_cosine_for_every_result(client: TestClient) -> None:
    dense = {r["chunk_id"]: r["score"] for r in ranked(client, TICKET, mode="dense")}
    for result in ranked(client, TICKET):
        assert result["dense_score"] == pytest.approx(dense[result["chunk_id"]], abs=1e-4)
    strict = ranked(client, FORGOT, threshold=0.5)
    assert [r["doc_id"] for r in strict] == ["account/recover.md"]


@pytest.mark.parametrize("mode", ["hybrid", "dense", "keyword"])
def test_filters_in_every_mode_on_chroma(client: TestClient, mode: str) -> None:
    only = ranked(client, "password ticket backups", mode=mode, filters={"category": "account"})
    assert only and {r["doc_id"] for r in only} <= {"account/recover.md", "account/password-policy.md"}
    ids = ranked(client, "password ticket backups", mode=mode, filters={"doc_id": {"$in": ["ops/backups.md", "support/tickets.md"]}})
    assert ids and {r["doc_id"] for r in ids} <= {"ops/backups.md", "support/tickets.md"}
    first = ranked(client, "password ticket backups", mode=mode, filters={"chunk_index": {"$gte": 1}})
    assert first == [], "every document here is one chunk"


def test_a_deleted_document_is_gone_from_every_mode(client: TestClient) -> None:
    assert client.delete("/documents/notes/weekly.md", headers=AUTH).status_code == 200
    for mode in ("hybrid", "dense", "keyword"):
        assert "notes/weekly.md" not in [r["doc_id"] for r in ranked(client, TICKET, mode=mode)]


def test_similar_documents(client: TestClient) -> None:
    body = client.get("/documents/account/recover.md/similar", params={"top_k": 2}, headers=AUTH).json()
    assert [r["doc_id"] for r in body["results"]][0] == "account/password-policy.md"
    assert len(body["results"]) == 2 and "account/recover.md" not in [r["doc_id"] for r in body["results"]]
    assert client.get("/documents/missing.md/similar", headers=AUTH).status_code == 404
