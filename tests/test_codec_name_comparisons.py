"""Outside `geofed/codec`, code asks a codec's declared facts (`geofed.codec.base.Codec`) instead of comparing
its name: every comparison of a string to a codec name in the product packages is listed here with why it is
not one, so a new one fails until it is made a question to the codec (or justified in this list)."""

from __future__ import annotations

import typing
from collections import Counter

from geofed.config import CodecName
from geofed_testing.name_comparisons import comparisons_by_file, name_comparisons

SHIPPED = set(typing.get_args(CodecName)) - {"auto"}  # 'auto' picks a codec; it is no codec's name

ALLOWED = Counter({  # path -> comparisons whose string only happens to spell a codec name
    "client_agent/training/precision.py": 2,  # training precisions ("bf16", "fp32"), not codecs
    "client_agent/training/fsdp.py": 1,  # the training precision "fp32"
    "geofed_apps/local.py": 1,  # the delta form "sparse" (`CodecConfig.delta_form`), a fact already asked
})


def _spells_a_codec(text: str, names: set[str] = SHIPPED) -> bool:
    return text in names or any(text.startswith((f"{n}+", f"{n}/")) for n in names)


def test_the_finder_sees_each_kind_of_comparison(tmp_path):
    src = tmp_path / "m.py"
    src.write_text('a = n == "fp32"\nb = "int8" != n\nc = n in ("bf16", "x")\nd = n.startswith("fp32")\n'
                   'e = n == "int8+huffman"\nf = n == "auto"\ng = {"fp32": 1}\n')
    assert name_comparisons(src, _spells_a_codec) == [1, 2, 3, 4, 5]


def test_no_codec_name_is_compared_outside_the_codec_package():
    found, where = comparisons_by_file(_spells_a_codec, lambda rel: rel.startswith("geofed/codec/"))
    assert found == ALLOWED, f"compare by the codec's facts instead of its name: {where}"
    assert sum(ALLOWED.values()) <= 4
