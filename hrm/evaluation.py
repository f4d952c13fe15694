"""Evaluation over a build's test split: metrics, the predictions files that evaluate/vote.py reads,
and their pass@K (the same voting, for the training log).

Predictions (contract, DESIGN.md): one `rank_<r>.npz` per rank with `puzzle_identifiers` int32 [n],
`inputs` uint8 [n, 900], `preds` uint8 [n, 900] (argmax tokens of the final segment),
`q_halt_logits` float32 [n]; padding rows have identifier 0. Beside them `info.json` records the
build they belong to: {"data_path", "step", "world_size", "checkpoint"}.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from hrm.checkpoint import named_write_error
from hrm.compiled import compile_fixed_shapes
from hrm.distributed import AgreedOnEveryRank, DistInfo, agree_on_outcome, all_reduce_sum_
from hrm.run_log import progress_bar


_EMPTY = {"puzzle_identifiers": np.zeros(0, np.int32), "inputs": np.zeros((0, 900), np.uint8),
          "preds": np.zeros((0, 900), np.uint8), "q_halt_logits": np.zeros(0, np.float32)}


def to_device(batch: dict, device: torch.device) -> dict:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def compiled_segment(model):
    """``model.segment`` under torch.compile, for evaluation (HRM.predict's ``segment``). One
    segment, not the whole prediction: the halt_max_steps segments reuse one graph, whose size and
    compile wait are those of a training step's, where the unrolled prediction would be 16 times
    that. Fixed shapes: `evaluate` then keeps the padded last batch whole, so a run compiles it once."""
    return compile_fixed_shapes(model.segment)


class EvaluationStopped(RuntimeError):
    """`evaluate`'s `stop` said so after a batch, on every rank alike; nothing was kept."""


def evaluate(loss_head, batches, info: DistInfo, keep_predictions: bool = True, progress: bool = False,
             segment=None, stop=None):
    """Run every test batch through `loss_head.evaluate`; returns (metrics averaged per counted row,
    this rank's prediction arrays or None). Collective: every rank must call it. ``segment``: a
    compiled segment (`compiled_segment`) for `HRM.predict`; every batch is then run at full size.
    ``stop``: called after each batch but the last (a collective, so that every rank gives the same
    answer); True raises EvaluationStopped (training's SIGTERM: a pass over the whole test split can
    outlast the scheduler's grace period; a finished one is kept)."""
    was_training = loss_head.training
    loss_head.eval()
    try:
        return _evaluate(loss_head, batches, info, keep_predictions, progress, segment, stop)
    finally:
        loss_head.train(was_training)


@torch.inference_mode()
def _evaluate(loss_head, batches, info: DistInfo, keep_predictions: bool, progress: bool, segment, stop):
    sums = None
    keys: list[str] = []
    parts: dict[str, list[np.ndarray]] = {"puzzle_identifiers": [], "inputs": [], "preds": [], "q_halt_logits": []}
    for index, batch in enumerate(progress_bar(batches, desc="eval", unit="batch", leave=False,
                                              disable=not (progress and info.is_main))):
        # The reader pads the last batch with identical blank rows (identifier 0) at its end: one is
        # run, for all of them (unless compiled: another batch size would compile again), and one is
        # kept, either way. It has no labels, so it only counts towards q_halt_loss, where HRM scores
        # it as "exactly correct": BCE(q_halt, 1) = softplus(-q_halt) per blank row. The original
        # runs every blank row; adding that term for the ones skipped keeps its number.
        n = len(batch["puzzle_identifiers"])
        kept = min(int(torch.count_nonzero(batch["puzzle_identifiers"])) + 1, n)
        if kept < n and segment is None:
            batch = {k: v[:kept] for k, v in batch.items()}
        batch = to_device(batch, info.device)
        metrics, outputs = loss_head.evaluate(batch, segment)
        ran = len(batch["puzzle_identifiers"])
        if ran < n and "q_halt_loss" in metrics:
            skipped = F.softplus(-outputs["q_halt_logits"][kept - 1].float()) * (n - ran)
            metrics = {**metrics, "q_halt_loss": metrics["q_halt_loss"] + skipped}
        if kept < ran:
            batch = {k: v[:kept] for k, v in batch.items()}
            outputs = {k: outputs[k][:kept] for k in ("preds", "q_halt_logits")}
        if sums is None:
            keys = sorted(metrics)
            sums = torch.zeros(len(keys), dtype=torch.float64, device=info.device)
        sums += torch.stack([metrics[k].double() for k in keys])
        if keep_predictions:
            parts["puzzle_identifiers"].append(batch["puzzle_identifiers"].to(torch.int32).cpu().numpy())
            parts["inputs"].append(batch["inputs"].to(torch.uint8).cpu().numpy())
            parts["preds"].append(outputs["preds"].to(torch.uint8).cpu().numpy())
            parts["q_halt_logits"].append(outputs["q_halt_logits"].float().cpu().numpy())
        if stop is not None and index + 1 < len(batches) and stop():
            raise EvaluationStopped("evaluation stopped before the end of the test split")
    result = {}
    if sums is not None:
        totals = all_reduce_sum_(sums, info).tolist()
        named = dict(zip(keys, totals))
        count = named.pop("count")
        result = {k: v / max(count, 1.0) for k, v in named.items()}   # no labelled row: sums of 0, not 0/0
        result["count"] = count
    arrays = {k: np.concatenate(v) if v else _EMPTY[k] for k, v in parts.items()} if keep_predictions else None
    return result, arrays


def score_predictions(folder: Path, split, ks) -> dict[str, float]:
    """pass@K of a predictions folder exactly as evaluate/vote.py scores it (count-first voting):
    `pass@K` the paper's task fraction, `pair_pass@K` the ARC Prize per-test-input credit.
    `split`: the build's `evaluate.build_reader.load_test_split` (loaded once per run)."""
    from evaluate.predictions import resolve_predictions
    from evaluate.scoring import pair_stats, pass_at_k
    from evaluate.voting import vote
    results = pass_at_k(pair_stats(vote(resolve_predictions(str(folder)).files, split)), split.task_pair_start, ks)
    scores = {}
    for k, r in results.items():
        scores[f"pass@{k}"] = r["task"]
        scores[f"pair_pass@{k}"] = r["pair"]
    return scores


class PredictionsNotWritten(RuntimeError):
    """Writing an evaluation's predictions failed on some rank (a full disk, a folder without write
    permission), raised by every rank alike: the folder holds no info.json, so no vote reads it."""


def write_predictions(out_dir: str | Path, arrays: dict, info: DistInfo, *, data_path: str, step: int | None,
                      checkpoint: str | None) -> Path:
    """Collective: each rank writes its file, then rank 0 writes info.json (its presence marks the
    folder complete). An earlier evaluation in the same folder (the trainer's on 8 GPUs, then
    predict.py on one) is replaced whole: its info.json and any rank file past this world size go
    first, so a vote never mixes the two. A write that fails on any rank fails on every rank
    (PredictionsNotWritten), each stage's outcome exchanged where a barrier would leave the others
    waiting for the failed rank until the collective's timeout."""
    out_dir = Path(out_dir)

    def clear() -> None:
        if info.is_main:
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / "info.json").unlink(missing_ok=True)
            # by exact name, not by parsing the number: `rank_01` would pass for rank 1, and `rank_²`
            # passes isdigit() but not int()
            ours = {f"rank_{r}.npz" for r in range(info.world_size)}
            for old in out_dir.glob("rank_*.npz"):
                if old.name not in ours:
                    old.unlink()

    def write_rank_file() -> None:
        tmp = out_dir / f".rank_{info.rank}.tmp.npz"
        try:
            np.savez(tmp, **arrays)
            # inside the try: a rename that fails (a folder in the way) left the hidden file behind
            os.replace(tmp, out_dir / f"rank_{info.rank}.npz")
        except BaseException as e:
            tmp.unlink(missing_ok=True)    # on a full disk, the space it took is what is lacking
            raise named_write_error(e, tmp)

    def write_info() -> None:
        if info.is_main:
            meta = {"data_path": str(Path(data_path).resolve()), "step": step, "world_size": info.world_size,
                    "checkpoint": checkpoint}
            tmp_info = out_dir / ".info.json.tmp"
            try:
                tmp_info.write_text(json.dumps(meta, indent=1) + "\n")
                os.replace(tmp_info, out_dir / "info.json")
            except BaseException as e:
                tmp_info.unlink(missing_ok=True)
                raise named_write_error(e, tmp_info)

    for stage in (clear, write_rank_file, write_info):
        try:
            agree_on_outcome(stage, info, refusals=(OSError,))
        except AgreedOnEveryRank as e:
            raise PredictionsNotWritten(f"cannot write the predictions into {out_dir}: {e}") from None
    return out_dir
