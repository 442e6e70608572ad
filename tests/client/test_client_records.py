"""JSONL schemas: prompt/completion, preference, Alpaca, text and chat records read, anything else refused by file
and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from client_agent.data.files import DataError, Examples, load_data
from client_agent.data.records import Preference, read_record
from client_agent.data.tokenizer import ByteTokenizer, load_tokenizer
from geofed_testing.user_model import make_bpe_tokenizer

TOK = ByteTokenizer()
CHAT = ("{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}")


@pytest.fixture(scope="module")
def chat_tokenizer(tmp_path_factory) -> Path:
    """A small BPE tokenizer whose files define a chat template."""
    from transformers import AutoTokenizer

    directory = make_bpe_tokenizer(tmp_path_factory.mktemp("tok"), vocab_size=300,
                                   texts=["<user>hello there\n<assistant>general kenobi\n"] * 20)
    tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    tokenizer.chat_template = CHAT
    tokenizer.save_pretrained(directory)
    return directory


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        ({"prompt": "p", "completion": "c"}, ("p", "c")),
        ({"instruction": "Name it.", "input": "GPL text", "output": "GPL-3"}, ("Name it.\n\nGPL text", "GPL-3")),
        ({"instruction": "Name it.", "input": "", "output": "GPL-3"}, ("Name it.", "GPL-3")),
        ({"instruction": "Name it.", "output": "GPL-3"}, ("Name it.", "GPL-3")),
        ({"text": "a document"}, "a document"),
        ({"prompt": "p", "chosen": "a", "rejected": "b"}, Preference("p", "a", "b", "f.jsonl:1")),
    ],
)
def test_each_schema_is_read_as_text_or_a_pair(record, expected):
    assert read_record(record, "f.jsonl:1", TOK) == expected


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"title": "t", "body": "b"}, r"f.jsonl:7: a record with keys \['body', 'title'\] matches no schema "
                                      r"\(expected prompt/completion, prompt/chosen/rejected, "
                                      r"instruction/input/output, text or messages\)"),
        ({"instruction": "i"}, r"f.jsonl:7: a instruction/input/output record has no 'output' field"),
        ({"input": "i", "output": "o"}, r"f.jsonl:7: a instruction/input/output record has no 'instruction' field"),
        ({"instruction": "i", "output": 3}, r"f.jsonl:7: 'output' must be a string, got int"),
        ({"prompt": "p", "output": "o"}, r"f.jsonl:7: a record mixes the prompt/completion and instruction/input"),
        ({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]},
         r"f.jsonl:7: a messages record needs a tokenizer with a chat template; the byte tokenizer has none"),
        ("a string", r"f.jsonl:7: a record must be a JSON object, got str"),
        ({"prompt": "p", "chosen": "a"}, r"f.jsonl:7: a preference record has no 'rejected' field"),
        ({"chosen": "a", "rejected": "b"}, r"f.jsonl:7: a preference record has no 'prompt' field"),
        ({"prompt": "p", "chosen": "a", "rejected": "a"},
         r"f.jsonl:7: 'chosen' and 'rejected' are the same completion"),
        ({"prompt": "p", "chosen": "", "rejected": "b"}, r"f.jsonl:7: 'chosen' must be a non-empty string"),
        ({"prompt": "", "chosen": "a", "rejected": "b"}, r"f.jsonl:7: 'prompt' must be a non-empty string"),
        ({"prompt": "p", "chosen": "a", "rejected": 2}, r"f.jsonl:7: 'rejected' must be a non-empty string"),
        ({"prompt": "p", "completion": "a", "chosen": "a", "rejected": "b"},
         r"f.jsonl:7: a record mixes the prompt/completion and preference schemas"),
    ],
)
def test_a_record_of_no_schema_is_refused_naming_the_file_line_and_schemas(record, message):
    with pytest.raises(DataError, match=message):
        read_record(record, "f.jsonl:7", TOK)


def test_alpaca_records_train_as_prompt_completion_examples(tmp_path):
    records = [{"instruction": "Say hi", "input": "", "output": "hi"},
               {"instruction": "Echo", "input": "x", "output": "x"}]
    (tmp_path / "alpaca.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))

    loaded, report = load_data(tmp_path, TOK)

    assert isinstance(loaded, Examples) and report.examples == 2
    assert loaded.prompt_lens.tolist() == [len("Say hi"), len("Echo\n\nx")]
    assert loaded.counted.tolist() == [len("hi") + 1, len("x") + 1]


def test_preference_records_train_as_their_prompt_and_chosen_completion(tmp_path):
    # Prepare
    records = [{"prompt": "ab", "chosen": "xyz", "rejected": "q"}, {"prompt": "c", "chosen": "de", "rejected": "fgh"}]
    (tmp_path / "prefs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))

    # Execute
    loaded, report = load_data(tmp_path, TOK)

    # Assert: the loss counts the chosen completion and its EOS; the examples know they are preferences
    assert isinstance(loaded, Examples) and report.examples == 2 and loaded.preferences
    assert loaded.prompt_lens.tolist() == [2, 1] and loaded.counted.tolist() == [4, 3]
    assert bytes(loaded.tokens[loaded.starts[0] : loaded.starts[1] - 1].tolist()) == b"abxyz"


def test_preference_records_survive_the_token_cache(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "prefs.jsonl").write_text('{"prompt": "p", "chosen": "a", "rejected": "b"}\n')
    load_data(tmp_path / "d", TOK, cache=tmp_path / "tokens.npy")

    cached, _ = load_data(tmp_path / "d", TOK, cache=tmp_path / "tokens.npy")

    assert isinstance(cached, Examples) and cached.preferences and cached.part(0, 1).preferences


def test_a_cache_of_examples_written_before_preference_records_were_read_is_rebuilt(tmp_path):
    # Prepare: the cache's metadata as a reader that knew no preference records wrote it
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "prefs.jsonl").write_text('{"prompt": "p", "chosen": "a", "rejected": "b"}\n')
    load_data(tmp_path / "d", TOK, cache=tmp_path / "tokens.npy")
    meta = json.loads((tmp_path / "tokens.json").read_text())
    del meta["preferences"]
    (tmp_path / "tokens.json").write_text(json.dumps(meta))

    # Execute
    cached, _ = load_data(tmp_path / "d", TOK, cache=tmp_path / "tokens.npy")

    # Assert
    assert cached.preferences and "preferences" in json.loads((tmp_path / "tokens.json").read_text())


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"a.jsonl": '{"prompt": "p", "completion": "c"}\n',
          "b.jsonl": '{"prompt": "p", "chosen": "a", "rejected": "b"}\n'},
         r"the data mix prompt/completion records \(.*a.jsonl:1\) and preference records \(.*b.jsonl:1\)"),
        ({"a.jsonl": '{"prompt": "p", "chosen": "a", "rejected": "b"}\n', "b.txt": "some text"},
         r"the data mix text \(.*b.txt\) and preference records \(.*a.jsonl:1\)"),
    ],
)
def test_preference_records_mixed_with_another_kind_are_refused(tmp_path, files, message):
    for name, content in files.items():
        (tmp_path / name).write_text(content)

    with pytest.raises(DataError, match=message):
        load_data(tmp_path, TOK)


def test_a_chat_is_rendered_with_the_tokenizers_template(chat_tokenizer, tmp_path):
    tokenizer = load_tokenizer(chat_tokenizer)
    chat = {"messages": [{"role": "user", "content": "hello there"},
                         {"role": "assistant", "content": "general kenobi"}]}

    prompt, completion = read_record(chat, "c.jsonl:1", tokenizer)

    assert (prompt, completion) == ("<user>hello there\n<assistant>", "general kenobi\n")
    (tmp_path / "c.jsonl").write_text(json.dumps(chat) + "\n")
    loaded, _ = load_data(tmp_path, tokenizer)
    assert isinstance(loaded, Examples) and len(loaded) == 1
    assert tokenizer.decode(loaded.tokens[loaded.prompt_lens[0]:-1]) == "general kenobi\n"


def test_a_chat_whose_last_message_is_not_the_assistants_is_refused(chat_tokenizer):
    chat = {"messages": [{"role": "assistant", "content": "hi"}, {"role": "user", "content": "bye"}]}
    with pytest.raises(DataError, match="c.jsonl:3: a chat's last message must be the assistant's"):
        read_record(chat, "c.jsonl:3", load_tokenizer(chat_tokenizer))
