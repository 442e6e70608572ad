"""`geofed export`: a PS checkpoint as a model directory transformers loads, with the tokenizer beside it.

The PS holds the federation's exchanged vector (`geofed-ps/2`: one flat fp32 array and the manifest of its
tensors) and no torch. The model it belongs to is rebuilt here as every client builds it: the client's
paradigm builds the model (seeded init or `model.path`) and reparametrises it, the flat vector is loaded
into its exchanged parameters, and the paradigm's own `export` gives the model a user takes away (e.g.
LoRA merged into the base). Written into the output directory:

- the merged model (`AutoModelForCausalLM.from_pretrained(DIR)`) and the federation's tokenizer
  (`AutoTokenizer.from_pretrained(DIR)`), `model.tokenizer` or `--tokenizer`;
- when the PS holds peft adapters (LoRA): `adapter/` in peft's format, and `base/` when the base is the
  seeded init rather than a `model.path` (`PeftModel.from_pretrained(base, DIR/adapter)`);
- `geofed-export.json`: the version, the paradigm and what each part is.

Hybrid LoRA's adapters are private to each site and never reach the PS: its export is the shared base.
Sharded PS checkpoints are put back together from every shard's slice of one version.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from geofed.checkpoint_shape import fill_checkpoint_shape
from geofed.cli_flags import SettingsError, load_settings_file, validate_settings
from geofed.config import FederationConfig
from geofed.manifest import manifest_difference
from ps_server.checkpoint import CheckpointStore, PSCheckpoint

from .shards import newest_sharded

if TYPE_CHECKING:
    from torch import nn

    from client_agent.paradigms import ClientParadigm

SETTINGS_NAME = "federation.yaml"  # the settings `geofed local` and `PSProcess` save beside the checkpoints
REPORT_NAME = "geofed-export.json"


class ExportError(ValueError):
    """A checkpoint, settings file or output that cannot be exported; one readable line."""


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register `geofed export` on the top-level CLI (see `geofed_apps.cli`)."""
    export = sub.add_parser(
        "export", help="write a PS checkpoint as a transformers model directory, with its tokenizer",
        description="Rebuild the federation's model from a PS checkpoint as the clients build it and write it where "
                    "AutoModelForCausalLM and AutoTokenizer load it (LoRA: also the adapters in peft's format).")
    export.add_argument("--checkpoint", required=True, metavar="PATH",
                        help="a PS checkpoint file, or a directory holding them (the newest is taken; a sharded "
                             "PS's directory or a `geofed local` run directory too)")
    export.add_argument("--federation", metavar="SETTINGS",
                        help=f"the federation's settings file (default: the {SETTINGS_NAME} saved beside the "
                             "checkpoint or in a folder above it)")
    export.add_argument("--out", required=True, metavar="DIR", help="output directory (new, or empty)")
    export.add_argument("--tokenizer", metavar="DIR",
                        help="the tokenizer to write beside the model: 'byte' or a local Hugging Face tokenizer "
                             "directory (default: the federation's model.tokenizer)")
    export.set_defaults(func=run_export)


def run_export(args: argparse.Namespace) -> int:
    """The command's handler: every refusal is one line on stderr and exit code 2, before anything is written."""
    try:
        _require_torch()
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # the command's output is its own lines
        ckpt_path = Path(args.checkpoint).expanduser()
        ckpt = load_checkpoint(ckpt_path)
        settings = find_settings(args.federation, ckpt_path)
        fed = load_federation(settings)
        check_exportable(fed)
        out = Path(args.out).expanduser()
        _check_out(out)
        lines = export_checkpoint(ckpt, fed, out, tokenizer=args.tokenizer or fed.model.tokenizer)
    except ExportError as exc:
        print(f"geofed export: {exc}", file=sys.stderr, flush=True)
        return 2
    print(f"geofed export: global v{ckpt.version} of a {fed.paradigm.name} federation -> {out}", flush=True)
    print(f"  settings: {settings}", flush=True)
    for line in lines:
        print(f"  {line}", flush=True)
    return 0


def _require_torch() -> None:
    try:
        import torch  # noqa: F401 - first: transformers without torch warns on stderr
        import transformers  # noqa: F401
        import peft  # noqa: F401  # isort: skip
    except ImportError as exc:
        raise ExportError(f"export rebuilds the model with torch, transformers and peft, and this Python lacks "
                          f"{exc.name or 'one of them'}: run it where the client agent is installed") from None


# ---- finding what to export ------------------------------------------------------------------------


def load_checkpoint(path: Path) -> PSCheckpoint:
    """The PS checkpoint at `path`: that file, or the newest in a PS checkpoint directory (a sharded PS's
    directory, or one above it, gives the newest version every shard holds, put back together)."""
    if path.is_file():
        ckpt = _load_file(path)
        if _shard_of(ckpt) is not None:
            lo, hi, total = (int(ckpt.aggregator[k]) for k in ("lo", "hi", "total"))
            raise ExportError(f"{path} is PS shard {_shard_of(ckpt)}'s slice [{lo}, {hi}) of {total} elements: pass "
                              "the directory holding every shard's checkpoints")
        return ckpt
    if not path.is_dir():
        raise ExportError(f"--checkpoint {path} is neither a file nor a directory")
    # A shard's `prepared/` folder holds a version not yet committed (ps_server.shards.shard.ShardCore).
    dirs = sorted({p.parent for p in path.rglob("ps-v*.safetensors") if p.parent.name != "prepared"})
    stores = [CheckpointStore(d) for d in dirs]
    stores = [s for s in stores if s.files()]
    if not stores:
        raise ExportError(f"no PS checkpoint (ps-v<version>.safetensors) under {path}")
    newest = [_load_file(s.files()[0]) for s in stores]
    shards = [s for s, c in zip(stores, newest, strict=True) if _shard_of(c) is not None]
    if shards:
        ckpt = newest_sharded([s.dir for s in shards])
        if ckpt is None:
            raise ExportError(f"the {len(shards)} PS shards under {path} hold no version in common")
        total = max(int(c.aggregator["total"]) for c in newest if _shard_of(c) is not None)
        if ckpt.flat.size != total:
            raise ExportError(f"the PS shards under {path} hold {ckpt.flat.size} of the model's {total} elements: "
                              "a shard's checkpoint directory is missing")
        return ckpt
    if len(stores) > 1:
        raise ExportError(f"{path} holds the checkpoints of {len(stores)} PSs ({', '.join(str(s.dir) for s in stores)})"
                          ": pass one of them")
    return newest[0]


def _load_file(path: Path) -> PSCheckpoint:
    try:
        return CheckpointStore.load(path)
    except Exception as exc:  # safetensors and json raise many types; a torn or foreign file is one line
        raise ExportError(f"cannot read PS checkpoint {path}: {exc}") from exc


def _shard_of(ckpt: PSCheckpoint) -> int | None:
    """The shard index of a sharded PS's slice (its aggregator state names it); None for a whole model."""
    index = ckpt.aggregator.get("index")
    return int(index) if index is not None and "lo" in ckpt.aggregator else None


def find_settings(settings: str | None, checkpoint: Path) -> str:
    """`settings`, or the federation.yaml in the checkpoint's folder or one of the three above it."""
    if settings is None:
        start = checkpoint if checkpoint.is_dir() else checkpoint.parent
        found = [d / SETTINGS_NAME for d in (start, *start.resolve().parents[:3]) if (d / SETTINGS_NAME).is_file()]
        if not found:
            raise ExportError(f"no {SETTINGS_NAME} beside {checkpoint} or above it: pass --federation SETTINGS")
        settings = str(found[0])
    return settings


def load_federation(settings: str) -> FederationConfig:
    try:
        return validate_settings(FederationConfig, fill_checkpoint_shape(load_settings_file(settings)))
    except SettingsError as exc:
        raise ExportError(str(exc).strip()) from None


def check_exportable(fed: FederationConfig) -> None:
    """Refuse a paradigm whose model the PS does not hold whole (fsl-sage's server part is the split trainer's)."""
    if fed.paradigm.needs_trainer:
        raise ExportError(f"paradigm {fed.paradigm.name} splits the model: the PS holds the client layers only, "
                          "the split trainer the rest, and export cannot put them together")


def _check_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"--out {out} exists and is not an empty directory")


# ---- the export ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GlobalModel:
    """The federation's model as a client builds it, and the paradigm that built it."""

    paradigm: ClientParadigm
    model: nn.Module


def build_global_model(fed: FederationConfig) -> GlobalModel:
    """Θ0 built and reparametrised as every client does (seeded init or `model.path`), in eval mode.

    Raises `client_agent.training.model.ModelConfigError` (e.g. a missing base) or `ParadigmError`.
    """
    from client_agent.paradigms import client_paradigm

    paradigm = client_paradigm(fed.paradigm)
    model = paradigm.prepare(paradigm.build(fed, initialise=True))
    model.eval()
    return GlobalModel(paradigm, model)


def federation_tokenizer(spec: str, fed: FederationConfig):
    """The tokenizer written beside the model ("byte" or a local directory), checked against the model's vocabulary."""
    from client_agent.data.tokenizer import TokenizerError

    from .hf_tokenizer import federation_tokenizer as hf_tokenizer

    try:
        return hf_tokenizer(spec, model_max_length=fed.model.block_size, model_vocab=fed.model.vocab_size)
    except TokenizerError as exc:
        raise ExportError(str(exc)) from None


def export_checkpoint(ckpt: PSCheckpoint, fed: FederationConfig, out: Path, *, tokenizer: str) -> list[str]:
    """Build the federation's model, load `ckpt` into it and write it to `out`; lines saying what was written."""
    from client_agent.paradigms import ParadigmError
    from client_agent.training.model import ModelConfigError

    hf_tokenizer = federation_tokenizer(tokenizer, fed)  # refused before the model is built
    try:
        built = build_global_model(fed)
    except (ModelConfigError, ParadigmError) as exc:
        raise ExportError(f"cannot build the federation's model: {exc}") from None
    return export_global_model(built, ckpt, fed, out, hf_tokenizer, tokenizer_name=tokenizer)


def export_global_model(built: GlobalModel, ckpt: PSCheckpoint, fed: FederationConfig, out: Path, tokenizer, *,
                        tokenizer_name: str) -> list[str]:
    """Load `ckpt` into `built` (a client-built model, e.g. `geofed local`'s evaluator's) and write it to `out`,
    with `tokenizer` (`federation_tokenizer`'s) beside it.

    Everything goes to a sibling folder first and is renamed to `out` at the end, so a failure leaves no
    half-written directory. The merge may change `built.model` in place.
    """
    import torch

    from client_agent.training.flat import load_flat_

    check_exportable(fed)
    paradigm, model = built.paradigm, built.model
    difference = manifest_difference(ckpt.manifest, paradigm.manifest(model))
    if difference is not None:
        raise ExportError("the checkpoint does not fit the federation's model (other settings, or another "
                          f"federation's checkpoint?): {difference}")
    load_flat_(model, torch.as_tensor(ckpt.flat), paradigm.exchanged)
    tmp = out.with_name(f".{out.name}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        tokenizer.save_pretrained(tmp)
        report = {"version": ckpt.version, "paradigm": fed.paradigm.name, "model": ".", "tokenizer": tokenizer_name}
        lines = [f"model: {out} (AutoModelForCausalLM)", f"tokenizer: {tokenizer_name} ({len(tokenizer)} ids)"]
        adapters = _adapter_names(paradigm, model)
        if adapters and all(paradigm.exchanged(n, p) for n, p in adapters):
            report |= _write_adapter(built, fed, tmp, out)
            lines.append(f"adapter: {out / 'adapter'} (peft; base {report['base']}); the model is the merged one")
        elif adapters:
            report["note"] = "the adapters are private to each site and never reach the PS: this is the shared base"
            lines.append(f"{fed.paradigm.name}: {report['note']}")
        paradigm.export(model).save_pretrained(tmp)
        (tmp / REPORT_NAME).write_text(json.dumps(report, indent=1) + "\n")
        if out.exists():
            out.rmdir()  # empty, checked by the caller
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return lines


def _adapter_names(paradigm: ClientParadigm, model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """The model's peft LoRA parameters (none unless the paradigm injected them)."""
    from client_agent.paradigms.lora import is_adapter

    if not hasattr(model, "peft_config"):
        return []
    return [(n, p) for n, p in model.named_parameters() if is_adapter(n)]


def _write_adapter(built: GlobalModel, fed: FederationConfig, tmp: Path, out: Path) -> dict:
    """`adapter/` in peft's format, and `base/` (the seeded init) when the base is no `model.path`."""
    from client_agent.training.model import build_model

    if fed.model.path:
        written = base = str(Path(fed.model.path).expanduser().resolve())
    else:
        build_model(fed.model, transformers_model=built.paradigm.settings.transformers_model).save_pretrained(
            tmp / "base")
        written, base = str(tmp / "base"), str(out.resolve() / "base")
    for config in built.model.peft_config.values():
        config.base_model_name_or_path = written  # peft reads the base's config while saving
    built.model.save_pretrained(tmp / "adapter")
    config_file = tmp / "adapter" / "adapter_config.json"
    config_file.write_text(json.dumps(json.loads(config_file.read_text()) | {"base_model_name_or_path": base},
                                      indent=2) + "\n")
    return {"adapter": "adapter", "base": base}
