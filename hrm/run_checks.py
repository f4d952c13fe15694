"""The checks that a run's build and settings belong together, before it trains: the two splits of
one build, the same build on every rank, and a resumed checkpoint's architecture, build and batch
order (refused with every setting that differs)."""
from __future__ import annotations

from pathlib import Path

from arc_data.dataset import DatasetError
from hrm.config import ArchConfig
from hrm.distributed import DistInfo, RefusedOnEveryRank, gather_objects, rank_span
from hrm.pretrain_config import PretrainConfig
from hrm.scaling import derive_scaling


def check_splits_agree(train_split, test_split) -> None:
    """The model is sized by the train split's dataset.json and evaluated on the test split: a test
    split from another build (a larger identifier table, another seq_len) would fail only at the
    first evaluation, in the model, after a whole evaluation interval of training."""
    fields = ("seq_len", "vocab_size", "num_puzzle_identifiers", "pad_id", "ignore_label_id")
    differ = [f"{key} {getattr(test_split.metadata, key)!r} (train: {getattr(train_split.metadata, key)!r})"
              for key in fields if getattr(test_split.metadata, key) != getattr(train_split.metadata, key)]
    if differ:
        raise DatasetError(f"{test_split.directory / 'dataset.json'}: {', '.join(differ)}: the test split does "
                           f"not belong to the same build as {train_split.directory}; rebuild the data")


def build_fingerprint(identity: dict, train_split, test_split) -> dict:
    """What every rank must agree on about the build it read: its identity (build_identity) and the
    sizes and metadata of both splits (a build without manifest.json has no digest to tell)."""
    return {**identity, **{split.directory.name: (split.num_groups, split.num_puzzles, split.num_examples,
                                                  split.metadata.model_dump())
                           for split in (train_split, test_split)}}


def check_one_build(fingerprint: dict, data_path: str, info: DistInfo) -> None:
    """Collective. Each rank reads data_path on its own machine, and the reader's global batch is
    computed by every rank from its own copy: a node with a stale or other copy (another --seed:
    same sizes, other puzzles) would silently train other rows, and its puzzle-embedding rows under
    identifiers that name other puzzles there (or, with other sizes, hang in the first broadcast).
    Every rank gathers every rank's fingerprint and raises the same refusal."""
    fingerprints = gather_objects(fingerprint, info)
    others = [rank for rank, theirs in enumerate(fingerprints) if theirs != fingerprints[0]]
    if others:
        raise RefusedOnEveryRank(f"data_path={data_path}: {rank_span(others)} read another build than rank 0 "
                                 f"(identifiers.json, manifest digest or split sizes differ); with several nodes, "
                                 f"every node needs the same build at that path")


# May differ on resume: the compute dtype follows the device (a CPU run continued on GPUs), the
# name is a label.
RESUMABLE_ARCH_CHANGES = {"name", "forward_dtype"}


def same_scaling(saved_arch: dict, arch: ArchConfig) -> bool:
    """Whether two scaling settings give the same model: the same rule, alpha, beta, eps per module."""
    try:
        return derive_scaling(ArchConfig(**saved_arch)) == derive_scaling(arch)
    except (ValueError, TypeError):   # a saved arch this version no longer reads: not the same
        return False


def check_same_arch(saved_config: dict, config: PretrainConfig, checkpoint: Path) -> None:
    """Resuming with another architecture or scaling would load the weights into a different model
    (same shapes, other alpha, cycles, ...) and mix two models in one run's log: refuse, naming
    every field that differs."""
    from hrm.resume_settings import flat_settings
    saved = flat_settings(saved_config.get("arch", {}), "arch.")
    now = flat_settings(config.arch.model_dump(mode="json", by_alias=True), "arch.")
    changed = sorted(k for k in saved.keys() | now.keys()
                     if k.removeprefix("arch.") not in RESUMABLE_ARCH_CHANGES and saved.get(k) != now.get(k))
    if changed and all(k.startswith("arch.scaling.") for k in changed) and \
            same_scaling(saved_config["arch"], config.arch):
        changed = []   # written otherwise, the same constants: deeploop with p=0.5 spelled out, say
    if changed:
        shown = ", ".join(f"{k}: {saved.get(k)!r} in the checkpoint, {now.get(k)!r} now" for k in changed)
        # pretrain.py takes what the command line does not give from the checkpoint; a preset named
        # there (`arch=hrm_tiny`, as in the command that started a sweep) gives all of its arch
        raise ValueError(f"resume={checkpoint}: the run was trained with another architecture ({shown}); "
                         f"resume with the checkpoint's settings (its all_config.yaml): leave arch=<preset> and "
                         f"arch.* off the command line, which then takes them from the checkpoint; or start a "
                         f"new run")


def check_same_data(saved_config: dict, saved_data: dict | None, config: PretrainConfig, data: dict,
                    checkpoint: Path) -> None:
    """The saved data-reader position means something only for the same build and the same batch
    order (seed, global batch, epochs per iteration); and the puzzle-embedding rows belong to the
    puzzles of the build they were trained on. Refuse another, naming the settings as configured.
    `saved_data`: the build identity saved with the checkpoint (None before it was saved)."""
    def per_iteration(c: dict) -> int:
        return c.get("eval_interval") or c.get("epochs")
    changed = [f"{key}: {saved_config.get(key)!r} in the checkpoint, {getattr(config, key)!r} now"
               for key in ("seed", "global_batch_size") if saved_config.get(key) != getattr(config, key)]
    if per_iteration(saved_config) != config.epochs_per_iteration:
        changed.append(f"eval_interval (epochs between evaluations; `epochs` when null): "
                       f"{per_iteration(saved_config)!r} in the checkpoint, {config.epochs_per_iteration!r} now")
    if changed:
        raise ValueError(f"resume={checkpoint}: these settings fix the order of the training batches, and the "
                         f"run's position in it: {'; '.join(changed)}. Resume with the checkpoint's values "
                         f"(its all_config.yaml), or start a new run")
    if saved_data is None:
        return
    trained_on = saved_config.get("data_path")
    if saved_data["identifiers_sha256"] != data["identifiers_sha256"]:
        raise ValueError(f"resume={checkpoint}: data_path={config.data_path} is not the build the run was trained "
                         f"on ({trained_on}): its puzzle names differ (identifiers.json sha256 "
                         f"{data['identifiers_sha256'][:12]}..., the run's {saved_data['identifiers_sha256'][:12]}...), "
                         f"so every puzzle-embedding row would belong to another puzzle. Resume with that build "
                         f"(a build with another --seed or --listing-order has the same sizes but other names)")
    if saved_data["digest"] and data["digest"] and saved_data["digest"] != data["digest"]:
        raise ValueError(f"resume={checkpoint}: data_path={config.data_path} is not the build the run was trained "
                         f"on ({trained_on}): same puzzles, other contents (build digest {data['digest'][:12]}..., "
                         f"the run's {saved_data['digest'][:12]}...; see each manifest.json). Resume with that "
                         f"build, or start a new run")
