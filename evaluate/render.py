"""Pictures of ARC tasks, from a build and optionally from vote results.

    python evaluate/render.py --data DIR --task ID [ID ...]             any puzzle of a build
    python evaluate/render.py --votes results.json --worst 10 [--best 10] [--task ID ...]
                              [--data DIR] [--top 3] [--format html|png|both] [--out renders]

With --votes (the --json of vote.py), test inputs show the best-ranked answers and their votes;
--best/--worst pick the tasks with the largest/smallest vote margin ((votes for the right answer -
votes for the best wrong one) / votes, of the task's worst test input). HTML: one self-contained
page with every chosen task; PNG: one picture per task. The build defaults to the one the votes
were counted on. --out is checked before anything is drawn, and each file is written whole or not
at all.
"""
from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    # run as a script: make the repository importable, and stop evaluate/ itself from shadowing
    # top-level module names (the script's folder is put first on sys.path)
    _repo = str(Path(__file__).resolve().parents[1])
    sys.path[:] = [_repo] + [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse  # noqa: E402
from contextlib import contextmanager  # noqa: E402
import json  # noqa: E402

from evaluate.errors import EvaluationInputError, recorded_build_missing  # noqa: E402
from evaluate.pictures import html_page, task_sheet  # noqa: E402
from evaluate.outputs import check_output_dir, quiet_on_broken_pipe, write_atomic  # noqa: E402
from evaluate.png import encode_png  # noqa: E402
from evaluate.task_view import BuildTasks, add_votes, by_margin  # noqa: E402
from evaluate.vote import count, nonempty  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=nonempty(Path), help="the build (default: the one recorded in --votes)")
    ap.add_argument("--task", nargs="+", default=[], metavar="ID", help="puzzle names to draw")
    ap.add_argument("--votes", type=nonempty(Path), help="vote.py --json results, to show the voted answers")
    ap.add_argument("--best", type=count, default=0, metavar="N", help="the N tasks with the largest vote margin")
    ap.add_argument("--worst", type=count, default=0, metavar="N", help="the N tasks with the smallest vote margin")
    ap.add_argument("--top", type=count, default=3, help="answers shown per test input (default 3)")
    ap.add_argument("--format", choices=("html", "png", "both"), default="html")
    ap.add_argument("--out", type=nonempty(Path), default=Path("renders"), help="output folder (default renders/)")
    return ap.parse_args(argv)


def choose_tasks(args, results: dict | None) -> list[str]:
    names = list(args.task)
    if (args.best or args.worst) and results is None:
        raise EvaluationInputError("--best/--worst need --votes (the --json output of vote.py)")
    if results is not None:
        picked = by_margin(results, args.best, best=True) + by_margin(results, args.worst, best=False)
        if (args.best or args.worst) and not picked:
            raise EvaluationInputError(f"--best/--worst: no task of {args.votes} has a vote margin (it needs "
                                       f"predictions for every test input of the task); name tasks with --task")
        names += picked
    if not names:
        raise EvaluationInputError("nothing to draw: give --task, or --votes with --best/--worst")
    return list(dict.fromkeys(names))          # in order, each once


def read_votes(path: Path) -> dict:
    """The --json output of vote.py, its file named in every refusal (json's own messages, such
    as "Expecting value: line 2 column 1", name none)."""
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise EvaluationInputError(f"{path}: cannot read it ({e.strerror or e})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise EvaluationInputError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(results, dict) or "tasks" not in results or "meta" not in results:
        held = f"a {type(results).__name__}" if not isinstance(results, dict) else "an object"
        raise EvaluationInputError(f"{path} is not the --json output of vote.py (it holds {held}, "
                                   f"not an object with tasks and meta)")
    for key in ("tasks", "meta"):
        if not isinstance(results[key], dict):
            raise EvaluationInputError(f"{path} is not the --json output of vote.py (its {key} is a "
                                       f"{type(results[key]).__name__}, not an object)")
    return results


@contextmanager
def edited_votes_named(path: Path, where: str):
    """A vote.py --json edited by hand (a grid that is not a list of rows of colours, a vote count
    in quotes) fails deep in the drawing code: name the file and the task instead of a traceback."""
    try:
        yield
    except EvaluationInputError:
        raise
    except (TypeError, AttributeError, IndexError, ValueError, OverflowError) as e:
        raise EvaluationInputError(f"{path}: {where} not as vote.py --json writes it ({type(e).__name__}: {e})") from None


def file_stem(name: str) -> str:
    """A task name as a file name in --out: a "/" (a task JSON's 'name' field may hold one) would put
    the file in a subfolder, or with "../" outside --out; "%" is escaped too, so names stay distinct."""
    return name.replace("%", "%25").replace("/", "%2F")


def draw(args, views: list, data) -> list[Path]:
    """Write the pictures; returns their paths."""
    written = []
    if args.format in ("html", "both"):
        stem = file_stem(views[0].name) if len(views) == 1 else "tasks"
        written.append(write_atomic(args.out / f"{stem}.html", html_page(views, f"{len(views)} task(s) of {data}")))
    if args.format in ("png", "both"):
        written += [write_atomic(args.out / f"{file_stem(view.name)}.png", encode_png(task_sheet(view)[0]))
                    for view in views]
    return written


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        check_output_dir(args.out, "--out")
        results = read_votes(args.votes) if args.votes else None
        data = args.data or (Path(results["meta"]["data"]) if results else None)
        if data is None:
            raise EvaluationInputError("--data is required without --votes")
        if not args.data and not data.is_dir():   # recorded where the vote ran: moved, or another machine
            raise recorded_build_missing(data, f"build recorded in {args.votes} (meta.data)")
        build = BuildTasks(data)
        views = []
        with edited_votes_named(args.votes, "a task's margin is"):
            chosen = choose_tasks(args, results)
        for name in chosen:
            view = build.task(name)
            if results is not None and name in results["tasks"]:
                with edited_votes_named(args.votes, f"the entry of task {name!r} is"):
                    add_votes(view, results["tasks"][name], args.top)
            views.append(view)
        written = draw(args, views, data)
    except KeyError as e:
        print(f"render.py: error: {args.votes} is not the --json output of vote.py (no {e} in it)",
              file=sys.stderr)
        return 2
    except (EvaluationInputError, OSError, ValueError) as e:
        print(f"render.py: error: {e}", file=sys.stderr)
        return 2
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(quiet_on_broken_pipe(main))
