"""The training config (`configs/cfg_pretrain.yaml` + `configs/arch/*.yaml`), validated.

Hydra composes the YAML and the command-line overrides; this pydantic model then rejects unknown
keys and bad values with a message naming the field, before any work starts.
"""
from __future__ import annotations

import os
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Annotated, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from hrm.config import ArchConfig, refuse_bool


class FieldError(ValueError):
    """A check across fields (a model validator) that is about one of them: pydantic gives such an
    error no location, so it carries the field it names for format_validation_error."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


class WandbConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    mode: Literal["auto", "online", "offline", "disabled"] = "auto"
    entity: Optional[str] = None


class PretrainConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    # The fields without a default are the recipe's (configs/cfg_pretrain.yaml gives them): a
    # config built in Python names them, rather than getting a value other than the YAML's
    # (lr_warmup_steps defaulted to 0 here, 2000 there; eval_interval to null, 10000 there).
    arch: ArchConfig
    data_path: str

    global_batch_size: int = Field(gt=0)
    grad_accum_steps: int = Field(default=1, gt=0)
    epochs: int = Field(gt=0)
    eval_interval: Optional[int] = Field(gt=0)   # null: evaluate only at the end
    lr: float = Field(ge=0)
    lr_min_ratio: float = Field(default=1.0, ge=0, le=1)
    lr_warmup_steps: int = Field(ge=0)
    beta1: float = Field(default=0.9, ge=0, lt=1)
    beta2: float = Field(default=0.95, ge=0, lt=1)
    weight_decay: float = Field(default=0.1, ge=0)
    puzzle_emb_lr: float = Field(default=1e-2, ge=0)
    puzzle_emb_weight_decay: float = Field(default=0.1, ge=0)
    grad_clip: Optional[float] = Field(default=None, gt=0, allow_inf_nan=True)   # inf: no clipping, as null
    seed: int = Field(default=0, ge=0, lt=2**63)   # the data order's and torch's (seed + rank) seeds
    max_steps: Optional[int] = Field(default=None, gt=0)

    project_name: Optional[str] = None
    run_name: Optional[str] = None
    checkpoint_path: Optional[str] = None
    checkpoint_every_eval: bool = True
    checkpoint_interval: Optional[int] = Field(default=None, gt=0)
    keep_checkpoints: int = Field(default=2, ge=0)
    resume: Optional[str] = None

    eval_save_predictions: bool = True
    eval_batch_size: Optional[int] = Field(default=None, gt=0)
    eval_pass_k: list[Annotated[int, Field(gt=0)]] = Field(default_factory=lambda: [1, 2, 10, 100, 1000])

    diagnostics_interval: Optional[int] = Field(default=None, gt=0)
    diagnostics_rows: int = Field(default=8, gt=0)

    device: Literal["auto", "cpu", "cuda"] = "auto"
    compile: Literal["auto", True, False] = "auto"
    compile_eval: Literal["auto", True, False] = "auto"
    log_interval: int = Field(default=1, gt=0)
    wandb: WandbConfig = Field(default_factory=WandbConfig)

    _no_bool = field_validator("global_batch_size", "grad_accum_steps", "epochs", "eval_interval", "lr", "lr_min_ratio",
                               "lr_warmup_steps", "beta1", "beta2", "weight_decay", "puzzle_emb_lr",
                               "puzzle_emb_weight_decay", "grad_clip", "seed", "max_steps", "checkpoint_interval",
                               "keep_checkpoints", "eval_batch_size", "diagnostics_interval", "diagnostics_rows",
                               "log_interval", "eval_pass_k", mode="before")(refuse_bool)

    @field_validator("data_path")
    @classmethod
    def _data_exists(cls, v: str) -> str:
        if not (Path(v) / "train" / "dataset.json").is_file():
            raise ValueError("not a build (no train/dataset.json); run `python build_arc.py` first "
                             "or point data_path at a build_arc.py output folder")
        return v

    @model_validator(mode="after")
    def _names_are_one_folder(self):
        # each names one folder of checkpoints/<project>/<run> (arch.name through the default run
        # name, <arch>-<time>): `run_name=a/b` nested folders and `run_name=../../x` wrote outside
        # checkpoints/, without a word; a folder elsewhere is what checkpoint_path is for (which
        # makes them labels)
        if self.checkpoint_path:
            return self
        names = {"project_name": self.project_name, "run_name": self.run_name}
        if self.run_name is None:
            names["arch.name"] = self.arch.name
        for field, name in names.items():
            if name is not None and ("/" in name or os.sep in name or name in (".", "..")):
                raise FieldError(field, f"{field}={name!r} names a folder of checkpoints/<project>/<run>, so it is "
                                 f"one folder name: no '/', not '.' or '..'; to write elsewhere, give "
                                 f"checkpoint_path (the run's folder itself)")
        return self

    @model_validator(mode="after")
    def _auto_resume_names_its_run(self):
        if self.resume == "auto" and not (self.run_name or self.checkpoint_path):
            raise FieldError("resume", "resume=auto needs run_name or checkpoint_path: a default run name holds "
                             "the time it started, so the same command run again would not find its run")
        return self

    @model_validator(mode="after")
    def _no_float16_training(self):
        # float16 (unlike bfloat16) needs loss scaling, which this trainer does not do: small
        # gradients would flush to zero without a word (the model itself still runs in float16)
        if self.arch.forward_dtype == "float16":
            raise FieldError("arch.forward_dtype", "arch.forward_dtype=float16 trains without the loss scaling "
                             "float16 needs (small gradients underflow to zero); use bfloat16 (auto on CUDA) "
                             "or float32")
        return self

    @model_validator(mode="after")
    def _eval_interval_divides_epochs(self):
        if self.eval_interval is not None and self.epochs % self.eval_interval:
            raise FieldError("eval_interval", f"eval_interval={self.eval_interval} must divide epochs={self.epochs}")
        return self

    def check_world_size(self, world_size: int) -> None:
        for name in ("global_batch_size", "eval_batch_size"):
            value = getattr(self, name)
            if value is not None and value % world_size:
                raise ValueError(f"{name}={value} is not divisible by the world size {world_size}")
        if self.global_batch_size % (world_size * self.grad_accum_steps):
            raise ValueError(f"global_batch_size={self.global_batch_size} is not divisible by the world size "
                             f"{world_size} times grad_accum_steps={self.grad_accum_steps}")

    @property
    def epochs_per_iteration(self) -> int:
        return self.eval_interval or self.epochs


TEXT_FIELDS = ("data_path", "project_name", "run_name", "checkpoint_path", "resume", "wandb.entity", "arch.name")


def numbers_as_text(config: dict) -> dict:
    """The composed config with Hydra's numbers in text fields made text again: `run_name=123` comes
    as the integer 123, which is the name typed (and which joined to a path before validation was a
    TypeError); in Hydra's integer form, so `1_000` and `+5` read 1000 and 5. A float is refused with
    the way out: `run_name=1e3` comes as 1000.0, far from what was typed. So are true/false, a list
    and a dict (`resume=true` was joined to a path before validation too: a traceback)."""
    for dotted in TEXT_FIELDS:
        *parents, key = dotted.split(".")
        node = config
        for parent in parents:
            node = node.get(parent) if isinstance(node, dict) else None
        value = node.get(key) if isinstance(node, dict) else None
        if value is None or isinstance(value, str):
            continue
        if isinstance(value, bool):
            typed = str(value).lower()
            raise ValueError(f"{dotted}={typed}: Hydra read it as true/false, and a name or path is text; quote "
                             f"it if it is meant as text, e.g. {dotted}=\"'{typed}'\" in a shell")
        if isinstance(value, (list, dict)):
            raise ValueError(f"{dotted}={value}: a name or path is text, not a {type(value).__name__}")
        if isinstance(value, float):
            raise ValueError(f"{dotted}={value}: Hydra read it as a number, and a name is text; quote it "
                             f"as typed, e.g. {dotted}=\"'name'\" in a shell")
        node[key] = str(value)
    return config


def config_keys(model: type[BaseModel] = PretrainConfig, prefix: str = "") -> list[str]:
    """Every dotted key of `model` as a config file or override spells it (`arch.scaling.lambda`)."""
    import typing
    keys = []
    for name, field in model.model_fields.items():
        key = prefix + (field.alias or name)
        keys.append(key)
        for inner in (field.annotation, *typing.get_args(field.annotation)):   # Optional[X]: X
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                keys += config_keys(inner, key + ".")
    return keys


def format_validation_error(err: ValidationError) -> str:
    """One line per bad field, dotted like a Hydra override (`arch.scaling.p: ...`); a key no field
    has (mistyped in a config file of one's own) with the nearest known ones, as on the command line."""
    import difflib
    lines = []
    for e in err.errors():
        error = e.get("ctx", {}).get("error")
        where = ".".join(str(x) for x in e["loc"]) or getattr(error, "field", "config")
        msg = e["msg"].removeprefix("Value error, ")
        shown = e["type"] != "missing" and not isinstance(e["input"], dict)
        close = difflib.get_close_matches(where, config_keys(), n=3, cutoff=0.7) if e["type"] == "extra_forbidden" else []
        lines.append(f"  {where}: {msg}" + (f" (got {e['input']!r})" if shown else "")
                     + (f"; did you mean {' or '.join(close)}?" if close else ""))
    return "invalid config:\n" + "\n".join(lines)


EXIT_BAD_CONFIG = 2   # pretrain.py's exit status for a config that cannot run


SILENT_RANK_WAIT_S = 30   # how long a rank that leaves the saying to another waits before exiting (exit_bad_config)


def speaks_for_node() -> bool:
    """Whether this process is the one per machine that says what every rank found: LOCAL_RANK 0
    of several, or a single process (WORLD_SIZE unset or 1, whatever LOCAL_RANK a scheduler left
    in the environment: nobody else would say it)."""
    return os.environ.get("LOCAL_RANK", "0") == "0" or os.environ.get("WORLD_SIZE", "1") == "1"


def say_once_per_node(message: str, program: str = "pretrain.py") -> None:
    """`<program>: message` on stderr from one process per machine: under torchrun every rank
    checks the same config and would print the same message; one process per node (LOCAL_RANK 0)
    says it, since a path can be missing on one node only."""
    if speaks_for_node():
        print(f"{program}: {message}", file=sys.stderr, flush=True)


def _in_process_group() -> bool:
    dist = sys.modules.get("torch.distributed")   # not imported: certainly not in one
    return dist is not None and dist.is_available() and dist.is_initialized()


def let_the_speaker_finish() -> None:
    """Before a refusal every rank made alike (say_once_per_node) ends the process. torchrun stops
    every rank as soon as one exits: a silent rank that exited first could take the speaking one
    down before it printed, and the message would be lost. So inside a process group (a sweep's
    later job, a start-up check every rank refused) the ranks meet at a barrier, which the speaker
    reaches only after printing; outside one, a silent rank waits (the speaker's exit ends the
    wait: torchrun then stops it)."""
    if _in_process_group():
        sys.modules["torch.distributed"].barrier()
    elif not speaks_for_node():
        time.sleep(SILENT_RANK_WAIT_S)


def exit_bad_config(message: str):
    """Stop pretrain.py with EXIT_BAD_CONFIG, saying why once per machine; also when the message
    cannot be said (`2>&1 | head -1` closed the pipe): a sweep's check that failed to print its
    refusal was taken for a check that could not run, and the sweep went on."""
    try:
        say_once_per_node(message)
    except BrokenPipeError:
        pass
    let_the_speaker_finish()
    sys.exit(EXIT_BAD_CONFIG)


def explain_unknown_key(error: BaseException, config) -> str:
    """Hydra's "Could not override 'arch.hidden_sz'. To append to your config use +arch.hidden_sz=3"
    (`error`), with its advice (an appended key is refused here all the same: every field is known)
    replaced by the nearest keys of `config` (a composed DictConfig), if any are close. The unknown
    key is the one OmegaConf names under it: for a dict value (`arch.scaling.H={q:0.3}`) Hydra names
    the key overridden, which exists, and the unknown one inside it went unsaid. A key that is a
    field all the same is one a preset or config file of one's own leaves out (a preset written
    with the fields it changes only): Hydra's `+key=value` adds it, and the message says so, where
    the nearest keys (of the default preset's config) would have suggested the very key typed."""
    import difflib
    import re

    from omegaconf import OmegaConf
    message = str(error)
    found = re.match(r"Could not override '([^']+)'", message)
    if not found:
        return message
    unknown = getattr(error.__cause__, "full_key", None) or found[1]
    if unknown in config_keys():
        append = re.search(r"To append to your config use (\S+)", message)
        where = "the arch preset" if unknown.startswith("arch.") else "the config file"
        return (f"{unknown!r} is a field, but {where} does not set it, so it cannot be overridden as it "
                f"stands: add it to {where}, or give it as {append[1] if append else '+' + found[1] + '=...'} "
                f"(a leading + adds a key)")
    keys = []

    def walk(node, prefix):
        for key, value in node.items():
            if prefix == "" and key == "hydra":
                continue
            keys.append(prefix + str(key))
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
    walk(OmegaConf.to_container(config, resolve=False), "")
    close = difflib.get_close_matches(unknown, keys, n=3, cutoff=0.7)
    advice = f" Did you mean {' or '.join(close)}?" if close else ""
    return f"no such key: {unknown!r}.{advice}"


def one_line_missing_preset(message: str) -> str:
    """Hydra's "Could not find 'arch/hrm_tinyy'" runs to ten lines: the presets one a line, then its
    config search path; the presets go on the same line, the search path (noise here) goes."""
    found = re.match(r"(.*Could not find '[^']+')\n\nAvailable options in '([^']+)':\n((?:\t.*\n?)*)", message)
    if not found:
        return message
    presets = ", ".join(line.strip() for line in found[3].splitlines() if line.strip())
    return f"{found[1]} (the presets of {found[2]}: {presets})"


# What a value on pretrain.py's command line may hold unquoted: Hydra's override grammar reads `=`,
# `,`, brackets, quotes, `#`, `~` ... as syntax (and the shell some of them)
_PLAIN_VALUE = re.compile(r"[A-Za-z0-9_\-/.+%@:]*")


def command_line_arg(key: str, value, hydra: bool = True) -> str:
    """`key=value` as typed in a shell, for the commands our messages suggest. For pretrain.py
    (`hydra`) a value that Hydra would read as syntax is quoted for Hydra as well: a sweep's run
    folder, `S-arch.scaling.p=0.3`, pasted bare stops Hydra at its second `=` ("mismatched input
    '=' expecting <EOF>"). predict.py splits at the first `=`: it needs the shell's quoting only."""
    text = str(value)
    if _PLAIN_VALUE.fullmatch(text):
        return f"{key}={text}"
    if hydra:
        text = f"'{text}'" if '"' in text else f'"{text}"'
    return shlex.quote(f"{key}={text}")


def path_override(key: str, path) -> str:
    """`key=path` as one argument of a pretrain.py command run without a shell (argv: the
    experiment scripts' data_path and checkpoint_path; command_line_arg is the shell form), the
    path quoted for Hydra when its grammar would read part of it as syntax: a build or --work under
    a folder with an accent (`/home/josé`), a comma (a sweep over values), parentheses,
    brackets or a quote made every run fail to start (LexerNoViableAltException). In a quoted value a
    backslash is literal except before the quote, an interpolation or the end, where it is doubled."""
    text = str(path)
    if _PLAIN_VALUE.fullmatch(text):   # plain: as it always was, so commands keep their text
        return f"{key}={text}"
    text = re.sub(r"(\\*)(?='|\$\{|$)", lambda m: m.group(1) * 2, text)
    return f"{key}='" + text.replace("'", "\\'").replace("${", "\\${") + "'"


def explain_unparsable_override(override: str, message: str) -> str:
    """Hydra's error for an override its grammar cannot read names neither the argument nor the way
    out (`resume=checkpoints/p/S-lr=0.001`: "mismatched input '=' expecting <EOF>"). Name it, and
    for `key=value` whose value is not meant as a list, dict or function, give the quoted form that
    passes the value as text."""
    key, sep, value = override.partition("=")
    hint = ""
    if sep and value and value[0] not in "'\"[{(" and re.fullmatch(r"[+~]{0,2}[\w.]+", key):
        hint = f"\nto pass the value as text, quote it for Hydra (and the shell): {command_line_arg(key, value)}"
    return f"{override}: {message}{hint}"
