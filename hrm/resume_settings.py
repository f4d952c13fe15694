"""`pretrain.py resume=...` continues a run with the settings it was trained with.

The checkpoint holds the run's resolved config. On resume, every setting the command line does not
give comes from it rather than from the config files, so `python pretrain.py resume=<run folder>`
continues that run as it was (its arch, build, batch, schedule), and `resume=<run> max_steps=N`
changes only what it names. Exceptions, always from this start's config:
- the settings that name this start (`resume`, `run_name`, `checkpoint_path`, `project_name`):
  a branch from another run's checkpoint writes where its command line says; but a run continued
  in its own folder (no run_name given, and no checkpoint_path or the run's own folder) keeps its
  project_name too, as it keeps its run name: one W&B run, in its project;
- the machine (`device`, `compile`, `compile_eval`): a CPU run continued on GPUs runs on them.
A scaling rule given other than custom (`arch.scaling.rule=deeploop`, `arch.scaling.H.rule=...`)
comes with the p beside it from this start too: the run's p would make it another rule
(exponents_of_given_rules).

The Trainer's own checks still refuse an architecture, build or batch order given on the command
line that differs from the checkpoint's (hrm.run_checks.check_same_arch, check_same_data).
"""
from __future__ import annotations

from pathlib import Path

FROM_THIS_START = {"resume", "run_name", "checkpoint_path", "project_name", "device", "compile", "compile_eval"}
_MISSING = object()


def given_keys(task_overrides: list[str]) -> set[str]:
    """The dotted keys a command line sets (Hydra's task overrides: `lr=1e-3`, `arch=hrm_tiny`,
    `+x=1`, `~y`, a sweep job's swept values)."""
    return {o.split("=", 1)[0].lstrip("+~") for o in task_overrides}


def with_saved_settings(composed: dict, saved: dict, given: set[str]) -> tuple[dict, list[str]]:
    """`composed` (this start's config, resolved) with every setting that is not in `given` (nor
    under a given key: `arch=hrm_tiny` gives all of arch) nor in FROM_THIS_START taken from `saved`
    (the checkpoint's). Also returns the dotted keys whose value this changed."""
    given = given | exponents_of_given_rules(composed, given)
    changed: list[str] = []

    def merge(now, before, key: str):
        if key and (key.split(".")[0] in FROM_THIS_START
                    or any(key == g or key.startswith(g + ".") for g in given)):
            return now
        if isinstance(now, dict) and isinstance(before, dict):
            keys = list(now) + [k for k in before if k not in now]
            return {k: merge(now.get(k, _MISSING), before.get(k, _MISSING), f"{key}.{k}" if key else k)
                    for k in keys}
        if before is _MISSING:                 # a setting newer than the checkpoint
            return now
        if before != now:
            changed.append(key)
        return before

    def drop_missing(node):      # a key deleted on the command line (`~wandb.mode`) stays deleted
        if isinstance(node, dict):
            return {k: drop_missing(v) for k, v in node.items() if v is not _MISSING}
        return node

    return drop_missing(merge(composed, saved, "")), changed


def exponents_of_given_rules(composed: dict, given: set[str]) -> set[str]:
    """The `p` beside each scaling `rule` the command line gives, other than custom: such a rule
    fixes its exponent, and a p taken from the checkpoint would turn it into another rule
    (hrm.config: p=0.45 with deeploop is custom). `resume=<a p=0.45 run> arch.scaling.rule=deeploop`
    then continued the run at p=0.45 without a word, where the rule asked for is another scaling,
    which the Trainer refuses as such. A custom rule reads the run's p unless p is given too."""
    return {f"{scaling}.p" for scaling in ("arch.scaling", "arch.scaling.H", "arch.scaling.L")
            if f"{scaling}.rule" in given and setting(composed, f"{scaling}.rule") != "custom"}


def setting(config: dict, dotted: str):
    """The value of a dotted key (`arch.scaling.rule`) in a nested config; None where it has none."""
    node = config
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def known_settings(model, values: dict) -> dict:
    """`values` without the settings `model` (a pydantic config class) does not have: those of a
    checkpoint saved by a version that had a setting since removed."""
    import typing

    from pydantic import BaseModel
    fields = {(f.alias or name): f for name, f in model.model_fields.items()}
    out = {}
    for key, value in values.items():
        if key not in fields:
            continue
        annotation = fields[key].annotation
        nested = [t for t in (annotation, *typing.get_args(annotation))
                  if isinstance(t, type) and issubclass(t, BaseModel)]
        out[key] = known_settings(nested[0], value) if nested and isinstance(value, dict) else value
    return out


def checkpoint_to_resume(config: dict, tag: str) -> Path | None:
    """The checkpoint folder `resume` names in a composed config (as a dict), found as the Trainer
    will find it; None when there is none to find (no resume; a default run name, whose time stamp
    is only known once training starts; nothing there: the Trainer then says so)."""
    resume = config.get("resume")
    if not resume:
        return None
    from hrm.run_folders import resolve_resume
    run_dir = named_run_folder(config, tag)
    try:
        if resume == "auto":
            return resolve_resume("latest", run_dir) if run_dir is not None else None
        return resolve_resume(resume, run_dir, other_projects=False)
    except (ValueError, FileNotFoundError, OSError):
        return None


def run_in_another_project(config: dict, tag: str) -> str | None:
    """`resume=latest run_name=X` (no checkpoint_path) that finds no checkpoint in its project while
    a run of that name has some in another one: the refusal naming them (resolve_resume's), else
    None. The project comes from data_path (`<data folder>-hrm`), which a resume need not give: it
    is then the config files' build's, where a sweep's job would find nothing and start afresh,
    from the config files' settings (a single run is refused, said here before anything else)."""
    if config.get("resume") != "latest" or not config.get("run_name") or config.get("checkpoint_path"):
        return None
    from hrm.run_folders import resolve_resume, same_name_elsewhere
    run_dir = named_run_folder(config, tag)
    try:
        resolve_resume("latest", run_dir)
    except FileNotFoundError as e:
        return str(e) if same_name_elsewhere(run_dir) else None
    return None


def named_run_folder(config: dict, tag: str = "") -> Path | None:
    """The run folder that checkpoint_path or run_name names (as hrm.run_naming.run_names finds it), or
    None: a default run name holds the time it started."""
    if not (config.get("checkpoint_path") or config.get("run_name")):
        return None
    from hrm.run_folders import run_folder
    return run_folder(config.get("project_name"), config.get("run_name"), config.get("checkpoint_path"),
                      str(config.get("data_path")), tag)


def resume_path_problem(config: dict, tag: str = "") -> str | None:
    """Why `resume`, given as a path or as latest (not auto, nor latest in a sweep: there a job with
    nothing to resume starts afresh), names no checkpoint: the Trainer's own message (a step folder
    removed by keep_checkpoints or mistyped names the run's last ones; latest names the folder it
    looked in), or None. With nothing to resume, the config files' values stand in for the run's
    settings, and a refusal of them (`data_path: not a build`) would hide the actual mistake."""
    resume = config.get("resume")
    if not resume or resume == "auto" or (resume == "latest" and tag):
        return None
    from hrm.run_folders import resolve_resume
    try:
        resolve_resume(resume, named_run_folder(config) if resume == "latest" else None,
                       other_projects=not config.get("checkpoint_path"))
    except (ValueError, FileNotFoundError, OSError) as e:
        return str(e)
    return None


def saved_config(checkpoint: Path) -> dict:
    """The resolved config a checkpoint was saved with (trainer.pt, memory-mapped: its optimizer
    state is not read), with data_path the absolute path of the build it trained on when that is
    still there. A trainer.pt that cannot be read, or is not this trainer's, raises CheckpointError naming
    it (as the Trainer's load would): left to the Trainer, the config files' values would be
    validated in its place first, and a refusal would name them (`data_path: not a build`)."""
    import torch
    from hrm.checkpoint import CheckpointError, read_torch_file
    from hrm.run_folders import previous_checkpoint_hint
    from hrm.train_checkpoint import FORMAT, trained_data_path
    path = checkpoint / "trainer.pt"
    try:
        trainer = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 -- read again as the Trainer reads it, which names the damage
        trainer = read_torch_file(path, previous_checkpoint_hint(checkpoint))
    if not isinstance(trainer, dict) or trainer.get("format") != FORMAT or not isinstance(trainer.get("config"), dict):
        raise CheckpointError(f"{path}: not a {FORMAT} checkpoint")
    return {**trainer["config"], "data_path": trained_data_path(trainer)}


def resume_with_saved_settings(composed: dict, task_overrides: list[str], tag: str = "") -> tuple[dict, str | None]:
    """pretrain.py's step: `composed` with the settings of the checkpoint it resumes (see the
    module's docstring), and a note naming those that differ from the config files' (None when
    nothing changed or nothing is resumed). Raises CheckpointError for a trainer.pt that cannot be
    read (saved_config), ValueError for a run resumed in the wrong project (run_in_another_project)."""
    elsewhere = run_in_another_project(composed, tag)
    if elsewhere:
        raise ValueError(elsewhere)
    checkpoint = checkpoint_to_resume(composed, tag)
    if checkpoint is None:
        return composed, None
    saved = saved_config(checkpoint)
    from hrm.pretrain_config import PretrainConfig
    given = given_keys(task_overrides)
    merged, changed = with_saved_settings(composed, known_settings(PretrainConfig, saved), given)
    if (continued_in_place(composed, checkpoint, tag) and "project_name" not in given and "project_name" in saved
            and saved["project_name"] != composed.get("project_name")):
        merged["project_name"] = saved.get("project_name")
        changed.append("project_name")
    if not changed:
        return merged, None
    return merged, (f"resume: settings the command line does not give are the run's own, saved in {checkpoint}: "
                    f"{describe(changed, merged, given)} (the config files say otherwise); give a setting on the command "
                    f"line to change it")


def continued_in_place(config: dict, checkpoint: Path, tag: str = "") -> bool:
    """Whether the run continues in the checkpoint's own folder under the name it started with
    (hrm.run_naming.continues_its_run, as Trainer._resume decides it). The folder it writes to: a given
    checkpoint_path (a sweep job's: <checkpoint_path>/<tag>), else the checkpoint's own."""
    from hrm.run_folders import run_folder
    from hrm.run_naming import continues_its_run
    folder = (run_folder(config.get("project_name"), "", config["checkpoint_path"], str(config.get("data_path")), tag)
              if config.get("checkpoint_path") else checkpoint.parent)
    return continues_its_run(config.get("run_name"), folder, checkpoint)


def describe(changed: list[str], merged: dict, given: set[str] = frozenset(), shown: int = 8) -> str:
    """`key=value` for each changed setting, the value as typed on a command line (null, true). An
    arch of another name is said as its preset followed by the fields where the run's arch differs
    from that preset (`arch=hrm_tiny arch.hidden_size=128`: the name alone hid them) and that the
    command line (`given`) does not set: those are this start's, not the run's; field by field
    when no preset has its name; one item either way."""
    items = []
    for key in changed:
        if key == "arch.name":
            preset = preset_values(merged["arch"]["name"])
            if preset is None:
                arch_keys = ["arch.name"] + [k for k in changed if k.startswith("arch.") and k != "arch.name"]
            else:
                arch_keys = [f"arch.{k}" for k in differences(preset, merged["arch"])
                             if not any(f"arch.{k}" == g or f"arch.{k}".startswith(g + ".") for g in given)]
            said = [f"{k}={as_typed(setting(merged, k))}" for k in arch_keys]
            items.append(" ".join(said if preset is None else [f"arch={merged['arch']['name']}", *said]))
        elif not (key.startswith("arch.") and "arch.name" in changed):
            items.append(f"{key}={as_typed(setting(merged, key))}")
    if len(items) <= shown + 1:     # "and 1 more" would take the room the one setting needs
        return ", ".join(items)
    return ", ".join(items[:shown]) + f" and {len(items) - shown} more"


def as_typed(value) -> str:
    """A setting's value as an override gives it: null, true, [1,2] (Python's None, True, [1, 2]
    read as text would be another value: `eval_interval=None` is the string 'None')."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ",".join(as_typed(v) for v in value) + "]"
    return str(value)


def preset_values(name: str) -> dict | None:
    """The resolved fields of configs/arch/<name>.yaml, or None when no preset has that name."""
    path = Path(__file__).resolve().parents[1] / "configs" / "arch" / f"{name}.yaml"
    if not path.is_file():
        return None
    from omegaconf import OmegaConf
    return OmegaConf.to_container(OmegaConf.load(path), resolve=True)


def differences(before: dict, now: dict) -> list[str]:
    """The dotted keys whose value in `now` is not the one in `before` (flat_settings of each)."""
    old = flat_settings(before)
    return [key for key, value in flat_settings(now).items() if old.get(key, _MISSING) != value]


def flat_settings(settings: dict, prefix: str = "") -> dict:
    """{dotted key: value} of a nested config (`arch.scaling.p`), as overrides name them."""
    flat = {}
    for key, value in settings.items():
        if isinstance(value, dict):
            flat.update(flat_settings(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
