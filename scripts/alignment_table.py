"""The visit alignment that runs logged (`diagnostics_interval=N`), side by side, step by step.

The DeepLoop paper bounds stability by how aligned the gradient contributions of a shared
parameter's visits are, and leaves measuring it open; hrm/diagnostics.py measures it, and a run
with `diagnostics_interval=N` logs it every N steps. This reads those records from run folders and
writes, per logged step and per run: the mean alignment ||sum_r g_r|| / sum_r ||g_r|| of each
module's sublayers (H, L) and the mean pairwise cosine over all sublayers visited more than once.
For reference the header gives each module's visits per segment R (from the run's all_config.yaml)
and 1/sqrt(R), the alignment of R decorrelated visits of equal size; 1 is fully aligned.

Usage:
    python scripts/compare.py --preset cpu --set diagnostics_interval=25 --work checkpoints/compare_cpu_alignment \
        --out results/compare_cpu_alignment
    python scripts/alignment_table.py checkpoints/compare_cpu_alignment/baseline \
        checkpoints/compare_cpu_alignment/deeploop --out results/alignment_cpu
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.experiment_tools import (ExperimentError, parse_table_args, read_run_log,  # noqa: E402
                                     write_table)

MODULES = ("H", "L")


def visits_per_segment(run_dir: Path) -> dict[str, int]:
    """R per module in one segment with the full graph kept: H_cycles visits of each H sublayer,
    H_cycles * L_cycles of each L sublayer."""
    path = Path(run_dir) / "all_config.yaml"
    try:
        arch = yaml.safe_load(path.read_text())["arch"]
        return {"H": int(arch["H_cycles"]), "L": int(arch["H_cycles"]) * int(arch["L_cycles"])}
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as e:
        raise ExperimentError(f"{path}: cannot read the run's H_cycles and L_cycles ({type(e).__name__}: {e})") from None


def _mean(values: list[float]) -> float:
    finite = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return statistics.fmean(finite) if finite else math.nan


def alignment_rows(run_dir: Path) -> list[dict]:
    """One row per logged diagnostic step: {step, H, L (mean alignment of the module's sublayers),
    cosine (mean pairwise cosine, logged as alignment_cosine/mean)}."""
    rows = []
    for record in read_run_log(run_dir):
        if "alignment/mean" not in record:
            continue
        per_module = {m: _mean([v for k, v in record.items() if k.startswith(f"alignment/{m}.")]) for m in MODULES}
        rows.append({"step": record["step"], **per_module, "cosine": record.get("alignment_cosine/mean", math.nan)})
    if not rows:
        raise ExperimentError(f"{run_dir}: its log.jsonl holds no visit alignment (train it with "
                              f"diagnostics_interval=N)")
    return sorted(rows, key=lambda r: r["step"])


def _num(value: float) -> str:
    return "-" if not math.isfinite(value) else f"{value:.3f}"


def table_markdown(runs: dict[str, dict]) -> str:
    names = list(runs)
    lines = ["# Visit alignment during training", ""]
    for name, run in runs.items():
        r = run["visits"]
        lines.append(f"- `{name}` ({run['path']}): R = {r['H']} visits per segment for H (1/sqrt(R) = "
                     f"{1 / math.sqrt(r['H']):.3f}), {r['L']} for L ({1 / math.sqrt(r['L']):.3f})")
    lines += ["", "Alignment ||sum_r g_r|| / sum_r ||g_r|| per module (mean over its sublayers), and the mean "
              "pairwise cosine of the visits' gradients over all sublayers visited more than once.", "",
              "| step | " + " | ".join(f"{n} H | {n} L | {n} cosine" for n in names) + " |",
              "|---|" + "---|---|---|" * len(names)]
    by_step = [{row["step"]: row for row in run["rows"]} for run in runs.values()]
    for step in sorted(set().union(*by_step)):
        cells = []
        for rows in by_step:
            row = rows.get(step)
            cells += [_num(row[k]) if row else "-" for k in ("H", "L", "cosine")]
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    means = []
    for run in runs.values():
        means += [_num(_mean([row[k] for row in run["rows"]])) for k in ("H", "L", "cosine")]
    lines += ["| mean | " + " | ".join(means) + " |", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run folders of pretrain.py trained with diagnostics_interval")
    args = parse_table_args(ap, argv)
    runs = {}
    try:
        for run_dir in args.runs:
            name = run_dir.resolve().name
            if name in runs:
                raise ExperimentError(f"two runs named {name} ({runs[name]['path']}, {run_dir}): the table's "
                                      f"columns go by the folder's name")
            runs[name] = {"path": str(run_dir), "visits": visits_per_segment(run_dir), "rows": alignment_rows(run_dir)}
    except (ExperimentError, ValueError) as e:
        print(f"alignment_table.py: error: {e}", file=sys.stderr)
        return 2
    write_table(args.out, table_markdown(runs), runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
