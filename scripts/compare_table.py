"""The table of the baseline-vs-DeepLoop comparison (scripts/compare.py): OUT.md, made from the
report that OUT.json holds (compare_arms.arm_result's row for each arm)."""
from __future__ import annotations

import math

from scripts.run_status import DEFAULT_WINDOW as FINAL_WINDOW, STUCK


# ----------------------------------------------------------------------------------- reporting
def _num(value, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.2f}%"


def _outcome(arm: dict) -> str:
    if arm.get("diverged_at") is not None:
        return f"diverged at step {arm['diverged_at']}"
    return {STUCK: "stuck at the floor"}.get(arm.get("outcome"), arm.get("outcome") or "-")


def results_markdown(report: dict) -> str:
    arms = list(report["arms"].values())
    header = "| | " + " | ".join(a["label"] for a in arms) + " |"
    rule = "|---|" + "---|" * len(arms)

    def row(name, values):
        return f"| {name} | " + " | ".join(values) + " |"

    # every K either arm was voted with, in order: an arm voted again by hand with other --K (a
    # --report) has no figure for the others, where the first arm's K alone were shown, and a K
    # the second arm lacked was a KeyError
    ks = sorted({k for a in arms for k in (a["pass_at_k"] or {})}, key=int)   # none: all diverged
    lines = [f"# Baseline vs DeepLoop ({report['preset']} preset)", "",
             f"Command: `{report['command']}`  ",
             f"Build: {report['build']['description']}, digest `{report['build']['digest']}` "
             # --report trains nothing: the digest is the build's as the table was made
             + ("(read by --report)  " if report.get("report_only") else "(verified before each training)  "),
             f"Settings: {' '.join(report['common'])}  " if report.get("common") is not None else
             "Settings: see the training commands below  ",
             f"Unigram floor of the build: {report['build']['unigram_floor']:.4f} nats (the train LM loss of always "
             f"predicting the label frequencies; scripts/run_status.py)  ",
             f"Wall time: {report['seconds'] / 60:.1f} min in all" + (
                 f" ({report['jobs']} arms at a time, {report['threads']} thread(s) each)" if report.get("jobs") else "")
             + ("; GPUs " + ", ".join(f"{name} {gpu}" for name, gpu in report["gpus"].items())
                if any((report.get("gpus") or {}).values()) else "")
             if not report.get("report_only") else "Table made with --report from existing run folders",
             "", header, rule,
             row("alpha / beta", [f"{_num(a['alpha'])} / {_num(a['beta'])}" for a in arms]),
             row("steps", [str(a["steps"]) for a in arms]),
             row("outcome (as the p-sweep classifies a cell)", [_outcome(a) for a in arms]),
             row(f"final train LM loss (mean of last {FINAL_WINDOW} steps, or all)", [_num(a["final_train_lm_loss"]) for a in arms]),
             row(f"final train loss incl. Q-heads (last {FINAL_WINDOW})", [_num(a["final_train_loss"]) for a in arms]),
             row("lowest single-step train LM loss", [_num(a["min_train_lm_loss"]) for a in arms]),
             row("eval LM loss", [_num(a["eval_lm_loss"]) for a in arms]),
             row("eval token accuracy", [_pct(a["eval_token_accuracy"]) for a in arms]),
             row("eval exact accuracy", [_pct(a["eval_exact_accuracy"]) for a in arms])]
    for k in ks:
        scores = [(a["pass_at_k"] or {}).get(k) for a in arms]
        lines.append(row(f"pass@{k} task (pair)", [f"{_pct(s['task'])} ({_pct(s['pair'])})" if s is not None else "-"
                                                   for s in scores]))
    lines.append(row("predictions written by", [a.get("predictions_by") or "-" for a in arms]))
    lines.append(row("wall time train / predict / vote (s)",
                     [" / ".join("-" if a["seconds"][k] is None else f"{a['seconds'][k]:.0f}"
                                 for k in ("train", "predict", "vote")) for a in arms]))
    lines += ["", "Training commands:", ""] + [f"- `{a['command']}`" + (
        "" if a.get("command_recorded", True) else " (not recorded in the run folder: as this --report's flags "
                                                   "give it; the run's settings are in its all_config.yaml)")
        for a in arms]
    lines += ["", *report.get("notes", [])]
    return "\n".join(lines).rstrip() + "\n"
