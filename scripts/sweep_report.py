"""What the p sweep (scripts/p_sweep.py) writes besides its picture: OUT.csv (one row per cell) and
OUT.md (the summary, naming the commands that trained its cells). `args` is p_sweep.py's parsed
command line (p_sweep.parse_args)."""
from __future__ import annotations

import csv
import math
import os
import re
from pathlib import Path

CSV_COLUMNS = ["p", "seed", "lr", "loops", "status", "final_loss", "min_loss", "steps", "floor",
               "alpha", "beta", "eval_lm_loss", "exit_code", "seconds"]


def write_csv(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".csv.tmp")
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})
    os.replace(tmp, path)


def previous_commands(md: Path) -> list[str]:
    """The commands an earlier OUT.md names on its `Command:` lines ([] without one)."""
    if not md.is_file():
        return []
    return re.findall(r"^Command: `(.*)`", md.read_text(errors="replace"), flags=re.MULTILINE)


def training_commands(records: list[dict], previous: list[str]) -> dict[str | None, int]:
    """{p_sweep.py command: how many of the cells it trained}, first seen first. A rerun that skips
    finished cells did not train them: each cell.json names the invocation that did. A cell
    recorded before cell.json kept it counts as the earlier summary's first command (None: unknown)."""
    counts: dict[str | None, int] = {}
    for record in records:
        command = record.get("sweep_command") or (previous[0] if previous else None)
        counts[command] = counts.get(command, 0) + 1
    return counts


def command_lines(trained_by: dict[str | None, int], command: str) -> list[str]:
    """OUT.md's `Command:` lines: the commands that trained the cells (with their cell counts when
    there are several, or when this invocation's is not one of them), then this one when it only
    summarised cells trained before."""
    if list(trained_by) in ([command], []):
        return [f"Command: `{command}`  "]
    lines = [f"Command: `{c}` (trained {n} cell{'s' * (n != 1)})  " if c else
             f"Command: not recorded (trained {n} cell{'s' * (n != 1)})  " for c, n in trained_by.items()]
    if command not in trained_by:
        lines.append(f"Summary written by: `{command}`  ")
    return lines


def summary_markdown(rows: list[dict], *, commands: list[str], build_line: str, floor: float, args, png: Path,
                     seconds: float) -> str:
    lines = [f"# p sweep{f' ({args.preset} preset)' if args.preset else ''}", "",
             *commands, build_line + "  ",
             f"Unigram floor: {floor:.4f} nats (entropy of the row-weighted training-label marginal; the same "
             f"for stablemax and softmax, see scripts/run_status.py)  ",
             f"Runs: arch={args.arch}, {args.steps} steps, batch {args.batch}, warmup {args.warmup}"
             + (f", overrides {' '.join(args.set)}" if args.set else "") + "  ",
             f"Classification: final loss = mean train LM loss of the last {args.window} steps; stuck when it is "
             f"not below floor x (1 - {args.margin:g}) = {floor * (1 - args.margin):.4f}; diverged on exit code 3 "
             f"or a non-finite loss  ",
             f"Wall time of this invocation: {seconds / 60:.1f} min", "",
             f"![p sweep]({png.name})", "",
             "| lr | loops (HxL) | p | alpha | beta | trained | stuck | diverged | error | final loss of trained seeds "
             "(mean; each) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    from scripts.sweep_plot import loops_order
    keys = sorted({(r["lr"], r["loops"], r["p"]) for r in rows}, key=lambda k: (k[0], loops_order(k[1]), k[2]))
    for lr, loops, p in keys:
        group = [r for r in rows if (r["lr"], r["loops"], r["p"]) == (lr, loops, p)]
        count = {s: sum(r["status"] == s for r in group) for s in ("trained", "stuck", "diverged", "error")}
        trained = [r["final_loss"] for r in group if r["status"] == "trained"]
        each = ", ".join(f"{x:.3f}" for x in trained)
        mean = f"{sum(trained) / len(trained):.4f} ({each})" if trained else "-"
        # from any seed whose log has them (an error cell's may not: its first row would show nan)
        logged = next((r for r in group if not math.isnan(r["alpha"])), group[0])
        lines.append(f"| {lr:g} | {loops} | {p:g} | {logged['alpha']:.4g} | {logged['beta']:.4g} | "
                     f"{count['trained']} | {count['stuck']} | {count['diverged']} | {count['error']} | {mean} |")
    lines += ["", f"| p | seed | lr | loops | status | final loss | min loss ({args.window}-step mean) | steps | "
                  f"eval LM loss | seconds |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['p']:g} | {r['seed']} | {r['lr']:g} | {r['loops']} | {r['status']} | "
                     f"{r['final_loss']:.4f} | {r['min_loss']:.4f} | {r['steps']} | {r['eval_lm_loss']:.4f} | "
                     f"{r['seconds']} |")
    return "\n".join(lines) + "\n"
