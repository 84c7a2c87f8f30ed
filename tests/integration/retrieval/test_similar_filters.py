"""GET /documents/{doc_id}/similar with the metadata filters of POST /search, on the real MiniLM model and
embedded Chroma.

The corpus is built so that the documents nearest to the password-reset page are all in its own category:
a filter that leaves that category out must reach past them for its top_k.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient

from services.retrieval.adapters.embedder import SentenceTransformerEmbedder
from services.retrieval.main import create_app
from services.retrieval.settings import Settings

pytestmark = pytest.mark.integration

TOKEN = "integration-token"
AUTH = {"X-Service-Token": TOKEN}
ASKED = "account/reset.md"
# doc_id: (category, published, text). The account pages are all about passwords and signing in.
DOCS = {
    ASKED: ("account", "2022-03-01", "# Reset your password\n\nIf you forgot your password, use the reset link on the "
                                     "sign-in page; we e-mail you a link to choose a new password."),
    "account/forgot.md": ("account", "2022-05-01", "# Forgotten password\n\nForgot your password? Click 'reset "
                                                   "password' on the login page and follow the e-mail."),
    "account/new-password.md": ("account", "2023-01-10", "# Choosing a new password\n\nAfter a password reset, "
                                                         "choose a new password of twelve characters."),
    "account/locked.md": ("account", "2023-02-01", "# Locked out\n\nAfter five wrong passwords your account is "
                                                   "locked; reset your password to sign in again."),
    "account/sign-in.md": ("account", "2023-04-01", "# Signing in\n\nSign in with your e-mail and password; if "
                                                    "sign-in fails, reset the password from the login page."),
    "account/expiry.md": ("account", "2023-06-01", "# Password expiry\n\nPasswords expire after a year; you are "
                                                   "asked to reset your password at the next login."),
    "ops/backups.md": ("ops", "2024-02-01", "# Backups\n\nBackups of the database run nightly and are kept for "
                                            "thirty days."),
    "ops/restore.md": ("ops", "2024-03-01", "# Restore\n\nTo restore a backup, stop the service and load the "
                                            "nightly archive."),
    "ops/monitoring.md": ("ops", "2022-08-01", "# Monitoring\n\nDisk usage and CPU load of every server are "
                                               "graphed on the dashboard."),
    "finance/invoices.md": ("finance", "2024-05-01", "# Invoices\n\nInvoices are sent monthly to the billing "
                                                     "contact."),
}


def epoch(day: str) -> int:
    return int(datetime.fromisoformat(day).replace(tzinfo=UTC).timestamp())


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory, embedder: SentenceTransformerEmbedder) -> Iterator[TestClient]:
    settings = Settings(service_token=TOKEN, data_dir=tmp_path_factory.mktemp("similar"), chroma_collection="similar")
    with TestClient(create_app(settings, embedder=embedder)) as client:
        for doc_id, (category, published, text) in DOCS.items():
            body = {"doc_id": doc_id, "source": f"wiki/{doc_id}", "text": text, "category": category,
                    "metadata": {"published": epoch(published)}}
            assert client.post("/documents", json=body, headers=AUTH).status_code == 200
        yield client


def similar(client: TestClient, doc_id: str = ASKED, **params):
    if "filters" in params:
        params["filters"] = json.dumps(params["filters"])
    return client.get(f"/documents/{doc_id}/similar", params=params, headers=AUTH)


def ranked(client: TestClient, **params) -> list[dict]:
    response = similar(client, **params)
    assert response.status_code == 200, response.text
    return response.json()["results"]


def test_a_filter_that_leaves_out_the_nearest_documents_still_returns_top_k_in_order(client: TestClient) -> None:
    everything = ranked(client, top_k=50)
    assert len(everything) == len(DOCS) - 1
    assert {r["category"] for r in everything[:5]} == {"account"}, "the corpus puts the account pages nearest"
    wanted = [r for r in everything if r["category"] == "ops"][:2]

    found = ranked(client, top_k=2, filters={"category": "ops"})

    assert [r["doc_id"] for r in found] == [r["doc_id"] for r in wanted]
    assert [r["score"] for r in found] == pytest.approx([r["score"] for r in wanted], abs=1e-4)


def test_filters_on_source_and_on_a_date_field(client: TestClient) -> None:
    sources = ["wiki/ops/monitoring.md", "wiki/finance/invoices.md", f"wiki/{ASKED}"]
    by_source = ranked(client, top_k=5, filters={"source": {"$in": sources}})
    assert {r["doc_id"] for r in by_source} == {"ops/monitoring.md", "finance/invoices.md"}, "never the document itself"

    since_2024 = ranked(client, top_k=5, filters={"published": {"$gte": "2024-01-01"}})
    assert {r["doc_id"] for r in since_2024} == {"ops/backups.md", "ops/restore.md", "finance/invoices.md"}

    both = ranked(client, top_k=5, filters={"published": {"$gte": "2024-01-01"}, "category": {"$ne": "ops"}})
    assert [r["doc_id"] for r in both] == ["finance/invoices.md"]
    assert ranked(client, top_k=5, filters={"category": "none-such"}) == []


@pytest.mark.parametrize(
    "filters",
    [{"category": {"$regex": "o.*"}}, {"published": {"$gte": "last year"}}, {"doc_id": {"$in": []}}, {"a-b": 1}],
)
def test_a_bad_filter_gets_the_422_search_gives_it(client: TestClient, filters) -> None:
    refused = similar(client, filters=filters)
    searched = client.post("/search", json={"query": "password", "filters": filters}, headers=AUTH)
    assert refused.status_code == searched.status_code == 422, refused.text
    assert refused.json()["error"] == "invalid_request"
    assert refused.json()["message"] == "query." + searched.json()["message"]
    assert refused.json()["message"].startswith("query.filters: ")


@pytest.mark.parametrize(
    ("sent", "message"),
    [
        ("category=ops", "query.filters: filters must be a JSON object: Expecting value"),
        ('{"category": "ops", "category": "finance"}', 'query.filters: filters must be a JSON object: duplicate key "category"'),
        ('{"page": NaN}', "query.filters: filters must be a JSON object: NaN is not JSON"),
        ('["ops"]', "query.filters: filters must be an object of metadata keys"),
    ],
)
def test_filters_that_are_not_one_json_object_get_422(client: TestClient, sent: str, message: str) -> None:
    refused = client.get(f"/documents/{ASKED}/similar", params={"filters": sent}, headers=AUTH)
    assert refused.status_code == 422 and refused.json()["message"].startswith(message), refused.text


def test_filters_given_twice_get_422_rather_than_one_dropped(client: TestClient) -> None:
    sent = [("filters", json.dumps({"category": "ops"})), ("filters", json.dumps({"published": {"$gte": "2024-01-01"}}))]
    refused = client.get(f"/documents/{ASKED}/similar", params=sent, headers=AUTH)
    assert refused.status_code == 422 and refused.json()["message"].startswith("query.filters: "), refused.text


def test_an_unknown_document_is_404_with_filters_too(client: TestClient) -> None:
    missing = similar(client, "account/missing.md", filters={"category": "ops"})
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"
