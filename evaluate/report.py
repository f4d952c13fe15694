"""The vote's results as the JSON report (contract) and as the table printed on stdout.

JSON (``--json``)::

    {"pass_at_k": {"<K>": {"task": f, "pair": f, "tasks_solved": n, "pairs_solved": n}, ...},
     "tasks": {"<task>": {"solved_at": K or null, "margin": m or null,
                          "pairs": [{"rank": r or null, "votes": n, "candidates": n,
                                     "correct_votes": n, "correct_confidence": c or null,
                                     "margin": m or null,
                                     "top": [{"votes": n, "confidence": c, "correct": bool,
                                              "grid": [[...]]}, ...]}, ...]}, ...},
     "missing": {"tasks": [...], "pairs": [["<task>", i], ...]},   # pairs: of tasks not missing
     "meta": {"predictions": [...], "source": "...", "data": "...", "step": s, "rows": n, "padding_rows": n,
              "tasks": n, "pairs": n, "tasks_seen": n, "pairs_seen": n, "K": [...]}}

``rank`` is 1-based (null: no prediction gave the right answer); ``solved_at`` is the smallest K
at which the task counts under the paper protocol (the largest rank of its test inputs); ``margin``
is ``(right votes - best wrong votes) / votes`` per test input, the task's being its worst input's.
"""
from __future__ import annotations

import math

from evaluate.scoring import PairStats
from evaluate.voting import Votes


def _float(x) -> float | None:
    return None if x is None or math.isnan(x) else float(x)


def build_report(votes: Votes, stats: PairStats, results: dict[int, dict], top: int, meta: dict) -> dict:
    split, c = votes.split, votes.candidates
    margin = stats.margin
    tasks, missing_tasks, missing_pairs = {}, [], []
    for k, task in enumerate(split.tasks):
        lo, hi = int(split.task_pair_start[k]), int(split.task_pair_start[k + 1])
        pairs = []
        for p in range(lo, hi):
            first = int(c.pair_start[p])
            shown = range(first, min(int(c.pair_start[p + 1]), first + top))
            pairs.append({
                "rank": int(stats.correct_rank[p]) + 1 if stats.correct_rank[p] >= 0 else None,
                "votes": int(stats.votes[p]), "candidates": int(stats.candidates[p]),
                "correct_votes": int(stats.correct_votes[p]),
                "correct_confidence": _float(stats.correct_confidence[p]),
                "margin": _float(margin[p]),
                "top": [{"votes": int(c.votes[g]), "confidence": _float(c.confidence[g]),
                         "correct": bool(votes.correct[g]), "grid": votes.grid(g).tolist()} for g in shown],
            })
        unvoted = [i for i, p in enumerate(range(lo, hi)) if stats.votes[p] == 0]
        if unvoted and len(unvoted) == hi - lo:
            missing_tasks.append(task)
        else:
            missing_pairs += [[task, i] for i in unvoted]
        ranks = [pair["rank"] for pair in pairs]
        margins = [pair["margin"] for pair in pairs]
        tasks[task] = {"solved_at": max(ranks) if ranks and None not in ranks else None,
                       "margin": min(margins) if margins and None not in margins else None,
                       "pairs": pairs}
    return {"pass_at_k": {str(k): v for k, v in results.items()}, "tasks": tasks,
            "missing": {"tasks": missing_tasks, "pairs": missing_pairs},
            "meta": {**meta, "rows": votes.rows, "padding_rows": votes.padding_rows,
                     "tasks": len(split.tasks), "pairs": split.num_pairs,
                     "tasks_seen": len(split.tasks) - len(missing_tasks),
                     "pairs_seen": int((stats.votes > 0).sum()), "K": [int(k) for k in results]}}


def format_table(report: dict, max_listed: int = 20) -> str:
    meta = report["meta"]
    lines = [f"predictions: {', '.join(meta['predictions'])}" if len(meta["predictions"]) <= 2 else
             f"predictions: {len(meta['predictions'])} files in {meta['source']}",
             f"build: {meta['data']}" + (f"   step: {meta['step']}" if meta.get("step") is not None else ""),
             f"rows: {meta['rows']} ({meta['padding_rows']} padding)   "
             f"tasks: {meta['tasks_seen']}/{meta['tasks']} with predictions   "
             f"test inputs: {meta['pairs_seen']}/{meta['pairs']} with predictions",
             ""]
    width = max([6, *(len(str(k)) for k in report["pass_at_k"])])   # a K of more digits widens the column
    lines.append(f"{'K':>{width}}   {'task (paper)':<22}{'pair (ARC Prize)':<19}test inputs solved")
    for k, r in report["pass_at_k"].items():
        tasks = f"{100 * r['task']:6.2f}%  ({r['tasks_solved']}/{meta['tasks']})"
        lines.append(f"{k:>{width}}   {tasks:<22}{100 * r['pair']:6.2f}%{'':12}{r['pairs_solved']}/{meta['pairs']}")
    missing = report["missing"]
    for label, items in (("tasks without predictions", missing["tasks"]),
                         ("test inputs without predictions", [f"{t}[{i}]" for t, i in missing["pairs"]])):
        if items:
            more = f" ... and {len(items) - max_listed} more" if len(items) > max_listed else ""
            lines.append(f"{label} ({len(items)}, counted wrong): {' '.join(items[:max_listed])}{more}")
    return "\n".join(lines)
