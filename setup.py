"""Builds the optional C Huffman coder (geofed/codec/_huffman_c.c) during `pip install`; everything else is in
pyproject.toml. `optional=True`: without a compiler the install still succeeds and the codec falls back to the
numba coder (then numpy), see geofed/codec/huffman_backend.py."""

import sys

from setuptools import Extension, setup

# -O3 unrolls the fixed-count symbol loops; -fno-wrapv undoes Python's -fwrapv (it costs the encoder ~5%: the C code
# relies on no signed overflow). Nothing CPU-specific (no -march): the build runs anywhere.
ARGS = [] if sys.platform == "win32" else ["-O3", "-std=c99", "-fno-wrapv"]

setup(ext_modules=[Extension("geofed.codec._huffman_c", ["geofed/codec/_huffman_c.c"], extra_compile_args=ARGS,
                             optional=True)])
