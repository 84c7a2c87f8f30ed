"""Read a BEIR-format dataset: corpus.jsonl[.gz], queries.jsonl[.gz], qrels/<split>.tsv (header optional)."""
from __future__ import annotations

import csv
import gzip
import json
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from shared.json_types import is_blank


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

    @property
    def relevant_missing(self) -> int:
        """(query, document) pairs judged relevant whose document is not in the corpus: no mode can find them."""
        return sum(
            1 for docs in self.qrels.values() for doc_id, grade in docs.items() if grade > 0 and doc_id not in self.corpus
        )

    @property
    def queries_in_corpus(self) -> int:
        """Queries whose id is also a document's id (ArguAna, Quora: the query is itself in the corpus). BEIR
        leaves that document out of the query's ranking, and so does the runner."""
        return sum(1 for query_id in self.queries if query_id in self.corpus)


_LAYOUT = "corpus.jsonl[.gz], queries.jsonl[.gz] and qrels/<split>.tsv"


def _find(folder: Path, stem: str) -> Path | None:
    for candidate in (folder / f"{stem}.jsonl", folder / f"{stem}.jsonl.gz"):
        if candidate.is_file():
            return candidate
    return None


def _layout(folder: Path) -> tuple[Path, Path]:
    """The corpus and queries files; every missing part is named at once, so that a folder that is not a
    BEIR dataset is recognised as such."""
    corpus, queries, has_qrels = _find(folder, "corpus"), _find(folder, "queries"), (folder / "qrels").is_dir()
    if corpus is None or queries is None or not has_qrels:
        parts = (("corpus.jsonl[.gz]", corpus), ("queries.jsonl[.gz]", queries), ("qrels/", has_qrels))
        missing = ", ".join(name for name, found in parts if not found)
        raise DatasetError(f"{folder}: not a BEIR dataset: no {missing} (expected {_LAYOUT})")
    return corpus, queries


def _qrels_path(folder: Path, split: str) -> Path:
    path = folder / "qrels" / f"{split}.tsv"
    if path.is_file():
        return path
    splits = sorted(p.stem for p in (folder / "qrels").glob("*.tsv") if p.is_file())
    there = f"the splits here are {', '.join(splits)}" if splits else "the qrels folder holds no .tsv file"
    raise DatasetError(f"no qrels/{split}.tsv: {there}")


_NOT_UTF8 = re.compile("[\udc80-\udcff]")  # where errors="surrogateescape" leaves the bytes it could not decode


def _utf8_lines(lines: Iterable[str], path: Path) -> Iterator[str]:
    # Files are opened with errors="surrogateescape" and checked here: a strict decoder fails in its
    # read-ahead, before the line holding the bad byte is known.
    for number, line in enumerate(lines, start=1):
        if _NOT_UTF8.search(line):
            raise DatasetError(f"{path.name} line {number}: not UTF-8 text")
        yield line


def _records(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, record) for each non-blank line. utf-8-sig: a byte order mark, if any, is not text."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8-sig", errors="surrogateescape") as lines:
            for number, line in enumerate(_utf8_lines(lines, path), start=1):
                if line.strip():
                    yield number, _record(line, path, number)
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


def _id(record: dict, path: Path, number: int, seen: dict[str, int]) -> str:
    """The record's _id as the qrels spell it; refused when it could not match a qrels id, or repeats one
    (the qrels could not say which of the two records they judge)."""
    if "_id" not in record:
        raise DatasetError(f"{path.name} line {number}: no _id")
    value = record["_id"]
    if not ((isinstance(value, str) and value) or (isinstance(value, int) and not isinstance(value, bool))):
        shown = json.dumps(value)[:40]
        raise DatasetError(f"{path.name} line {number}: _id must be a non-empty string or an integer, not {shown}")
    record_id = str(value)
    if (first := seen.setdefault(record_id, number)) != number:
        raise DatasetError(f"{path.name} line {number}: _id {record_id!r} is already used on line {first}")
    return record_id


def _query_text(record: dict, path: Path, number: int, query_id: str) -> str:
    """A judged query's text: searched as "", it would be scored on whatever an empty query ranks first."""
    text = record.get("text")
    if text is not None and not isinstance(text, str):
        shown = json.dumps(text)[:40]
        raise DatasetError(f"{path.name} line {number}: query {query_id!r}: text must be a string, not {shown}")
    if text is None or is_blank(text):
        raise DatasetError(f"{path.name} line {number}: query {query_id!r} has no text")
    return text


def _is_header(row: list[str]) -> bool:
    return len(row) == 3 and not any(character.isdigit() for character in row[2])  # "score", "rel", "relevance" ...


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """query-id, corpus-id, score per line; a first line whose score column holds no digit is a header."""
    if not path.is_file():
        raise DatasetError(f"{path}: no such qrels file")
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8-sig", errors="surrogateescape", newline="") as handle:
        rows = csv.reader(_utf8_lines(handle, path), delimiter="\t")
        for number, row in enumerate(rows, start=1):
            if not row or (number == 1 and _is_header(row)):
                continue
            if len(row) != 3:
                raise DatasetError(f"{path.name} line {number}: expected 3 tab-separated columns")
            try:
                qrels.setdefault(row[0], {})[row[1]] = int(row[2])
            except ValueError as exc:
                raise DatasetError(f"{path.name} line {number}: score is not an integer") from exc
    return qrels


def load_beir(folder: Path, *, split: str = "test") -> BeirDataset:
    """The corpus, the queries that have judgements in `split`, and those judgements.

    Refused (DatasetError) when nothing could be scored: checked here, before the corpus is ingested.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise DatasetError(f"{folder}: not a folder")
    corpus_path, queries_path = _layout(folder)
    qrels = read_qrels(_qrels_path(folder, split))
    if not qrels:
        raise DatasetError(f"qrels/{split}.tsv judges no queries: the {split!r} split has nothing to score")
    relevant = [doc_id for docs in qrels.values() for doc_id, grade in docs.items() if grade > 0]
    if not relevant:
        raise DatasetError(f"qrels/{split}.tsv marks no document relevant (every score is 0 or less)")
    corpus: dict[str, BeirDocument] = {}
    seen: dict[str, int] = {}
    for number, record in _records(corpus_path):
        doc_id = _id(record, corpus_path, number, seen)
        corpus[doc_id] = BeirDocument(doc_id, str(record.get("title") or ""), str(record.get("text") or ""))
    if not any((document.title + document.text).strip() for document in corpus.values()):
        raise DatasetError(f"{corpus_path.name}: no document has a title or text")
    if not any(doc_id in corpus for doc_id in relevant):
        raise DatasetError(
            f"qrels/{split}.tsv: none of the {len(set(relevant))} documents it marks relevant is in {corpus_path.name} "
            f"(as {relevant[0]!r}): do its corpus-id values match the corpus _id values?"
        )
    queries = {}
    seen = {}
    for number, record in _records(queries_path):
        if (query_id := _id(record, queries_path, number, seen)) in qrels:
            queries[query_id] = _query_text(record, queries_path, number, query_id)
    if missing := sorted(set(qrels) - set(queries)):
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise DatasetError(f"qrels/{split}.tsv judges queries not in the queries file: {', '.join(missing[:5])}{more}")
    return BeirDataset(name=folder.name, corpus=corpus, queries=queries, qrels=qrels)
