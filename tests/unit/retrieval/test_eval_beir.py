"""Reading BEIR folders, and turning their documents into Cairn documents."""
from __future__ import annotations

import gzip
import json
import shutil
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


def test_text_without_spaces_is_cut_inside_its_first_word() -> None:
    # Chinese or Japanese text has no word ends to cut at: left whole, --whole-docs would index it as several chunks.
    assert truncate_to_tokens("猫が好きです。犬も好き", max_tokens=4, count_tokens=len) == "猫が好き"
    assert truncate_to_tokens("abcdefgh ij", max_tokens=3, count_tokens=len) == "abc"


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


@pytest.mark.parametrize(
    ("remove", "missing"),
    [
        (["corpus.jsonl", "queries.jsonl", "qrels"], "no corpus.jsonl[.gz], queries.jsonl[.gz], qrels/"),
        (["queries.jsonl"], "no queries.jsonl[.gz]"),
        (["qrels"], "no qrels/"),
    ],
    ids=["nothing", "no queries", "no qrels folder"],
)
def test_a_folder_that_is_not_beir_names_every_missing_part(tmp_path: Path, remove: list[str], missing: str) -> None:
    folder = write_dataset(tmp_path / "d", gz=False)
    for name in remove:
        shutil.rmtree(folder / name) if (folder / name).is_dir() else (folder / name).unlink()
    with pytest.raises(DatasetError) as refused:
        load_beir(folder)
    assert str(refused.value) == (
        f"{folder}: not a BEIR dataset: {missing} (expected corpus.jsonl[.gz], queries.jsonl[.gz] and qrels/<split>.tsv)"
    )


def test_a_split_that_does_not_exist_lists_the_splits_there_are(tmp_path: Path) -> None:
    folder = write_dataset(tmp_path / "d", gz=False)
    with pytest.raises(DatasetError, match=r"^no qrels/dev\.tsv: the splits here are test, train$"):
        load_beir(folder, split="dev")
    for split in ("test", "train"):
        (folder / "qrels" / f"{split}.tsv").unlink()
    with pytest.raises(DatasetError, match=r"^no qrels/test\.tsv: the qrels folder holds no \.tsv file$"):
        load_beir(folder)


@pytest.mark.parametrize(
    ("record", "problem"),
    [
        ({"text": "no id"}, "no _id"),
        ({"_id": None, "text": "null id"}, "_id must be a non-empty string or an integer, not null"),
        ({"_id": "", "text": "empty id"}, '_id must be a non-empty string or an integer, not ""'),
        ({"_id": 4.5, "text": "float id"}, "_id must be a non-empty string or an integer, not 4.5"),
        ({"_id": True, "text": "bool id"}, "_id must be a non-empty string or an integer, not true"),
        ({"_id": ["d1"], "text": "list id"}, '_id must be a non-empty string or an integer, not ["d1"]'),
        ({"_id": "d1", "text": "again"}, "_id 'd1' is already used on line 1"),
        ({"_id": "3", "text": "as a string"}, "_id '3' is already used on line 3"),
    ],
    ids=["missing", "null", "empty", "float", "bool", "list", "duplicate", "duplicate number"],
)
def test_a_corpus_id_that_cannot_be_matched_to_the_qrels_is_refused_with_its_line(
    tmp_path: Path, record: dict, problem: str
) -> None:
    folder = write_dataset(tmp_path / "d", gz=False)
    insert_line(folder / "corpus.jsonl", json.dumps(record).encode() + b"\n", at=4)
    with pytest.raises(DatasetError) as refused:
        load_beir(folder)
    assert str(refused.value) == f"corpus.jsonl line 4: {problem}"


def test_a_repeated_query_id_is_refused_with_its_line(tmp_path: Path) -> None:
    folder = write_dataset(tmp_path / "d", gz=False)
    insert_line(folder / "queries.jsonl", b'{"_id": "q1", "text": "what purrs, again"}\n', at=3)
    with pytest.raises(DatasetError, match=r"^queries\.jsonl line 3: _id 'q1' is already used on line 1$"):
        load_beir(folder)


def test_a_corpus_without_any_text_is_refused_before_the_model_loads(tmp_path: Path) -> None:
    folder = write_dataset(tmp_path / "d", gz=False)
    blank = [{"_id": "d1", "title": "", "text": ""}, {"_id": "d2", "text": "  \n "}, {"_id": 3, "title": None}]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in blank), encoding="utf-8")
    with pytest.raises(DatasetError, match=r"^corpus\.jsonl: no document has a title or text$"):
        load_beir(folder)


def test_qrels_that_cannot_score_anything_are_refused(tmp_path: Path) -> None:
    folder = write_dataset(tmp_path / "d", gz=False)
    (folder / "qrels" / "test.tsv").write_text("q1\td1\t0\nq2\td2\t0\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"^qrels/test\.tsv marks no document relevant \(every score is 0 or less\)$"):
        load_beir(folder)
    (folder / "qrels" / "test.tsv").write_text("q1\tD1\t1\nq2\tD2\t1\nq2\td1\t0\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"^qrels/test\.tsv: none of the 2 documents it marks relevant is in corpus\.jsonl "
                       r"\(as 'D1'\): do its corpus-id values match the corpus _id values\?$"):
        load_beir(folder)


def test_relevant_documents_missing_from_the_corpus_are_counted(tmp_path: Path) -> None:
    folder = write_dataset(tmp_path / "d", gz=False)
    (folder / "qrels" / "test.tsv").write_text("q1\td1\t1\nq2\td2\t1\nq2\tgone\t2\nq2\tzero\t0\n", encoding="utf-8")
    assert load_beir(folder).relevant_missing == 1, "judged 0: not relevant, so not missed"
    assert load_beir(write_dataset(tmp_path / "e", gz=False)).relevant_missing == 0


@pytest.mark.parametrize("header", ["qid\tdocid\trel", "query_id\tcorpus_id\tscore", "\ufeffquery-id\tcorpus-id\tscore"])
def test_a_qrels_header_under_another_name_is_skipped(tmp_path: Path, header: str) -> None:
    folder = write_dataset(tmp_path / "d", gz=False, header=False)
    path = folder / "qrels" / "test.tsv"
    path.write_text(header + "\n" + path.read_text(encoding="utf-8"), encoding="utf-8")
    assert read_qrels(path) == {"q1": {"d1": 1}, "q2": {"d2": 2, "d1": 0}}
    path.write_text("q1\td1\t1\nq2\td2\ttwo\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"^test\.tsv line 2: score is not an integer$"):
        read_qrels(path)


def test_files_that_begin_with_a_byte_order_mark_load(tmp_path: Path) -> None:
    folder = write_dataset(tmp_path / "d", gz=False)
    for name in ("corpus.jsonl", "queries.jsonl"):
        (folder / name).write_bytes(b"\xef\xbb\xbf" + (folder / name).read_bytes())
    dataset = load_beir(folder)
    assert list(dataset.corpus) == ["d1", "d2", "3"] and list(dataset.queries) == ["q1", "q2"]


def test_queries_judged_but_missing_are_counted_in_the_message(tmp_path: Path) -> None:
    folder = write_dataset(tmp_path / "d", gz=False)
    extra = "".join(f"gone{i}\td1\t1\n" for i in range(7))
    (folder / "qrels" / "test.tsv").write_text("q1\td1\t1\n" + extra, encoding="utf-8")
    with pytest.raises(DatasetError, match=r"^qrels/test\.tsv judges queries not in the queries file: gone0, gone1, gone2, "
                       r"gone3, gone4 and 2 more$"):
        load_beir(folder)


def test_unicode_ids_and_text_load_unchanged(tmp_path: Path) -> None:
    folder = tmp_path / "ünï"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(json.dumps({"_id": "doc-é", "title": "Café", "text": "日本語の文"}) + "\n", encoding="utf-8")
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q-ü", "text": "日本"}, ensure_ascii=False) + "\n", encoding="utf-8")
    (folder / "qrels" / "test.tsv").write_text("q-ü\tdoc-é\t1\n", encoding="utf-8")
    dataset = load_beir(folder)
    assert (dataset.name, dataset.queries, dataset.qrels) == ("ünï", {"q-ü": "日本"}, {"q-ü": {"doc-é": 1}})
    assert dataset.corpus["doc-é"].text == "日本語の文"


@pytest.mark.parametrize(
    ("record", "problem"),
    [
        ({"_id": "q1"}, "query 'q1' has no text"),
        ({"_id": "q1", "text": None}, "query 'q1' has no text"),
        ({"_id": "q1", "text": " \n "}, "query 'q1' has no text"),
        ({"_id": "q1", "text": "\u200b "}, "query 'q1' has no text"),
        ({"_id": "q1", "query": "what purrs"}, "query 'q1' has no text"),
        ({"_id": "q1", "text": ["what", "purrs"]}, 'query \'q1\': text must be a string, not ["what", "purrs"]'),
    ],
    ids=["missing", "null", "blank", "invisible", "other key", "list"],
)
def test_a_judged_query_without_text_is_refused_with_its_line(tmp_path: Path, record: dict, problem: str) -> None:
    # Searched as "", it would be scored on whatever an empty query happens to rank first.
    folder = write_dataset(tmp_path / "d", gz=False)
    lines = (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (folder / "queries.jsonl").write_text(json.dumps(record) + "\n" + "".join(lines[1:]), encoding="utf-8")
    with pytest.raises(DatasetError) as refused:
        load_beir(folder)
    assert str(refused.value) == f"queries.jsonl line 1: {problem}"


def test_a_query_without_text_that_the_split_does_not_judge_is_left_alone(tmp_path: Path) -> None:
    folder = write_dataset(tmp_path / "d", gz=False)
    insert_line(folder / "queries.jsonl", b'{"_id": "q9"}\n', at=3)
    assert load_beir(folder).queries == {"q1": "what purrs", "q2": "what barks"}
