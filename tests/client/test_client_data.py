"""A site's data: loading txt/jsonl/bin, refusing unusable files, and a resumable batch stream."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from client_agent.data import files
from client_agent.data.files import DataError, load_tokens
from client_agent.data.streams import TokenStream, part_of_tokens, rank_rows, split_tail
from client_agent.data.tokenizer import ByteTokenizer

TOK = ByteTokenizer()


@pytest.fixture
def data_dir(tmp_path):
    d = tmp_path / "data"
    (d / "sub").mkdir(parents=True)
    (d / "a.txt").write_text("hello")
    (d / "sub" / "b.md").write_text("héllo")
    records = [{"text": "one"}, {"text": "two"}]
    (d / "c.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    np.array([1, 2, 3, 256], dtype=np.uint16).tofile(d / "d.bin")
    (d / "README").write_text("no suffix")  # text
    (d / "ignored.csv").write_text("a,b")
    return d


def test_loads_every_format_and_suffixless_files_as_text(data_dir):
    tokens, report = load_tokens(data_dir, TOK)

    eos = [TOK.eos_id]
    readme = list(b"no suffix") + eos
    a_txt = list(b"hello") + eos
    c_jsonl = list(b"one") + eos + list(b"two") + eos
    d_bin = [1, 2, 3, 256]
    b_md = list("héllo".encode()) + eos
    expected = readme + a_txt + c_jsonl + d_bin + b_md  # sorted path order: README, a, c, d, sub/b
    assert tokens.tolist() == expected
    assert report.files == 5
    assert report.tokens == len(expected)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("e.txt", b"\xff\xfe latin-1 \xe9", r"e.txt: not UTF-8 text \(byte 0xff at offset 0\)"),
        ("blob", b"ELF\x00\x01\x02", r"blob: a binary file \(it holds NUL bytes\)"),
        ("c.jsonl", b'{"text": "ok"}\n{"text": \n', r"c.jsonl:2: not a JSON line"),
        ("c.jsonl", b'{"text": "ok"}\n{"title": "t"}\n',
         r"c.jsonl:2: a record with keys \['title'\] matches no schema"),
        ("c.jsonl", b'["a"]\n', r"c.jsonl:1: a record must be a JSON object, got list"),
    ],
)
def test_an_unusable_file_or_line_is_a_data_error_naming_it(data_dir, name, content, message):
    (data_dir / name).write_bytes(content)
    with pytest.raises(DataError, match=message):
        load_tokens(data_dir, TOK)


def test_bin_sidecar_dtype_and_zero_copy(tmp_path):
    np.arange(100, dtype=np.uint32).tofile(tmp_path / "t.bin")
    (tmp_path / "t.json").write_text('{"dtype": "uint32"}')

    tokens, report = load_tokens(tmp_path, TOK)

    assert isinstance(tokens, np.memmap) and tokens.dtype == np.uint32
    assert tokens.tolist() == list(range(100))


def test_bin_from_another_tokenizer_is_an_error(tmp_path):
    np.array([5, 50000], dtype=np.uint16).tofile(tmp_path / "t.bin")
    with pytest.raises(DataError, match="another tokenizer"):
        load_tokens(tmp_path, TOK)


def test_empty_or_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load_tokens(tmp_path / "missing", TOK)
    with pytest.raises(DataError, match="has no data files"):
        load_tokens(tmp_path, TOK)
    (tmp_path / "empty.txt").write_bytes(b"")
    with pytest.raises(DataError, match="no usable tokens in 1 files"):
        load_tokens(tmp_path, TOK)


def test_cache_tokenises_once(data_dir, tmp_path, monkeypatch):
    cache = tmp_path / "run" / "tokens.npy"
    first, report = load_tokens(data_dir, TOK, cache=cache)
    real_tokenize = files.tokenize_files

    def must_not_tokenize(*args, **kwargs):
        raise AssertionError("tokenised again despite a valid cache")

    monkeypatch.setattr(files, "tokenize_files", must_not_tokenize)
    again, report_again = load_tokens(data_dir, TOK, cache=cache)
    assert np.array_equal(first, again) and report_again == report

    monkeypatch.setattr(files, "tokenize_files", real_tokenize)
    (data_dir / "a.txt").write_text("hello, longer now")  # a changed file invalidates the cache
    changed, _ = load_tokens(data_dir, TOK, cache=cache)
    assert changed.size == first.size + len(", longer now")


def test_file_list_source(data_dir):
    tokens, report = load_tokens([data_dir / "a.txt", data_dir / "a.txt"], TOK)
    assert tokens.tolist() == (list(b"hello") + [TOK.eos_id]) * 2 and report.files == 2


def _stream(n_tokens=5000, block=16, seed=3):
    tokens = np.arange(n_tokens, dtype=np.int64) % 257
    return TokenStream(tokens, block, seed, eval_fraction=0.1)


def test_resume_gives_exactly_the_uninterrupted_batches():
    """Stop after k batches, restore the position in a new stream: the next batches are identical."""
    reference = _stream()
    uninterrupted = [reference.next_batch(7) for _ in range(80)]  # crosses several epochs

    for cut in (0, 13, 41, 79):
        first = _stream()
        seen = [first.next_batch(7) for _ in range(cut)]
        resumed = _stream()
        resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))  # survives serialisation
        seen += [resumed.next_batch(7) for _ in range(80 - cut)]
        assert all(torch.equal(a, b) for a, b in zip(seen, uninterrupted, strict=True)), cut


def test_each_epoch_visits_every_window_once():
    stream = _stream(n_tokens=2000, block=16)
    starts_per_epoch = stream._epoch_starts(0).size
    batch = stream.next_batch(starts_per_epoch)

    assert batch.shape == (starts_per_epoch, 17) and batch.dtype == torch.long
    firsts = batch[:, 0].tolist()
    assert len(set(map(tuple, batch.tolist()))) == starts_per_epoch  # no window twice
    assert firsts != sorted(firsts)  # shuffled
    assert stream.position == (1, 0)
    # Windows are contiguous runs of the token array: next token = previous + 1 (mod 257 here).
    assert torch.all((batch[:, 1:] - batch[:, :-1]) % 257 == 1)


def test_ranks_split_the_same_global_batch():
    whole = _stream().next_batch(9)
    parts = [_stream().next_batch(9, rank=r, world=2) for r in range(2)]
    assert torch.equal(torch.cat(parts), whole)
    assert [p.shape[0] for p in parts] == [4, 5]
    assert rank_rows(8, 1, 2) == slice(4, 8)


def test_eval_batches_are_fixed_and_held_out():
    stream = _stream()
    a = stream.eval_batches(3, 4)
    stream.next_batch(50)
    b = stream.eval_batches(3, 4)

    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert [x.shape for x in a] == [(4, 17)] * 3
    assert stream.tokens.size + stream.eval_tokens.size == 5000


def test_position_from_other_data_is_refused():
    state = _stream(seed=3).state_dict()
    with pytest.raises(DataError, match="seed=3"):
        _stream(seed=4).load_state_dict(state)
    with pytest.raises(DataError, match="num_tokens"):
        _stream(n_tokens=6000).load_state_dict(state)


def test_too_little_data_is_a_clear_error():
    with pytest.raises(DataError, match="too few"):
        TokenStream(np.arange(20), 16)
    with pytest.raises(DataError, match="fewer than one window"):
        TokenStream(np.arange(10), 16, eval_tokens=np.arange(100))


def test_split_tail_and_shards():
    train, held = split_tail(np.arange(100), 0.1, 5)
    assert train.size == 90 and held[0] == 90
    shards = [part_of_tokens(np.arange(10), i, 3) for i in range(3)]
    assert np.array_equal(np.concatenate(shards), np.arange(10))
