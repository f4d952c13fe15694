"""Model checkpoints: our own safe format, and loading checkpoints of the original HRM code.

Our format: one ``torch.save`` file holding only plain containers and tensors, read back with
``torch.load(weights_only=True)`` (no pickled code runs):
    {"format": "hrm-deeploop/model-v1", "arch": ArchConfig dump, "dims": {vocab_size, seq_len,
     num_puzzle_identifiers}, "scaling": derive_scaling(arch), "state": model state_dict,
     "extra": whatever the caller adds (e.g. the trainer's step)}
Loading is strict: unknown keys, missing keys and shape mismatches are errors that name the keys.
Floating tensors may change dtype on load (e.g. a bfloat16 H_init from the original code).

Original HRM checkpoints (sapientinc/HRM, ``pretrain.py``): a raw state dict of the loss head,
keys like ``model.inner.H_level.layers.0.self_attn.qkv_proj.weight``, ``model.inner.puzzle_emb
.weights``, ``model.inner.H_init``, optionally prefixed by ``_orig_mod.`` (torch.compile), with
``all_config.yaml`` (the whole training config) in the same folder. The arch section maps to our
ArchConfig field for field (a field it leaves out takes the original's default, puzzle_emb_ndim 0;
one the original requires is refused when missing); vocab size and puzzle count come from the
weights; seq_len from the learned position table if any, else from
``<data_path>/train/dataset.json``, else the caller.

Public API
----------
``save_model(path, model, extra=None)``
``write_atomic(path, payload)``            torch.save via `<path>.tmp`, fsync'd, then renamed
``named_write_error(error, path)``         an OSError without a file name, given `path`
``load_model(path, map_location="cpu", verbose=False, payload=None) -> (HRM, extra)``
``is_our_format(payload) -> bool``
``load_state_strict(model, state)``        strict load with named errors
``original_key_map(arch) -> {original key: our key}``
``arch_from_original_config(config: dict) -> ArchConfig``
``load_original_checkpoint(path, config_path=None, seq_len=None, map_location="cpu",
                           verbose=False, raw=None) -> HRM``
"""
from __future__ import annotations

import json
import os
import sys

import torch
import yaml
from pydantic import ValidationError

from hrm.config import ArchConfig
from hrm.model import HRM
from hrm.scaling import describe_scaling

FORMAT = "hrm-deeploop/model-v1"


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded as asked; the message names the keys or file at fault."""


def recorded_build(record, path) -> dict | None:
    """The build identity a checkpoint file `path` records (arc_data.manifest.build_identity), or
    None for one that predates it; anything else (a hand-edited file) is refused by name rather
    than failing later as a KeyError in the build check."""
    if record is None:
        return None
    if (not isinstance(record, dict) or not isinstance(record.get("identifiers_sha256"), str)
            or not isinstance(record.get("digest", None), (str, type(None)))):
        raise CheckpointError(f"{path}: its record of the build it was trained on ('data') is not "
                              f"{{'identifiers_sha256': str, 'digest': str or None}}: {record!r:.120}")
    return {"identifiers_sha256": record["identifiers_sha256"], "digest": record.get("digest")}


def read_torch_file(path, hint: str = ""):
    """torch.load(weights_only=True), with a file torch cannot read or decode refused by name, in
    one line (`hint`: what to do instead, appended)."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except MemoryError:    # a real checkpoint too large for this machine: not a format problem
        raise
    except OSError as e:
        # unreadable (permissions, a disk error); torch also says EINVAL for some truncated files
        raise CheckpointError(f"{path}: cannot read it ({e.strerror or e}; is it truncated?){hint}") from None
    except Exception as e:
        # torch has no one error for foreign bytes: text gives KeyError, IndexError or
        # UnpicklingError, an empty file EOFError, a truncated one RuntimeError. Its messages run
        # to many lines: keep the first sentence
        reason = str(e).strip().splitlines()[0].split(". ")[0] if str(e).strip() else "no details"
        raise CheckpointError(f"{path} is not a checkpoint: torch cannot read it ({type(e).__name__}: {reason}; "
                              f"truncated or corrupt?){hint}") from None


# ------------------------------------------------------------------------------------ our format
def save_model(path: str, model: HRM, extra: dict | None = None) -> None:
    payload = {
        "format": FORMAT,
        "arch": model.arch.model_dump(by_alias=True),
        "dims": {"vocab_size": model.vocab_size, "seq_len": model.seq_len,
                 "num_puzzle_identifiers": model.num_puzzle_identifiers},
        "scaling": model.scaling,
        "state": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "extra": extra or {},
    }
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_atomic(path, payload)


def write_atomic(path, payload) -> None:
    """torch.save `payload` to `path` + '.tmp', on disk (fsync), then renamed over `path`: a crash
    leaves the old file or the whole new one, never a half-written one under the real name, nor a
    renamed one whose bytes were still in the page cache. On a full disk torch's zip writer, closing
    on the way out of the OSError 'No space left on device', raises 'unexpected pos 704 vs 598' in
    its place (a file path or a file object alike): the OSError underneath is the one raised. A
    write that fails removes its .tmp (the space it took)."""
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)     # a rename that fails (a folder in the way) removes the .tmp too
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass    # never written, or not removable: the write's own error is the one to tell
        raise named_write_error(_write_error_underneath(e), tmp)


def _write_error_underneath(error: BaseException) -> BaseException:
    """The OSError that a RuntimeError of torch's writer ('unexpected pos ...') was raised during
    the handling of (its __context__), else `error` itself."""
    seen = error
    while not isinstance(seen, OSError) and isinstance(seen, RuntimeError) and seen.__context__ is not None:
        seen = seen.__context__
    return seen if isinstance(seen, OSError) else error


def named_write_error(error: BaseException, path) -> BaseException:
    """`error` naming the file it happened to: a write that fails on a full disk raises OSError
    without a file name ('[Errno 28] No space left on device'), which leaves the user to guess."""
    if isinstance(error, OSError) and not error.filename:
        # one without an errno (OSError("...")) would read '[Errno None] None: <path>': its own text kept
        named = (type(error)(error.errno, error.strerror, str(path)) if error.errno is not None
                 else OSError(f"{error}: {str(path)!r}"))
        named.__cause__ = error
        return named
    return error


def load_state_strict(model: torch.nn.Module, state: dict) -> None:
    """Copy ``state`` into ``model``; any unknown, missing or mis-shaped key raises, naming it."""
    own = model.state_dict()
    unknown = sorted(set(state) - set(own))
    missing = sorted(set(own) - set(state))
    problems = []
    if unknown:
        problems.append(f"unknown keys: {unknown}")
    if missing:
        problems.append(f"missing keys: {missing}")
    for key in sorted(set(own) & set(state)):
        have, got = own[key], state[key]
        if tuple(have.shape) != tuple(got.shape):
            problems.append(f"shape mismatch for {key}: model {tuple(have.shape)}, "
                            f"checkpoint {tuple(got.shape)}")
        elif have.is_floating_point() != got.is_floating_point():
            problems.append(f"dtype mismatch for {key}: model {have.dtype}, checkpoint {got.dtype}")
    if problems:
        raise CheckpointError("cannot load state: " + "; ".join(problems))
    with torch.no_grad():
        for key, value in state.items():
            own[key].copy_(value)


def is_our_format(payload) -> bool:
    return isinstance(payload, dict) and payload.get("format") == FORMAT


def load_model(path: str, map_location="cpu", verbose: bool = False, payload: dict | None = None) -> tuple[HRM, dict]:
    """`payload`: the file's contents when the caller has already read them (no second read)."""
    if payload is None:
        payload = read_torch_file(path)     # a damaged file named in one line, not torch's traceback
    if not is_our_format(payload):
        raise CheckpointError(f"{path} is not a {FORMAT} checkpoint (for checkpoints of the original "
                              f"HRM code use load_original_checkpoint)")
    arch = checked_arch(payload.get("arch"), f"{path}: ")
    model = HRM(arch, verbose=verbose, **payload["dims"])
    load_state_strict(model, payload["state"])
    saved = payload.get("scaling")
    if saved is not None and saved != model.scaling:
        # alpha multiplies every skip path: the same weights under other constants are another
        # model. Only a change of the derivation between versions of this code does it; said, not
        # refused, so that the checkpoint can still be examined
        changed = sorted(f"{module}.{key}" for module in model.scaling for key in model.scaling[module]
                         if saved.get(module, {}).get(key) != model.scaling[module][key])
        print(f"warning: {path} was saved with other residual scaling than this code derives from its "
              f"arch ({', '.join(changed)}): it runs with this code's {describe_scaling(model.scaling)}",
              file=sys.stderr, flush=True)
    return model.to(map_location), payload.get("extra", {})


# ------------------------------------------------------------------------------ original HRM code
_ORIGINAL_PREFIX = "model.inner."
_ORIGINAL_LOSS_NAMES = {"stablemax_cross_entropy": "stablemax", "softmax_cross_entropy": "softmax"}
# Arch keys of the original config that are not architecture (or that we take from elsewhere).
_ORIGINAL_NON_ARCH = {"name", "loss"}
# Fields of the original's model config without a default there: every run's all_config.yaml holds
# them. One missing (a hand-made or damaged file) would otherwise run with our default, and the
# cycles and halting steps show nowhere in the weights: a wrong model without a word.
_ORIGINAL_REQUIRED = ("H_cycles", "L_cycles", "H_layers", "L_layers", "hidden_size", "expansion",
                      "num_heads", "pos_encodings", "halt_max_steps", "halt_exploration_prob")


def original_key_map(arch: ArchConfig) -> dict[str, str]:
    """Original state-dict key (without the ``_orig_mod.`` prefix) -> our key."""
    mapping = {
        "embed_tokens.embedding_weight": "token_embedding.weight",
        "lm_head.weight": "lm_head.weight",
        "q_head.weight": "q_head.weight",
        "q_head.bias": "q_head.bias",
        "H_init": "H_init",
        "L_init": "L_init",
    }
    if arch.puzzle_emb_ndim > 0:
        mapping["puzzle_emb.weights"] = "puzzle_embedding.table"
    if arch.pos_encodings == "learned":
        mapping["embed_pos.embedding_weight"] = "position_embedding.weight"
    for ours, theirs, count in (("H_module", "H_level", arch.H_layers),
                                ("L_module", "L_level", arch.L_layers)):
        for i in range(count):
            for orig_name, our_name in (("self_attn.qkv_proj", "attn.qkv_proj"),
                                        ("self_attn.o_proj", "attn.o_proj"),
                                        ("mlp.gate_up_proj", "mlp.gate_up_proj"),
                                        ("mlp.down_proj", "mlp.down_proj")):
                mapping[f"{theirs}.layers.{i}.{orig_name}.weight"] = f"{ours}.blocks.{i}.{our_name}.weight"
    return {_ORIGINAL_PREFIX + k: v for k, v in mapping.items()}


def arch_from_original_config(config: dict) -> ArchConfig:
    """ArchConfig from an original ``all_config.yaml`` (whole file, or just its ``arch`` section).
    A field the file leaves out takes the original's default, not ours (puzzle_emb_ndim: 0)."""
    if not isinstance(config, dict):
        raise CheckpointError(f"not an HRM training config: a YAML mapping was expected, not "
                              f"{type(config).__name__}")
    arch = config.get("arch", config)
    if not isinstance(arch, dict):
        raise CheckpointError(f"arch is not a mapping of the model's settings: {arch!r:.80}")
    arch = dict(arch)
    name = arch.get("name", "")
    if not isinstance(name, str) or "hrm_act_v1" not in name:
        raise CheckpointError(f"arch.name={name!r} is not the original HRM (hrm.hrm_act_v1@...)")
    loss = arch.get("loss") or {}
    if not isinstance(loss, dict):
        raise CheckpointError(f"arch.loss is not a mapping (name, loss_type): {loss!r:.80}")
    loss_type = loss.get("loss_type", "softmax_cross_entropy")
    if loss_type not in _ORIGINAL_LOSS_NAMES:
        raise CheckpointError(f"arch.loss.loss_type={loss_type!r} is not one of {sorted(_ORIGINAL_LOSS_NAMES)}")
    fields = {k: v for k, v in arch.items() if k not in _ORIGINAL_NON_ARCH}
    unknown = sorted(set(fields) - set(ArchConfig.model_fields))
    if unknown:
        raise CheckpointError(f"original arch config has keys this model does not know: {unknown}")
    missing = [k for k in _ORIGINAL_REQUIRED if k not in fields]
    if missing:
        raise CheckpointError(f"arch lacks {missing}: the original code has no default for them "
                              f"(every all_config.yaml it writes holds them)")
    fields.update(name="hrm_v1", loss_type=_ORIGINAL_LOSS_NAMES[loss_type])
    fields.setdefault("forward_dtype", "auto")  # the original ran bfloat16 on GPU: auto does too
    fields.setdefault("puzzle_emb_ndim", 0)     # the original's default (ours follows hidden_size)
    return checked_arch(fields)


def checked_arch(fields, where: str = "") -> ArchConfig:
    """The ArchConfig of a checkpoint's `arch` fields, or a CheckpointError with one line per field
    pydantic refuses (its own message runs to many lines), after `where`: a checkpoint of a later
    version (a field this one does not know) or of a combination this version refuses."""
    if not isinstance(fields, dict):
        raise CheckpointError(f"{where}arch is {type(fields).__name__}, not the mapping of fields a checkpoint holds")
    try:
        return ArchConfig(**fields)
    except ValidationError as e:
        raise CheckpointError(where + "; ".join(f"arch.{'.'.join(map(str, err['loc'])) or '*'}: {err['msg']}"
                                                for err in e.errors())) from None


def _original_seq_len(config: dict, state: dict, arch: ArchConfig) -> int | None:
    positions = state.get(_ORIGINAL_PREFIX + "embed_pos.embedding_weight")
    if positions is not None:
        return positions.shape[0] - arch.puzzle_tokens
    data_path = config.get("data_path")
    if data_path:
        meta = os.path.join(data_path, "train", "dataset.json")
        if os.path.exists(meta):
            # only seq_len is read (not the reader's whole check); a damaged file is named, where
            # json's message names none and a missing key was a bare KeyError
            try:
                with open(meta, "rb") as f:
                    content = json.load(f)
            except ValueError as e:     # cut short, not JSON, not UTF-8
                raise CheckpointError(f"{meta}: not valid JSON ({e})") from None
            seq_len = content.get("seq_len") if isinstance(content, dict) else None
            if type(seq_len) is not int:
                raise CheckpointError(f"{meta}: no whole-number seq_len")
            return seq_len
    return None


def load_original_checkpoint(path: str, config_path: str | None = None, seq_len: int | None = None,
                             map_location="cpu", verbose: bool = False, raw: dict | None = None) -> HRM:
    """`raw`: the state dict when the caller has already read the file (a full puzzle table is GBs)."""
    config_path = config_path or os.path.join(os.path.dirname(path), "all_config.yaml")
    try:
        with open(config_path, encoding="utf-8") as f:
            config = yaml.safe_load(f)
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{config_path}: not valid YAML ({str(e).splitlines()[0]})") from None
    try:
        arch = arch_from_original_config(config)
    except CheckpointError as e:     # name the file: the message alone does not say which
        raise CheckpointError(f"{config_path}: {e}") from None

    if raw is None:
        raw = read_torch_file(path)
    state = {}
    for k, v in raw.items():
        key = k.removeprefix("_orig_mod.")
        if key in state:   # one would silently replace the other, whichever came later in the file
            raise CheckpointError(f"original checkpoint {path} holds {key} both with and without the "
                                  f"'_orig_mod.' prefix (torch.compile's): which one to load is unclear")
        state[key] = v
    key_map = original_key_map(arch)
    unknown = sorted(set(state) - set(key_map))
    missing = sorted(set(key_map) - set(state))
    if unknown or missing:
        raise CheckpointError(f"original checkpoint {path} does not match its config: "
                              f"unknown keys {unknown}, missing keys {missing}")

    vocab_size = state[_ORIGINAL_PREFIX + "embed_tokens.embedding_weight"].shape[0]
    puzzle_table = state.get(_ORIGINAL_PREFIX + "puzzle_emb.weights")
    num_puzzles = puzzle_table.shape[0] if puzzle_table is not None else int(
        config.get("num_puzzle_identifiers", 1))
    found = _original_seq_len(config, state, arch)
    if seq_len is None:
        seq_len = found
    elif found is not None and found != seq_len:
        raise CheckpointError(f"seq_len={seq_len} given, but the checkpoint says {found}")
    if seq_len is None:
        raise CheckpointError("seq_len is unknown (no learned position table and no readable "
                              "<data_path>/train/dataset.json): pass seq_len (900 for ARC)")

    model = HRM(arch, vocab_size, seq_len, num_puzzles, verbose=verbose)
    load_state_strict(model, {key_map[k]: v for k, v in state.items()})
    return model.to(map_location)
