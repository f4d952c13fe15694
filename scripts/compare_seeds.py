"""One table from several runs of scripts/compare.py that differ only in --seed.

A single seed cannot tell a scaling effect from the spread between seeds (on the cpu preset the
baseline's eval loss moves by more than the gap between the arms). This reads the JSON reports of
runs made with different --seed and otherwise the same settings, checks that they are comparable
(same preset, same arms, same build digest, the same training commands apart from the seed and
the run folders, each report's commands trained with the seed it names), and writes per seed and as
mean +- sample standard deviation: each arm's final train LM loss, eval LM loss and accuracies and
pass@K, and the paired difference between the arms (second arm minus first, seed by seed) with the
number of seeds where the second did better and the paired t statistic (n - 1 degrees of freedom;
|t| > 2.36 is p < 0.05 two-sided for 8 seeds).

Usage:
    python scripts/compare.py --preset cpu --seed 1 --work checkpoints/compare_cpu_seed1 --out results/compare_cpu_seed1
    ...
    python scripts/compare_seeds.py results/compare_cpu.json results/compare_cpu_seed*.json --out results/compare_cpu_over_seeds

Without --out the table is only printed. A diverged arm has no figures for its seed: its cells say
so, and the mean is over the seeds where both arms have the figure (the count is shown).
"""
from __future__ import annotations

import argparse
import json
import math
import shlex
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.experiment_tools import parse_table_args, output_path, seed_of, write_table  # noqa: E402

# (report field, row label, shown as a percentage); pass@K rows are added from the reports. The
# percentages are accuracies (higher is better), the others losses (lower is better).
METRICS = [("final_train_lm_loss", "final train LM loss", False),
           ("eval_lm_loss", "eval LM loss", False),
           ("eval_token_accuracy", "eval token accuracy", True),
           ("eval_exact_accuracy", "eval exact accuracy", True)]
# tokens of a training command that may differ between the seeds' runs: the seed itself, and the
# folders (each run of compare.py has its own --work; the build's digest is compared instead)
PER_RUN = ("seed=", "data_path=", "checkpoint_path=")


class SeedsError(ValueError):
    pass


def read_report(path: Path) -> dict:
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise SeedsError(f"{path}: cannot read it ({e.strerror or e})") from None
    except ValueError as e:
        raise SeedsError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(report, dict):
        raise SeedsError(f"{path}: not a report of scripts/compare.py (not a JSON object)")
    for field in ("preset", "seed", "build", "arms"):
        if field not in report:
            raise SeedsError(f"{path}: not a report of scripts/compare.py (no '{field}')")
    if not isinstance(report["arms"], dict) or len(report["arms"]) != 2:
        raise SeedsError(f"{path}: 'arms' must hold the comparison's two arms")
    problem = shape_problem(report)
    if problem:   # said here, by file and field: below, it was a traceback (AttributeError, TypeError...)
        raise SeedsError(f"{path}: not a report of scripts/compare.py ({problem})")
    return report


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def shape_problem(report: dict) -> str | None:
    """What in a report (its fields present) is not as compare.py writes it, naming the field, or
    None: a seed that is not a whole number (the columns are sorted by it), a build or arm that is
    not an object, a command that is not one shell line, a figure or pass@K that is not a number."""
    if not isinstance(report["seed"], int) or isinstance(report["seed"], bool):
        return f"'seed' is {report['seed']!r}, not a whole number"
    if not isinstance(report["build"], dict):
        return "'build' is not an object"
    for name, arm in report["arms"].items():
        if not isinstance(arm, dict):
            return f"arm '{name}' is not an object"
        command = arm.get("command")
        if command is not None and not isinstance(command, str):
            return f"arm '{name}': 'command' is not a string"
        try:
            shlex.split(command or "")
        except ValueError as e:   # an unclosed quote
            return f"arm '{name}': 'command' is not a shell line ({e})"
        for key, _, _ in METRICS:
            if arm.get(key) is not None and not _is_number(arm[key]):
                return f"arm '{name}': '{key}' is {arm[key]!r}, not a number"
        pass_at_k = arm.get("pass_at_k")
        if pass_at_k is None:
            continue
        if not isinstance(pass_at_k, dict):
            return f"arm '{name}': 'pass_at_k' is not an object"
        for k, scores in pass_at_k.items():
            if not k.isdigit() or not (scores is None or isinstance(scores, dict)):
                return f"arm '{name}': pass_at_k entry {k!r} is not K: {{task, pair}}"
            task = (scores or {}).get("task")
            if task is not None and not _is_number(task):
                return f"arm '{name}': pass@{k} task is {task!r}, not a number"
    return None


def shared_settings(report: dict) -> dict:
    """Each arm's training command without the tokens that differ from run to run by design."""
    return {name: [t for t in shlex.split(arm.get("command") or "") if not t.startswith(PER_RUN)]
            for name, arm in report["arms"].items()}


def check_comparable(reports: dict[Path, dict]) -> None:
    """Refuse, naming the file and what differs, reports that are not the same comparison."""
    (first_path, first), *rest = reports.items()
    seeds = {}
    for path, report in reports.items():
        # the seed= a command trained with is left out of the comparison below, so it must be the
        # report's: `compare.py --report` writes its own --seed (default 0) beside the commands its
        # runs were trained with, and one seed's runs reported twice would count as two seeds
        for name, arm in report["arms"].items():
            trained = seed_of(arm.get("command") or "")
            if trained is not None and trained != str(report["seed"]):
                raise SeedsError(f"{path}: it says seed {report['seed']}, but its {name} arm trained with "
                                 f"seed={trained} (a --report made without that run's --seed?)")
        if report["seed"] in seeds:
            raise SeedsError(f"{path} and {seeds[report['seed']]} are both seed {report['seed']}: "
                             f"each seed once")
        seeds[report["seed"]] = path
    for path, report in rest:
        for what, value, expected in (
                ("preset", report["preset"], first["preset"]),
                ("arms", list(report["arms"]), list(first["arms"])),
                ("build digest", report["build"].get("digest"), first["build"].get("digest"))):
            if value != expected:
                raise SeedsError(f"{path}: its {what} differs from {first_path}'s ({value} vs {expected}): "
                                 f"not the same comparison with another seed")
        settings, expected = shared_settings(report), shared_settings(first)
        for name in settings:
            if settings[name] != expected[name]:
                raise SeedsError(f"{path}: its {name} arm's training command (apart from seed and folders) differs "
                                 f"from {first_path}'s ({command_difference(settings[name], expected[name])}): "
                                 f"not the same comparison with another seed")


def command_difference(tokens: list[str], expected: list[str]) -> str:
    """What one command has that the other lacks, both ways: the whole commands would bury the one
    override that differs in a line of twenty shared ones."""
    only_here = [t for t in tokens if t not in expected]
    only_there = [t for t in expected if t not in tokens]
    if not only_here and not only_there:
        return "the same overrides, repeated or in another order"
    return f"{' '.join(only_here) or 'nothing'} vs {' '.join(only_there) or 'nothing'}"


def figure(arm: dict, key: str) -> float | None:
    """An arm's figure, None where it has none (a diverged arm: no evaluation, no vote)."""
    if key.startswith("pass@"):
        k, kind = key[len("pass@"):].split(":")
        value = ((arm.get("pass_at_k") or {}).get(k) or {}).get(kind)
    else:
        value = arm.get(key)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value)


def spread(values: list[float]) -> dict:
    """Mean and sample standard deviation (n - 1; none for one value) of the values present."""
    present = [v for v in values if v is not None]
    return {"n": len(present),
            "mean": statistics.fmean(present) if present else None,
            "sd": statistics.stdev(present) if len(present) > 1 else None}


def paired_t(s: dict) -> float | None:
    """The paired t statistic of the differences, mean / (sd / sqrt(n)) with n - 1 degrees of
    freedom: how many standard errors the mean difference lies from 0. None without a spread."""
    if s["sd"] is None or s["sd"] == 0:
        return None
    return s["mean"] / (s["sd"] / math.sqrt(s["n"]))


def summarize(reports: dict[Path, dict]) -> dict:
    check_comparable(reports)
    ordered = sorted(reports.items(), key=lambda item: item[1]["seed"])
    seeds = [r["seed"] for _, r in ordered]
    names = list(ordered[0][1]["arms"])
    ks = sorted({k for _, r in ordered for arm in r["arms"].values() for k in (arm.get("pass_at_k") or {})}, key=int)
    metrics = METRICS + [(f"pass@{k}:task", f"pass@{k} task", True) for k in ks]
    rows = []
    for key, label, percent in metrics:
        per_arm = {name: [figure(r["arms"][name], key) for _, r in ordered] for name in names}
        a, b = (per_arm[name] for name in names)
        difference = [None if x is None or y is None else y - x for x, y in zip(a, b)]
        difference_spread = spread(difference)
        # each arm's mean over the seeds where both arms have the figure (the differences' seeds): a
        # seed one arm diverged in, in the other's mean alone, would set two means of different seeds
        # side by side
        paired = {name: [v if d is not None else None for v, d in zip(values, difference)]
                  for name, values in per_arm.items()}
        rows.append({"metric": key, "label": label, "percent": percent,
                     "values": per_arm, "spread": {name: spread(v) for name, v in paired.items()},
                     "difference": difference, "difference_spread": difference_spread,
                     "paired_t": paired_t(difference_spread),
                     # seeds where the second arm did better (a tie is neither)
                     "second_better": sum(d is not None and (d > 0 if percent else d < 0) for d in difference)})
    return {"preset": ordered[0][1]["preset"], "seeds": seeds, "files": [str(p) for p, _ in ordered],
            "build_digest": ordered[0][1]["build"].get("digest"),
            "build": ordered[0][1]["build"].get("description"),
            "arms": {name: ordered[0][1]["arms"][name].get("label", name) for name in names},
            "outcomes": {name: [r["arms"][name].get("outcome") for _, r in ordered] for name in names},
            "rows": rows}


def _cell(value: float | None, percent: bool, signed: bool = False) -> str:
    if value is None:
        return "-"
    sign = "+" if signed else ""
    if not percent:
        return f"{value:{sign}.4f}"
    return f"{100 * value:{sign}.2f}" + (" pt" if signed else "%")   # a difference of percentages: points


def _mean_sd(s: dict, percent: bool, signed: bool = False) -> str:
    if s["mean"] is None:
        return "-"
    text = _cell(s["mean"], percent, signed)
    if s["sd"] is None:
        return text
    return f"{text} ± " + (f"{100 * s['sd']:.2f} pt" if percent else f"{s['sd']:.4f}")


def summary_markdown(summary: dict) -> str:
    names = list(summary["arms"])
    first, second = names
    n = len(summary["seeds"])
    lines = [f"# {first} vs {second} over {n} seeds ({summary['preset']} preset)",
             "",
             "Arms: " + "; ".join(f"{name} = {label}" for name, label in summary["arms"].items()) + "  ",
             f"Reports: {', '.join(f'`{f}`' for f in summary['files'])}  ",
             f"Build: {summary['build']}, digest `{summary['build_digest']}` (the same in every report)  ",
             "Settings: the same training commands apart from the seed (each report's table lists them)  ",
             "Outcomes: " + "; ".join(f"{name}: {', '.join(map(str, summary['outcomes'][name]))}" for name in names),
             "",
             "| | " + " | ".join(f"seed {s}" for s in summary["seeds"]) + f" | mean ± sd (n) | {second} better in | paired t |",
             "|---|" + "---|" * (n + 3)]
    for row in summary["rows"]:
        percent = row["percent"]
        for name in names:
            s = row["spread"][name]
            lines.append(f"| {row['label']}, {name} | " + " | ".join(_cell(v, percent) for v in row["values"][name])
                         + f" | {_mean_sd(s, percent)} ({s['n']}) | | |")
        d = row["difference_spread"]
        lines.append(f"| {row['label']}, {second} − {first} | "
                     + " | ".join(_cell(v, percent, signed=True) for v in row["difference"])
                     + f" | {_mean_sd(d, percent, signed=True)} ({d['n']}) | {row['second_better']} of {d['n']} | "
                     + ("-" if row["paired_t"] is None else f"{row['paired_t']:+.2f}") + " |")
    lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("reports", nargs="+", type=Path, help="JSON reports of scripts/compare.py, one per seed")
    args = parse_table_args(ap, argv)
    if args.out is not None:
        # `--out results/compare_cpu` would write over the report of seed 0 it reads
        inputs = {p.resolve() for p in args.reports}
        clash = [str(output_path(args.out, s)) for s in (".md", ".json") if output_path(args.out, s).resolve() in inputs]
        if clash:
            ap.error(f"--out {args.out} would write over {clash[0]}, one of the reports it reads")
    try:
        reports = {}
        for path in args.reports:
            if path in reports:
                raise SeedsError(f"{path} is given twice")
            reports[path] = read_report(path)
        summary = summarize(reports)
    except SeedsError as e:
        print(f"compare_seeds.py: error: {e}", file=sys.stderr)
        return 2
    write_table(args.out, summary_markdown(summary), summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
