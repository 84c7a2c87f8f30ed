"""Read a BEIR-format dataset: corpus.jsonl[.gz], queries.jsonl[.gz], qrels/<split>.tsv (with header)."""
from __future__ import annotations

import csv
import gzip
import json
import re
import zlib
from collections.abc import Iterable, Iterator
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


_NOT_UTF8 = re.compile("[\udc80-\udcff]")  # where errors="surrogateescape" leaves the bytes it could not decode


def _utf8_lines(lines: Iterable[str], path: Path) -> Iterator[str]:
    # Files are opened with errors="surrogateescape" and checked here: a strict decoder fails in its
    # read-ahead, before the line holding the bad byte is known.
    for number, line in enumerate(lines, start=1):
        if _NOT_UTF8.search(line):
            raise DatasetError(f"{path.name} line {number}: not UTF-8 text")
        yield line


def _records(path: Path) -> Iterator[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8", errors="surrogateescape") as lines:
            for number, line in enumerate(_utf8_lines(lines, path), start=1):
                if line.strip():
                    yield _record(line, path, number)
    except (OSError, EOFError, zlib.error) as exc:
        raise DatasetError(f"{path.name}: {exc}") from exc


def _record(line: str, path: Path, number: int) -> dict:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path.name} line {number}: {exc.msg}") from exc
    if not isinstance(record, dict):
        raise DatasetError(f"{path.name} line {number}: not a JSON object")
    return record


def _id(record: dict, path: Path) -> str:
    if "_id" not in record:
        raise DatasetError(f"{path.name}: a record has no _id")
    return str(record["_id"])


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """query-id, corpus-id, score per line; the header line is skipped."""
    if not path.is_file():
        raise DatasetError(f"{path}: no such qrels file")
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8", errors="surrogateescape", newline="") as handle:
        rows = csv.reader(_utf8_lines(handle, path), delimiter="\t")
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
    if not qrels:  # found now, not after the whole corpus is ingested
        raise DatasetError(f"qrels/{split}.tsv judges no queries: the {split!r} split has nothing to score")
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
