"""Reading BEIR folders, and turning their documents into Cairn documents."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from services.retrieval.evaluation.beir import BeirDocument, DatasetError, load_beir, read_qrels
from services.retrieval.evaluation.corpus import as_new_document, truncate_to_tokens

pytestmark = pytest.mark.unit

CORPUS = [
    {"_id": "d1", "title": "Cats", "text": "Cats purr."},
    {"_id": "d2", "title": "", "text": "Dogs bark."},
    {"_id": 3, "text": "Birds sing."},
]
QUERIES = [
    {"_id": "q1", "text": "what purrs", "metadata": {}},
    {"_id": "q2", "text": "what barks"},
    {"_id": "q3", "text": "judged only in train"},
]


def write_dataset(folder: Path, *, gz: bool, header: bool = True) -> Path:
    (folder / "qrels").mkdir(parents=True)
    lines = "".join(json.dumps(record) + "\n" for record in CORPUS)
    if gz:
        with gzip.open(folder / "corpus.jsonl.gz", "wt", encoding="utf-8") as handle:
            handle.write(lines)
    else:
        (folder / "corpus.jsonl").write_text(lines, encoding="utf-8")
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUERIES) + "\n", encoding="utf-8")
    head = "query-id\tcorpus-id\tscore\n" if header else ""
    (folder / "qrels" / "test.tsv").write_text(head + "q1\td1\t1\nq2\td2\t2\nq2\td1\t0\n", encoding="utf-8")
    (folder / "qrels" / "train.tsv").write_text(head + "q3\t3\t1\n", encoding="utf-8")
    return folder


@pytest.mark.parametrize("gz", [False, True], ids=["jsonl", "jsonl.gz"])
def test_a_beir_folder_loads_with_only_the_split_s_queries(tmp_path: Path, gz: bool) -> None:
    dataset = load_beir(write_dataset(tmp_path / "tiny", gz=gz), split="test")
    assert dataset.name == "tiny"
    assert list(dataset.corpus) == ["d1", "d2", "3"]
    assert (dataset.corpus["d1"].title, dataset.corpus["d1"].text) == ("Cats", "Cats purr.")
    assert dataset.corpus["3"].title == ""
    assert dataset.queries == {"q1": "what purrs", "q2": "what barks"}
    assert dataset.qrels == {"q1": {"d1": 1}, "q2": {"d2": 2, "d1": 0}}
    assert load_beir(tmp_path / "tiny", split="train").queries == {"q3": "judged only in train"}


def test_qrels_without_a_header_read_the_same(tmp_path: Path) -> None:
    with_header = read_qrels(write_dataset(tmp_path / "a", gz=False) / "qrels" / "test.tsv")
    without = read_qrels(write_dataset(tmp_path / "b", gz=False, header=False) / "qrels" / "test.tsv")
    assert with_header == without == {"q1": {"d1": 1}, "q2": {"d2": 2, "d1": 0}}


def test_unreadable_datasets_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="not a folder"):
        load_beir(tmp_path / "missing")
    folder = write_dataset(tmp_path / "d", gz=False)
    with pytest.raises(DatasetError, match="dev.tsv"):
        load_beir(folder, split="dev")
    (folder / "qrels" / "bad.tsv").write_text("q1\td1\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="3 tab-separated columns"):
        load_beir(folder, split="bad")
    (folder / "qrels" / "unknown.tsv").write_text("nope\td1\t1\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="not in the queries file"):
        load_beir(folder, split="unknown")
    (folder / "corpus.jsonl").write_text('{"_id": "d1", "text": \n', encoding="utf-8")
    with pytest.raises(DatasetError, match="corpus.jsonl line 1"):
        load_beir(folder)
    (folder / "corpus.jsonl").unlink()
    with pytest.raises(DatasetError, match="no corpus.jsonl"):
        load_beir(folder)
    (folder / "corpus.jsonl.gz").write_bytes(b"not gzip")
    with pytest.raises(DatasetError, match="corpus.jsonl.gz"):
        load_beir(folder)


def test_documents_are_embedded_with_their_title_as_mteb_does() -> None:
    document = as_new_document(BeirDocument("d1", "Cats", "Cats purr."), dataset="tiny")
    assert (document.text, document.doc_id, document.title, document.markdown) == ("Cats Cats purr.", "d1", "Cats", False)
    untitled = as_new_document(BeirDocument("d2", "", "Dogs bark."), dataset="tiny")
    assert (untitled.text, untitled.title) == ("Dogs bark.", "d2")


def words(text: str) -> int:
    return len(text.split())


def test_truncation_keeps_the_longest_prefix_within_the_token_limit() -> None:
    text = "one two three four five six seven"
    assert truncate_to_tokens(text, max_tokens=3, count_tokens=words) == "one two three"
    assert truncate_to_tokens(text, max_tokens=6, count_tokens=words) == "one two three four five six"
    assert truncate_to_tokens(text, max_tokens=7, count_tokens=words) == text
    assert truncate_to_tokens("  spaced   words here ", max_tokens=2, count_tokens=words) == "  spaced   words"
    # A tokenizer that splits on characters: each prefix is cut at a word end.
    assert truncate_to_tokens("ab cd ef", max_tokens=5, count_tokens=lambda t: len(t.replace(" ", ""))) == "ab cd"


def insert_line(path: Path, line: bytes, *, at: int) -> None:
    """Put `line` at line number `at` (1-based) of a plain or gzipped file."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        lines = handle.readlines()
    lines.insert(at - 1, line)
    with opener(path, "wb") as handle:
        handle.writelines(lines)


def test_a_qrels_file_with_only_its_header_is_refused_before_the_corpus_is_read(tmp_path: Path) -> None:
    folder = write_dataset(tmp_path / "d", gz=False)
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n", encoding="utf-8")
    (folder / "corpus.jsonl").write_text("not json\n", encoding="utf-8")  # reading the corpus would fail first
    with pytest.raises(DatasetError, match=r"qrels/test\.tsv judges no queries: the 'test' split has nothing to score"):
        load_beir(folder)


@pytest.mark.parametrize(
    ("name", "line"),
    [
        ("corpus.jsonl", b'{"_id": "d9", "text": "caf\xe9"}\n'),
        ("corpus.jsonl.gz", b'{"_id": "d9", "text": "caf\xe9"}\n'),
        ("queries.jsonl", b'{"_id": "q9", "text": "caf\xe9"}\n'),
        ("qrels/test.tsv", b"q1\td\xe9\t1\n"),
    ],
    ids=["corpus.jsonl", "corpus.jsonl.gz", "queries.jsonl", "qrels"],
)
def test_a_byte_that_is_not_utf8_is_reported_with_its_file_and_line(tmp_path: Path, name: str, line: bytes) -> None:
    folder = write_dataset(tmp_path / "d", gz=name.endswith(".gz"))
    insert_line(folder / name, line, at=2)
    with pytest.raises(DatasetError, match=rf"^{Path(name).name} line 2: not UTF-8 text$"):
        load_beir(folder)


@pytest.mark.parametrize("value", ["42", "[1]", '"d1"', "null"])
@pytest.mark.parametrize("name", ["corpus.jsonl", "queries.jsonl"])
def test_a_line_that_is_not_a_json_object_is_reported_with_its_file_and_line(tmp_path: Path, name: str, value: str) -> None:
    folder = write_dataset(tmp_path / "d", gz=False)
    insert_line(folder / name, value.encode() + b"\n", at=2)
    with pytest.raises(DatasetError, match=rf"^{name} line 2: not a JSON object$"):
        load_beir(folder)


def test_a_corrupt_gzipped_corpus_is_reported(tmp_path: Path) -> None:
    folder = write_dataset(tmp_path / "d", gz=False)
    (folder / "corpus.jsonl").unlink()
    packed = gzip.compress(b"".join(json.dumps({"_id": f"d{i}", "text": "x" * 50}).encode() + b"\n" for i in range(50)))
    damaged = packed[:20] + bytes(byte ^ 0xFF for byte in packed[20:40]) + packed[40:]  # header intact, data not
    (folder / "corpus.jsonl.gz").write_bytes(damaged)
    with pytest.raises(DatasetError, match=r"^corpus\.jsonl\.gz: .*decompressing"):
        load_beir(folder)
