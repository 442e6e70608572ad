"""The stdlib demo corpus: deterministic, non-IID by module, balanced, with held-out modules."""

from __future__ import annotations

import pytest

from client_agent.data.corpus import (
    CorpusError,
    pack_balanced,
    read_file_list,
    split_by_module,
    split_directory,
    stdlib_files,
    stdlib_root,
    stdlib_split,
    write_split,
)


def _modules(files):
    root = stdlib_root()
    return {f.relative_to(root).parts[0].removesuffix(".py") for f in files}


def _bytes(files):
    return sum(f.stat().st_size for f in files)


@pytest.fixture(scope="module")
def files():
    return stdlib_files()


def test_stdlib_files_are_stdlib_sources_only(files):
    assert len(files) > 200
    assert all(f.suffix == ".py" for f in files)
    rel_parts = [f.relative_to(stdlib_root()).parts for f in files]
    assert not any("site-packages" in parts for parts in rel_parts)
    assert not any({"test", "tests", "idle_test"} & set(parts[:-1]) for parts in rel_parts)
    assert {"json", "email", "asyncio", "os"} <= _modules(files)


def test_split_is_deterministic_non_iid_and_balanced(files):
    clients = split_by_module(files, 4, seed=0)

    assert clients == split_by_module(files, 4, seed=0)
    assert all(clients)  # every client has data
    modules = [_modules(c) for c in clients]
    for i in range(4):
        for j in range(i + 1, 4):
            assert not modules[i] & modules[j], "a module is shared: the split is not by module"
    assert sorted(f for c in clients for f in c) == sorted(files)  # a partition
    sizes = [_bytes(c) for c in clients]
    assert max(sizes) / min(sizes) < 1.2


def test_seed_changes_which_client_gets_what(files):
    a = [frozenset(c) for c in split_by_module(files, 4, seed=0)]
    b = [frozenset(c) for c in split_by_module(files, 4, seed=1)]
    assert a != b and set(a) == set(b)  # same bins, other order


def test_stdlib_split_holds_out_eval_modules():
    split = stdlib_split(3, seed=0, eval_fraction=0.02)

    assert len(split.clients) == 3 and all(split.clients) and split.eval
    held = _modules(split.eval)
    assert all(not held & _modules(c) for c in split.clients)
    total = sum(_bytes(c) for c in split.clients) + _bytes(split.eval)
    assert 0.005 < _bytes(split.eval) / total < 0.05


def test_pack_balanced_errors():
    with pytest.raises(CorpusError, match="only 2 groups"):
        pack_balanced({"a": 1, "b": 2}, 3)
    with pytest.raises(CorpusError, match="at least 1"):
        pack_balanced({"a": 1}, 0)


def test_write_and_read_file_lists(tmp_path):
    split = stdlib_split(2, seed=0)
    lists = write_split(split, tmp_path)

    assert [p.name for p in lists] == ["client-0.list", "client-1.list"]
    assert tuple(read_file_list(lists[1])) == split.clients[1]
    assert tuple(read_file_list(tmp_path / "eval.list")) == split.eval
    with pytest.raises(CorpusError, match="does not exist"):
        read_file_list(tmp_path / "client-9.list")


def test_split_directory_keeps_groups_and_sidecars_together(tmp_path):
    (tmp_path / "news").mkdir()
    (tmp_path / "news" / "a.txt").write_text("x" * 500)
    (tmp_path / "news" / "b.txt").write_text("x" * 400)
    (tmp_path / "tokens.bin").write_bytes(b"\0\0" * 300)
    (tmp_path / "tokens.json").write_text('{"dtype": "uint16"}')
    (tmp_path / "notes.jsonl").write_text('{"text": "hi"}\n' * 20)
    (tmp_path / ".hidden.txt").write_text("secret")
    (tmp_path / "table.csv").write_text("a,b")

    parts = split_directory(tmp_path, 3)

    assert parts == split_directory(tmp_path, 3)
    assert all(parts)
    by_name = {p.name: i for i, part in enumerate(parts) for p in part}
    assert by_name["a.txt"] == by_name["b.txt"]
    assert "tokens.json" not in by_name and "table.csv" not in by_name  # a sidecar is read beside its .bin
    assert ".hidden.txt" not in by_name
    with pytest.raises(CorpusError, match="only 3 groups"):
        split_directory(tmp_path, 4)
    with pytest.raises(CorpusError, match="does not exist"):
        split_directory(tmp_path / "missing", 2)
