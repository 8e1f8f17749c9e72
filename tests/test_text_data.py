"""Text corpus: reading (.txt/.md/.jsonl, non-UTF-8), the document split, and deterministic resumable epochs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from trainer_core.contract.errors import DataError
from trainer_core.data.text import SEPARATOR, TextCorpus, read_corpus, split_documents

CONTEXT = 16
WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
]


def _prose(n: int, salt: int) -> str:
    """Distinct, deterministic text for document `salt`."""
    return " ".join(f"{WORDS[(i * 7 + salt) % len(WORDS)]}{salt}" for i in range(n)) + ".\n"


def _write_docs(folder: Path, count: int, words: int = 40) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        path = folder / f"doc-{i:03d}.txt"
        path.write_text(_prose(words, i), encoding="utf-8")
        paths.append(path)
    return paths


def _corpus(folder: Path, seed: int = 7, val_fraction: float = 0.1) -> TextCorpus:
    files = sorted(folder.glob("*.txt")) + sorted(folder.glob("*.jsonl")) + sorted(folder.glob("*.md"))
    return TextCorpus.from_files(files, folder, CONTEXT, val_fraction, seed)


def _epoch_rows(corpus: TextCorpus, epoch: int, batch_size: int, start_item: int = 0) -> torch.Tensor:
    """Every input row of an epoch from `start_item`, concatenated in order."""
    return torch.cat([batch["input"] for batch, _ in corpus.train_batches(epoch, batch_size, start_item)])


# ------------------------------------------------------------------------------------------------ reading


def test_non_utf8_file_is_decoded_with_replacement_counted_and_warned(tmp_path: Path) -> None:
    (tmp_path / "good.txt").write_text("plain text here\n", encoding="utf-8")
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("café crème brûlée\n".encode("latin-1"))
    docs, stats = read_corpus([tmp_path / "good.txt", latin], tmp_path)
    assert stats.non_utf8_files == [latin]
    latin_doc = next(d for d in docs if d.key == "latin1.txt")
    assert latin_doc.data == "caf\ufffd cr\ufffdme br\ufffdl\ufffde\n".encode()
    latin_doc.data.decode("utf-8")  # re-encoded: always valid UTF-8 now
    (warning,) = stats.warnings()
    assert "1 file(s) are not valid UTF-8" in warning and "latin1.txt" in warning


def test_jsonl_records_are_documents_and_bad_lines_are_counted(tmp_path: Path) -> None:
    lines = [
        json.dumps({"text": "first record", "id": 1}),
        "this is not json",
        json.dumps({"other": "no text field"}),
        json.dumps(["a", "list"]),
        json.dumps({"text": 42}),
        "",
        json.dumps({"text": "second record"}),
    ]
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    docs, stats = read_corpus([path], tmp_path)
    assert [d.data for d in docs] == [b"first record", b"second record"]
    assert [d.key for d in docs] == ["data.jsonl#1", "data.jsonl#7"]
    assert stats.jsonl_bad_lines == 4
    assert any("4 .jsonl line(s)" in w for w in stats.warnings())


def test_files_are_read_in_sorted_order_and_joined_with_the_separator(tmp_path: Path) -> None:
    (tmp_path / "b.md").write_text("# Bee\n", encoding="utf-8")
    (tmp_path / "a.txt").write_text("Ay\n", encoding="utf-8")
    (tmp_path / "c.txt").write_text("   \n", encoding="utf-8")  # whitespace only: not a document
    docs, stats = read_corpus([tmp_path / "c.txt", tmp_path / "b.md", tmp_path / "a.txt"], tmp_path)
    assert [d.key for d in docs] == ["a.txt", "b.md"]
    assert (stats.files, stats.documents, stats.empty_documents) == (3, 2, 1)
    corpus = TextCorpus.from_files([tmp_path / "a.txt", tmp_path / "b.md"], tmp_path, 4, 0.0, seed=1)
    assert bytes(corpus.train.tolist()) == b"Ay\n" + SEPARATOR + b"# Bee\n"


# -------------------------------------------------------------------------------------------------- split


def test_split_is_by_document_stable_and_near_the_fraction(tmp_path: Path) -> None:
    _write_docs(tmp_path, 40)
    docs, _ = read_corpus(sorted(tmp_path.glob("*.txt")), tmp_path)
    train, val = split_documents(docs, 0.1, CONTEXT)
    again_train, again_val = split_documents(list(reversed(docs)), 0.1, CONTEXT)
    assert {d.key for d in val} == {d.key for d in again_val}
    assert {d.key for d in train} | {d.key for d in val} == {d.key for d in docs}
    assert not {d.key for d in train} & {d.key for d in val}
    total = sum(len(d.data) for d in docs)
    assert 0.05 * total <= sum(len(d.data) for d in val) <= 0.15 * total


def test_adding_documents_never_moves_existing_ones_into_training(tmp_path: Path) -> None:
    _write_docs(tmp_path, 40)
    docs, _ = read_corpus(sorted(tmp_path.glob("*.txt")), tmp_path)
    _, val_before = split_documents(docs, 0.1, CONTEXT)
    (tmp_path / "zz-new.txt").write_text(_prose(40, 999), encoding="utf-8")
    docs_after, _ = read_corpus(sorted(tmp_path.glob("*.txt")), tmp_path)
    train_after, _ = split_documents(docs_after, 0.1, CONTEXT)
    # The split depends on names only: nothing held out before leaks into training now.
    assert not {d.key for d in val_before} & {d.key for d in train_after}


def test_split_does_not_depend_on_the_seed(tmp_path: Path) -> None:
    _write_docs(tmp_path, 30)
    assert torch.equal(_corpus(tmp_path, seed=1).val, _corpus(tmp_path, seed=2).val)


def test_single_document_is_split_by_chunk(tmp_path: Path) -> None:
    path = tmp_path / "book.txt"
    path.write_text("".join(_prose(30, i) for i in range(40)), encoding="utf-8")
    docs, _ = read_corpus([path], tmp_path)
    train, val = split_documents(docs, 0.1, CONTEXT)
    assert val and train
    assert all(d.key.startswith("book.txt@") for d in train + val)
    pieces = sorted(train + val, key=lambda d: int(d.key.split("@")[1]))
    assert b"".join(d.data for d in pieces) == docs[0].data


def test_zero_val_fraction_keeps_everything_for_training(tmp_path: Path) -> None:
    _write_docs(tmp_path, 10)
    corpus = _corpus(tmp_path, val_fraction=0.0)
    assert len(corpus.val) == 0 and corpus.val_items() == 0
    assert list(corpus.val_batches(4)) == []


def test_too_little_text_for_one_sequence_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "tiny.txt").write_text("short\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"tiny|data\.context_bytes"):
        TextCorpus.from_files([tmp_path / "tiny.txt"], tmp_path, 64, 0.0, seed=1)


# ------------------------------------------------------------------------------------------------ batches


def test_batches_are_next_byte_windows(tmp_path: Path) -> None:
    _write_docs(tmp_path, 20)
    corpus = _corpus(tmp_path)
    batch, items = next(corpus.train_batches(0, 5))
    assert items == 5
    assert batch["input"].shape == batch["target"].shape == (5, CONTEXT)
    assert batch["input"].dtype == batch["target"].dtype == torch.int64
    assert torch.equal(batch["input"][:, 1:], batch["target"][:, :-1])
    val = next(corpus.val_batches(3))
    assert torch.equal(val["input"][:, 1:], val["target"][:, :-1])


def test_epoch_order_is_deterministic_per_seed_and_epoch(tmp_path: Path) -> None:
    _write_docs(tmp_path, 20)
    first, second = _corpus(tmp_path, seed=3), _corpus(tmp_path, seed=3)
    assert torch.equal(_epoch_rows(first, 0, 8), _epoch_rows(second, 0, 8))
    assert not torch.equal(_epoch_rows(first, 0, 8), _epoch_rows(first, 1, 8))
    assert not torch.equal(_epoch_rows(first, 0, 8), _epoch_rows(_corpus(tmp_path, seed=4), 0, 8))


def test_every_epoch_has_the_same_item_count(tmp_path: Path) -> None:
    _write_docs(tmp_path, 20)
    corpus = _corpus(tmp_path)
    counts = {sum(n for _, n in corpus.train_batches(epoch, 7)) for epoch in range(6)}
    assert counts == {corpus.train_items()}


def test_start_item_continues_with_the_tail_of_the_epoch(tmp_path: Path) -> None:
    _write_docs(tmp_path, 20)
    corpus = _corpus(tmp_path)
    full = _epoch_rows(corpus, 2, 8)
    for start in (0, 1, 13, corpus.train_items() - 1):
        resumed = _epoch_rows(_corpus(tmp_path), 2, 5, start_item=start)  # fresh corpus: as after a restart
        assert torch.equal(resumed, full[start:])
    assert list(corpus.train_batches(2, 8, start_item=corpus.train_items())) == []


def test_batch_size_change_mid_epoch_skips_and_repeats_nothing(tmp_path: Path) -> None:
    _write_docs(tmp_path, 20)
    corpus = _corpus(tmp_path)
    full = _epoch_rows(corpus, 1, 8)
    rows, consumed = [], 0
    iterator = corpus.train_batches(1, 8)
    for _ in range(3):
        batch, items = next(iterator)
        rows.append(batch["input"])
        consumed += items
    # Out of memory: the engine halves the batch and asks again from the items it has consumed.
    for batch, items in corpus.train_batches(1, 4, start_item=consumed):
        rows.append(batch["input"])
        consumed += items
    assert consumed == corpus.train_items()
    assert torch.equal(torch.cat(rows), full)


def test_bad_arguments_are_rejected(tmp_path: Path) -> None:
    _write_docs(tmp_path, 10)
    corpus = _corpus(tmp_path)
    with pytest.raises(ValueError):
        next(corpus.train_batches(0, 0))
    with pytest.raises(ValueError):
        next(corpus.train_batches(0, 4, start_item=corpus.train_items() + 1))


def test_from_folder_finds_text_files_like_the_scan(tmp_path: Path) -> None:
    _write_docs(tmp_path / "nested", 6)
    (tmp_path / ".hidden.txt").write_text(_prose(40, 77), encoding="utf-8")
    (tmp_path / "notes.md").write_text(_prose(40, 78), encoding="utf-8")
    corpus = TextCorpus.from_folder(tmp_path, CONTEXT, 0.2, seed=1)
    assert corpus.stats.files == 7
    assert "77" not in bytes(corpus.train.tolist() + corpus.val.tolist()).decode()
