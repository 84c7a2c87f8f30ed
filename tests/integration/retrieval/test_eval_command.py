"""`cairn eval` end to end on a tiny generated BEIR folder: the real model, real Chroma and BM25,
the embedding cache across runs, whole documents, and contextual prefixes from a local LLM stand-in."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI, Request
from prometheus_client import REGISTRY

from cairn import cli
from cairn import eval as evaluation
from services.retrieval.adapters.embedder import SentenceTransformerEmbedder
from services.retrieval.settings import Settings
from tests.support import serve_in_thread

pytestmark = pytest.mark.integration

CORPUS = {
    "volcano": ("Volcanoes", "A volcano erupts when magma rises through cracks in the crust. Lava then flows down its "
                "slopes and ash clouds drift for miles. Some volcanoes sleep for centuries before waking."),
    "bread": ("Baking bread", "Knead the dough for ten minutes, then let the yeast make it rise in a warm place. Bake "
              "the loaf until the crust sounds hollow when tapped. Cool it on a rack before slicing."),
    "tides": ("Ocean tides", "The gravity of the moon pulls on the oceans and raises a bulge of water. As the earth "
              "turns, coasts pass through the bulges and see high tide and low tide twice a day."),
    "bees": ("Honey bees", "Worker bees collect nectar from flowers and carry it back to the hive. They fan it with "
             "their wings until the water evaporates and the nectar thickens into honey, then seal it in wax."),
    "chess": ("Chess openings", "The opening moves of a chess game fight for the centre of the board. Knights and "
              "bishops come out early, and the king castles to safety behind a wall of pawns."),
}
QUERIES = {
    "q-lava": ("why does lava come out of a mountain", "volcano"),
    "q-yeast": ("how do I make a loaf rise with yeast", "bread"),
    "q-tide": ("what causes high and low tide", "tides"),
    "q-honey": ("how do bees turn nectar into honey", "bees"),
}


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    folder = tmp_path / "tiny-beir"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, (t, x) in CORPUS.items()), encoding="utf-8"
    )
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": text}) + "\n" for q, (text, _) in QUERIES.items()), encoding="utf-8"
    )
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{doc}\t1\n" for q, (_, doc) in QUERIES.items()), encoding="utf-8"
    )
    return folder


def settings_for(tmp_path: Path, **overrides) -> Settings:
    fields = {"data_dir": tmp_path / "data", "chunk_size_tokens": 24, "chunk_overlap_tokens": 4, "llm_base_url": None}
    return Settings(**(fields | overrides))


def evaluate(capsys, dataset: Path, settings: Settings, embedder, **options) -> dict:
    options = {"split": "test", "mode": "all", "whole_docs": False, "as_json": True} | options
    assert evaluation.run(dataset, settings=settings, embedder=embedder, **options) == 0
    return json.loads(capsys.readouterr().out)


def open_paths() -> list[str]:
    """What this process's descriptors point to, deleted files included (psutil's open_files leaves them out)."""
    paths = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor is gone by now
            paths.append(os.readlink(f"/proc/self/fd/{fd}"))
    return paths


def exact_scans() -> float:
    return REGISTRY.get_sample_value("cairn_retrieval_batch_size_count", {"batcher": "exact_scan"}) or 0.0


def test_every_mode_is_scored_and_a_second_run_reuses_the_embeddings(
    capsys, dataset: Path, tmp_path: Path, embedder: SentenceTransformerEmbedder
) -> None:
    settings = settings_for(tmp_path)
    scans_before = exact_scans()
    first = evaluate(capsys, dataset, settings, embedder)
    assert first["dense_lookup"] == "exact", "a few chunks: dense lookups scan the kept vectors, as the service does"
    assert exact_scans() - scans_before >= 2 * len(QUERIES), "the dense and hybrid queries were answered by the scan"
    assert (first["dataset"], first["split"], first["queries"], first["documents"]) == ("tiny-beir", "test", 4, 5)
    assert first["chunks"] > 5, "24-token chunks: several per document"
    assert list(first["modes"]) == ["dense", "keyword", "hybrid"]
    modes = first["modes"]
    assert modes["dense"]["ndcg@10"] == modes["hybrid"]["ndcg@10"] == modes["hybrid"]["recall@10"] == 1.0
    assert modes["keyword"]["ndcg@10"] > 0.8, "BM25 on five short documents: nearly always right"
    for mode, result in modes.items():
        assert 0 < result["latency_ms"]["p50"] <= result["latency_ms"]["p95"], mode
    assert (first["ingest"]["computed"], first["ingest"]["reused"]) == (first["chunks"], 0)
    assert first["ann"]["recall"] == 1.0 and first["ann"]["chunks"] == first["chunks"]
    assert [(p["a"], p["b"]) for p in first["paired_ndcg@10"]] == [("keyword", "dense"), ("hybrid", "dense"), ("hybrid", "keyword")]
    for pair in first["paired_ndcg@10"]:
        assert pair["mean"] == pytest.approx(modes[pair["a"]]["ndcg@10"] - modes[pair["b"]]["ndcg@10"], abs=1e-3)
    assert first["contextual"]["measured"] is False
    assert first["embedding"] == {"model": "all-MiniLM-L6-v2 (packaged)", "backend": "torch"}

    again = evaluate(capsys, dataset, settings, embedder, mode="dense")
    assert (again["ingest"]["computed"], again["ingest"]["reused"]) == (0, first["chunks"])
    assert again["modes"]["dense"]["ndcg@10"] == 1.0 and list(again["modes"]) == ["dense"]
    # Chroma keeps a store's files and index in memory until its client is closed, the temporary ones too.
    assert [path for path in open_paths() if "cairn-eval-" in path] == []


def test_whole_documents_are_single_chunks_and_the_table_prints(
    capsys, dataset: Path, tmp_path: Path, embedder: SentenceTransformerEmbedder
) -> None:
    report = evaluate(capsys, dataset, settings_for(tmp_path), embedder, whole_docs=True, mode="dense")
    assert report["chunks"] == report["documents"] == 5
    assert report["chunking"] == {"whole_docs": True, "chunk_size_tokens": embedder.max_tokens, "chunk_overlap_tokens": 0}
    evaluate_table = evaluation.run(
        dataset, split="test", mode="hybrid", whole_docs=False, as_json=False, settings=settings_for(tmp_path), embedder=embedder
    )
    table = capsys.readouterr().out
    assert evaluate_table == 0
    assert "nDCG@10" in table and "\nhybrid " in table and "HNSW (searches above the exact-scan limit):" in table
    assert "dense lookups: an exact scan of the" in table and "contextual chunking: not measured" in table


def test_above_the_exact_search_limit_dense_lookups_are_chromas_as_in_the_service(
    capsys, dataset: Path, tmp_path: Path, embedder: SentenceTransformerEmbedder
) -> None:
    scans_before = exact_scans()
    report = evaluate(capsys, dataset, settings_for(tmp_path, exact_search_max_chunks=3), embedder, mode="dense")
    assert report["chunks"] > 3 and report["dense_lookup"] == "hnsw"
    assert exact_scans() == scans_before, "no lookup went to the scan"
    assert report["modes"]["dense"]["ndcg@10"] == 1.0


def test_redirected_to_a_file_it_draws_no_progress_bars(
    capsys, dataset: Path, tmp_path: Path, embedder: SentenceTransformerEmbedder
) -> None:
    """`cairn eval ... 2>eval.log`: each redraw of the ingest and search bars would be kept in the file."""
    code = evaluation.run(
        dataset, split="test", mode="keyword", whole_docs=False, as_json=True, settings=settings_for(tmp_path), embedder=embedder
    )
    err = capsys.readouterr().err
    assert code == 0
    assert "ingesting tiny-beir" not in err and "keyword search" not in err, err


def test_run_as_the_command_with_standard_error_in_a_file_it_writes_no_bar_while_loading_the_model(
    dataset: Path, tmp_path: Path
) -> None:
    """transformers draws its own "Loading weights" bar as the model loads, whatever standard error is."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLM_")} | {"CAIRN_DATA_DIR": str(tmp_path / "data")}
    with (tmp_path / "eval.log").open("w+") as log:
        code = subprocess.run(
            [sys.executable, "-m", "cairn.cli", "eval", str(dataset), "--mode", "keyword", "--json"],
            cwd=Path(__file__).resolve().parents[3], env=env, stdout=subprocess.DEVNULL, stderr=log, timeout=300,
        ).returncode
        log.seek(0)
        err = log.read()
    assert code == 0, err[-2000:]
    assert "\r" not in err and "it/s]" not in err, err[-2000:]


def test_a_folder_that_is_not_a_dataset_is_refused_before_loading_the_model(capsys, tmp_path: Path) -> None:
    assert cli.main(["eval", str(tmp_path / "nothing-here"), "--json"]) == 2
    assert "not a folder" in capsys.readouterr().err


def test_qrels_with_only_a_header_are_refused_before_loading_the_model(
    capsys, monkeypatch: pytest.MonkeyPatch, dataset: Path, tmp_path: Path
) -> None:
    monkeypatch.setenv("CAIRN_DATA_DIR", str(tmp_path / "data"))
    (dataset / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n", encoding="utf-8")
    assert cli.main(["eval", str(dataset), "--json"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: qrels/test.tsv judges no queries: the 'test' split has nothing to score"
    ]


def test_a_folder_without_the_beir_parts_or_the_split_is_refused_with_what_there_is(
    capsys, monkeypatch: pytest.MonkeyPatch, dataset: Path, tmp_path: Path
) -> None:
    monkeypatch.setenv("CAIRN_DATA_DIR", str(tmp_path / "data"))
    (dataset / "qrels" / "train.tsv").write_text("q-lava\tvolcano\t1\n", encoding="utf-8")
    assert cli.main(["eval", str(dataset), "--split", "dev", "--json"]) == 2
    assert capsys.readouterr().err.splitlines() == ["error: no qrels/dev.tsv: the splits here are test, train"]
    (dataset / "queries.jsonl").unlink()
    assert cli.main(["eval", str(dataset), "--json"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: {dataset}: not a BEIR dataset: no queries.jsonl[.gz] "
        "(expected corpus.jsonl[.gz], queries.jsonl[.gz] and qrels/<split>.tsv)"
    ]


def test_relevant_documents_the_corpus_lacks_are_noted_and_count_as_missed(
    capsys, dataset: Path, tmp_path: Path, embedder: SentenceTransformerEmbedder
) -> None:
    with (dataset / "qrels" / "test.tsv").open("a", encoding="utf-8") as qrels:
        qrels.write("q-lava\tnot-in-corpus\t1\nq-tide\tnot-judged-relevant\t0\n")
    assert evaluation.run(
        dataset, split="test", mode="dense", whole_docs=True, as_json=True, settings=settings_for(tmp_path), embedder=embedder
    ) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["modes"]["dense"]["recall@100"] == pytest.approx((0.5 + 1 + 1 + 1) / 4)
    assert [line for line in err.splitlines() if line.startswith("note:")] == [
        "note: 1 (query, document) pairs that qrels/test.tsv marks relevant name a document the corpus lacks; "
        "no mode can find them, so they lower every score"
    ]


def test_a_query_s_own_document_is_left_out_of_its_ranking_and_noted(
    capsys, dataset: Path, tmp_path: Path, embedder: SentenceTransformerEmbedder
) -> None:
    """As BEIR evaluates ArguAna and Quora, whose queries are in the corpus under their own ids: that document
    is dropped from the query's ranking, even where the qrels (here, to show it) judge it relevant."""
    with (dataset / "queries.jsonl").open("a", encoding="utf-8") as queries:
        queries.write(json.dumps({"_id": "tides", "text": "what causes high and low tide"}) + "\n")
    with (dataset / "qrels" / "test.tsv").open("a", encoding="utf-8") as qrels:
        qrels.write("tides\ttides\t1\n")
    assert evaluation.run(
        dataset, split="test", mode="dense", whole_docs=True, as_json=True, settings=settings_for(tmp_path), embedder=embedder
    ) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["modes"]["dense"]["recall@100"] == pytest.approx(4 / 5)
    assert [line for line in err.splitlines() if line.startswith("note:")] == [
        "note: 1 queries have the id of a corpus document; as in BEIR's evaluation, that document is left out of "
        "their rankings"
    ]


@pytest.mark.parametrize(
    ("environment", "errors"),
    [
        (
            {"CHUNK_SIZE_TOKENS": "twelve", "HNSW_EF_SEARCH": "0"},
            [
                "error: CHUNK_SIZE_TOKENS: Input should be a valid integer, unable to parse string as an integer",
                "error: HNSW_EF_SEARCH: Input should be greater than or equal to 1",
            ],
        ),
        (
            {"CHUNK_SIZE_TOKENS": "16", "CHUNK_OVERLAP_TOKENS": "32", "LLM_API_KEY": "sk-not-to-be-printed"},
            ["error: CHUNK_OVERLAP_TOKENS must be smaller than CHUNK_SIZE_TOKENS"],
        ),
    ],
    ids=["field values", "overlap"],
)
def test_invalid_retrieval_settings_are_one_line_each_without_their_values(
    capsys, monkeypatch: pytest.MonkeyPatch, dataset: Path, tmp_path: Path, environment: dict, errors: list[str]
) -> None:
    monkeypatch.setenv("CAIRN_DATA_DIR", str(tmp_path / "data"))
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert cli.main(["eval", str(dataset), "--json"]) == 2
    assert capsys.readouterr().err.splitlines() == errors


STARTING = "cairn-eval-*"  # the temporary folder: made as the run starts
INGESTING = "cairn-eval-*/**/chroma.sqlite3"  # the collection: made once the model is loaded


@pytest.mark.parametrize(
    ("stop", "when"),
    [(signal.SIGINT, STARTING), (signal.SIGINT, INGESTING), (signal.SIGTERM, INGESTING), (signal.SIGHUP, INGESTING)],
    ids=["SIGINT-starting", "SIGINT-ingesting", "SIGTERM-ingesting", "SIGHUP-ingesting"],
)
def test_a_stopped_evaluation_deletes_its_temporary_collection(
    dataset: Path, tmp_path: Path, stop: signal.Signals, when: str
) -> None:
    """Ctrl-C, `kill`, `timeout` or a closed terminal: the temporary Chroma folder goes too, however early."""
    corpus = "".join(json.dumps({"_id": f"doc{i}", "text": f"note {i}: " + "words to embed " * 60}) + "\n" for i in range(400))
    with (dataset / "corpus.jsonl").open("a", encoding="utf-8") as handle:
        handle.write(corpus)
    (tmp_path / "tmp").mkdir()
    env = os.environ | {"CAIRN_DATA_DIR": str(tmp_path / "data"), "TMPDIR": str(tmp_path / "tmp")}
    root = Path(__file__).resolve().parents[3]
    process = subprocess.Popen(
        [sys.executable, "-m", "cairn.cli", "eval", str(dataset), "--json"],
        cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while not list((tmp_path / "tmp").glob(when)):
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"never got there: {process.communicate()[1].decode()[-2000:]}")
            time.sleep(0.1)
        process.send_signal(stop)
        out, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 128 + stop, err.decode()[-2000:]
    assert out == b""
    assert list((tmp_path / "tmp").glob("cairn-eval-*")) == []


@pytest.fixture
def llm() -> Iterator[tuple[str, list[str]]]:
    calls: list[str] = []
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def complete(request: Request) -> dict:
        body = await request.json()
        document = body["messages"][-1]["content"].split("<document>\n", 1)[1]
        calls.append(document)
        answer = f"From a short article that begins: {document.split('.', 1)[0]}."
        return {
            "id": f"cmpl-{len(calls)}",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
        }

    with serve_in_thread(app) as url:
        yield url, calls


def test_with_an_llm_endpoint_the_effect_of_contextual_prefixes_is_reported(
    capsys, dataset: Path, tmp_path: Path, embedder: SentenceTransformerEmbedder, llm
) -> None:
    url, calls = llm
    settings = settings_for(tmp_path, llm_base_url=f"{url}/v1", llm_model="ctx-model", contextual_max_retries=0)
    report = evaluate(capsys, dataset, settings, embedder, mode="keyword")
    assert len(calls) >= 5, "a prefix was asked for every chunk"
    contextual = report["contextual"]
    assert contextual["measured"] is True and contextual["model"] == "ctx-model"
    effect = contextual["ndcg@10"]["keyword"]
    assert effect["without"] == report["modes"]["keyword"]["ndcg@10"]
    assert effect["paired_mean"] == pytest.approx(effect["with"] - effect["without"], abs=1e-3)
