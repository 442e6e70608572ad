"""`check_before_join`: each mismatch between a site and its federation is one specific error, found without
building a model (so before a one-time token is spent)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from client_agent.data.files import DataError
from client_agent.data.tokenizer import ByteTokenizer, TokenizerError
from client_agent.errors import SiteError
from client_agent.preflight import DeviceError, check_before_join
from client_agent.training.model import ModelConfigError
from client_agent.training.precision import PrecisionError
from geofed.config import ClientConfig, FederationConfig

TOKENS = np.arange(4000, dtype=np.uint16) % 200


def _fed(**model) -> FederationConfig:
    small = {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32}
    return FederationConfig.model_validate({"model": {**small, **model}, "training": {"precision": "fp32"}})


def _cfg(tmp_path) -> ClientConfig:
    return ClientConfig(client_id="t.pre", data=str(tmp_path))


def test_a_fitting_site_passes_and_gets_its_data_stream(tmp_path):
    checked = check_before_join(_cfg(tmp_path), _fed(), ByteTokenizer(), TOKENS, torch.device("cpu"))

    assert checked.paradigm.name == "pretrain" and checked.precision.name == "fp32"
    assert checked.stream.block_size == 32 and checked.stream.tokens.size + checked.stream.eval_tokens.size == 4000


def test_a_sites_eval_data_is_held_out_instead_of_the_tail_of_its_data(tmp_path):
    held = np.arange(500, dtype=np.uint16) % 100
    checked = check_before_join(_cfg(tmp_path), _fed(), ByteTokenizer(), TOKENS, torch.device("cpu"), held)

    assert checked.stream.tokens.size == 4000 and np.array_equal(checked.stream.eval_tokens, held)


@pytest.mark.parametrize(
    ("fed", "tokens", "device", "error", "fragment"),
    [
        (_fed(vocab_size=256), TOKENS, "cpu", TokenizerError, "tokenizer 'byte' has 257 ids (EOS 256)"),
        (_fed(), TOKENS[:40], "cpu", DataError, "40 tokens are too few to hold out 33 for evaluation"),
        (_fed(path="/nonexistent/model"), TOKENS, "cpu", ModelConfigError, "'/nonexistent/model' is not a directory"),
        (
            FederationConfig.model_validate({"training": {"precision": "fp16"}}),
            TOKENS,
            "cpu",
            PrecisionError,
            "fp16 training needs a CUDA device, not cpu",
        ),
        (_fed(), TOKENS, "cuda:99", DeviceError, "device 'cuda:99' requested but this machine has"),
    ],
    ids=["vocab", "data", "model-path", "precision", "device"],
)
def test_each_mismatch_is_one_specific_error(tmp_path, fed, tokens, device, error, fragment):
    with pytest.raises(error) as got:
        check_before_join(_cfg(tmp_path), fed, ByteTokenizer(), tokens, torch.device(device))

    assert fragment in str(got.value) and "\n" not in str(got.value)


def _examples(tmp_path, line: str):
    from client_agent.data.files import load_data

    (tmp_path / "d").mkdir(exist_ok=True)
    (tmp_path / "d" / "r.jsonl").write_text(line * 40)
    return load_data(tmp_path / "d", ByteTokenizer())[0]


PREF = '{"prompt": "a prompt", "chosen": "yes", "rejected": "no"}\n'
PAIR = '{"prompt": "a prompt", "completion": "yes"}\n'


@pytest.mark.parametrize(
    ("paradigm", "data", "fragment"),
    [
        ("dpo", PAIR, "paradigm 'dpo' trains on preference records (prompt, chosen, rejected); --data: "
                      "{d}/r.jsonl:1 is a prompt/completion record"),
        ("dpo", None, "paradigm 'dpo' trains on preference records (prompt, chosen, rejected); --data: it holds text"),
        ("lora", PREF, "{d}/r.jsonl:1: a preference record (prompt, chosen, rejected), but paradigm 'lora' trains on "
                       "text or prompt/completion records (--data)"),
        ("pretrain", PREF, "but paradigm 'pretrain' trains on text or prompt/completion records"),
    ],
)
def test_data_of_a_kind_the_paradigm_does_not_train_on_is_refused(tmp_path, paradigm, data, fragment):
    # Prepare
    fed = FederationConfig.model_validate({"model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32},
                                           "training": {"precision": "fp32"}, "paradigm": {"name": paradigm}})
    loaded = TOKENS if data is None else _examples(tmp_path, data)

    # Execute
    with pytest.raises(SiteError) as got:
        check_before_join(_cfg(tmp_path), fed, ByteTokenizer(), loaded, torch.device("cpu"))

    # Assert
    assert fragment.format(d=tmp_path / "d") in str(got.value)
    assert "\n" not in str(got.value)


@pytest.mark.parametrize(("paradigm", "line"), [("dpo", PREF), ("lora", PAIR)])
def test_data_of_the_paradigm_s_kind_passes_and_held_out_data_is_checked_too(tmp_path, paradigm, line):
    # Prepare: training data the paradigm takes, held-out data of the other kind
    fed = FederationConfig.model_validate({"model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32},
                                           "training": {"precision": "fp32"}, "paradigm": {"name": paradigm}})
    data = _examples(tmp_path, line)
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "r.jsonl").write_text((PAIR if line == PREF else PREF) * 10)
    from client_agent.data.files import load_data

    held = load_data(tmp_path / "h", ByteTokenizer())[0]

    # Execute
    checked = check_before_join(_cfg(tmp_path), fed, ByteTokenizer(), data, torch.device("cpu"))
    with pytest.raises(SiteError, match=r"--eval-data"):
        check_before_join(_cfg(tmp_path), fed, ByteTokenizer(), data, torch.device("cpu"), held)

    # Assert
    assert checked.paradigm.name == paradigm and len(checked.stream.examples) > 0
