"""Read a BEIR-format dataset: corpus.jsonl[.gz], queries.jsonl[.gz], qrels/<split>.tsv (with header)."""
from __future__ import annotations

import csv
import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


class DatasetError(ValueError):
    """The folder is not a readable BEIR dataset; the message says which file and why."""


@dataclass(frozen=True)
class BeirDocument:
    doc_id: str
    title: str
    text: str


@dataclass(frozen=True)
class BeirDataset:
    name: str
    corpus: dict[str, BeirDocument]
    queries: dict[str, str]  # only the queries judged in the split, in file order
    qrels: dict[str, dict[str, int]]  # query id -> {doc id: relevance}


def _find(folder: Path, stem: str) -> Path:
    for candidate in (folder / f"{stem}.jsonl", folder / f"{stem}.jsonl.gz"):
        if candidate.is_file():
            return candidate
    raise DatasetError(f"{folder}: no {stem}.jsonl or {stem}.jsonl.gz")


def _records(path: Path) -> Iterator[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as lines:
            for number, line in enumerate(lines, start=1):
                if line.strip():
                    try:
                        yield json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise DatasetError(f"{path.name} line {number}: {exc.msg}") from exc
    except (OSError, EOFError) as exc:
        raise DatasetError(f"{path.name}: {exc}") from exc


def _id(record: dict, path: Path) -> str:
    if "_id" not in record:
        raise DatasetError(f"{path.name}: a record has no _id")
    return str(record["_id"])


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """query-id, corpus-id, score per line; the header line is skipped."""
    if not path.is_file():
        raise DatasetError(f"{path}: no such qrels file")
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8", newline="") as handle:
        rows = csv.reader(handle, delimiter="\t")
        for number, row in enumerate(rows, start=1):
            if not row or (number == 1 and row[0] == "query-id"):
                continue
            if len(row) != 3:
                raise DatasetError(f"{path.name} line {number}: expected 3 tab-separated columns")
            try:
                qrels.setdefault(row[0], {})[row[1]] = int(row[2])
            except ValueError as exc:
                raise DatasetError(f"{path.name} line {number}: score is not an integer") from exc
    return qrels


def load_beir(folder: Path, *, split: str = "test") -> BeirDataset:
    """The corpus, the queries that have judgements in `split`, and those judgements."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DatasetError(f"{folder}: not a folder")
    qrels = read_qrels(folder / "qrels" / f"{split}.tsv")
    corpus_path, queries_path = _find(folder, "corpus"), _find(folder, "queries")
    corpus = {}
    for record in _records(corpus_path):
        doc_id = _id(record, corpus_path)
        corpus[doc_id] = BeirDocument(doc_id, str(record.get("title") or ""), str(record.get("text") or ""))
    queries = {}
    for record in _records(queries_path):
        if (query_id := _id(record, queries_path)) in qrels:
            queries[query_id] = str(record.get("text") or "")
    if missing := sorted(set(qrels) - set(queries)):
        raise DatasetError(f"qrels/{split}.tsv judges queries not in the queries file: {', '.join(missing[:5])}")
    if not corpus:
        raise DatasetError(f"{folder}: the corpus is empty")
    return BeirDataset(name=folder.name, corpus=corpus, queries=queries, qrels=qrels)
