"""scripts/compare_seeds.py: compare.py's reports of several seeds in one table, checked by hand."""
import json
from pathlib import Path

import pytest

from scripts import compare_seeds

REPO = Path(__file__).resolve().parents[1]
ARMS = {"baseline": ("HRM, no scaling", "arch.scaling.rule=none "), "deeploop": ("HRM + DeepLoop", "")}


def report(seed: int, eval_lm: dict, *, token_acc: dict | None = None, digest="d1", lr="0.001",
           diverged: str | None = None) -> dict:
    """A report as compare.py --preset cpu writes it; each run has its own --work folder."""
    arms = {}
    for name, (label, flag) in ARMS.items():
        work = f"checkpoints/compare_cpu_seed{seed}"
        gone = name == diverged
        arms[name] = {
            "label": label, "outcome": "diverged" if gone else "trained", "diverged_at": 40 if gone else None,
            "command": f"python pretrain.py arch=hrm_tiny {flag}data_path={work}/build lr={lr} seed={seed} "
                       f"checkpoint_path={work}/{name}",
            "final_train_lm_loss": float("nan") if gone else 1.0, "eval_lm_loss": None if gone else eval_lm[name],
            "eval_token_accuracy": None if gone else (token_acc or {}).get(name, 0.7), "eval_exact_accuracy": None if gone else 0.0,
            "pass_at_k": None if gone else {"1": {"task": 0.0, "pair": 0.0}, "2": {"task": 0.125, "pair": 0.1}}}
    return {"preset": "cpu", "seed": seed, "build": {"digest": digest, "description": "8 + 8 tasks"}, "arms": arms}


def write(tmp_path, name: str, content) -> str:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


def test_means_deviations_and_paired_differences_by_hand(tmp_path, capsys):
    """eval LM loss: baseline 1.0, 1.2, 1.4 (mean 1.2, sd 0.2); DeepLoop 0.9, 1.3, 1.2; differences
    -0.1, +0.1, -0.2: mean -0.0667, sd sqrt((0.0333^2 + 0.1667^2 + 0.1333^2) / 2) = 0.1528. The
    files come in any order; the columns go by seed. Paired t = -0.0667 / (0.1528 / sqrt(3)) = -0.76."""
    files = [write(tmp_path, "s2.json", report(2, {"baseline": 1.4, "deeploop": 1.2}, token_acc={"baseline": 0.75})),
             write(tmp_path, "s0.json", report(0, {"baseline": 1.0, "deeploop": 0.9})),
             write(tmp_path, "s1.json", report(1, {"baseline": 1.2, "deeploop": 1.3}, token_acc={"baseline": 0.6}))]
    assert compare_seeds.main([*files, "--out", str(tmp_path / "seeds")]) == 0
    table = capsys.readouterr().out
    assert "| | seed 0 | seed 1 | seed 2 | mean ± sd (n) | deeploop better in | paired t |" in table
    assert "| eval LM loss, baseline | 1.0000 | 1.2000 | 1.4000 | 1.2000 ± 0.2000 (3) | | |" in table
    assert "| eval LM loss, deeploop | 0.9000 | 1.3000 | 1.2000 | 1.1333 ± 0.2082 (3) | | |" in table
    assert "| eval LM loss, deeploop − baseline | -0.1000 | +0.1000 | -0.2000 | -0.0667 ± 0.1528 (3) | 2 of 3 | -0.76 |" in table
    # a percentage's spread and differences are in points; a constant figure has sd 0
    assert "| pass@2 task, deeploop | 12.50% | 12.50% | 12.50% | 12.50% ± 0.00 pt (3) | | |" in table
    # accuracies are better higher: on eval token accuracy deeploop did better in seed 1 alone
    assert "| eval token accuracy, deeploop − baseline | +0.00 pt | +10.00 pt | -5.00 pt | +1.67 pt ± 7.64 pt (3) | 1 of 3 | +0.38 |" in table
    assert "| pass@2 task, deeploop − baseline | +0.00 pt | +0.00 pt | +0.00 pt | +0.00 pt ± 0.00 pt (3) | 0 of 3 | - |" in table
    assert (tmp_path / "seeds.md").read_text() == table
    saved = json.loads((tmp_path / "seeds.json").read_text())
    assert saved["seeds"] == [0, 1, 2]
    row = next(r for r in saved["rows"] if r["metric"] == "eval_lm_loss")
    assert row["difference_spread"]["mean"] == pytest.approx(-0.2 / 3)
    assert row["difference_spread"]["sd"] == pytest.approx(((0.1 / 3) ** 2 + (0.5 / 3) ** 2 + (0.4 / 3) ** 2) ** 0.5 / 2 ** 0.5)


def test_a_diverged_arm_has_no_figures_for_its_seed(tmp_path, capsys):
    files = [write(tmp_path, "a.json", report(0, {"baseline": 1.0, "deeploop": 0.9})),
             write(tmp_path, "b.json", report(1, {"baseline": 1.2, "deeploop": 1.3}, diverged="deeploop"))]
    assert compare_seeds.main(files) == 0
    table = capsys.readouterr().out
    assert "| eval LM loss, deeploop | 0.9000 | - | 0.9000 (1) | | |" in table
    assert "| eval LM loss, deeploop − baseline | -0.1000 | - | -0.1000 (1) | 1 of 1 | - |" in table
    assert "| final train LM loss, deeploop | 1.0000 | - | 1.0000 (1) | | |" in table   # nan: no figure
    assert "deeploop: trained, diverged" in table
    assert "Arms: baseline = HRM, no scaling; deeploop = HRM + DeepLoop" in table


@pytest.mark.parametrize("second, message", [
    (report(1, {"baseline": 1.0, "deeploop": 1.0}, digest="d2"), "its build digest differs from"),
    (report(1, {"baseline": 1.0, "deeploop": 1.0}, lr="0.002"),
     "its baseline arm's training command (apart from seed and folders) differs from"),
    (report(0, {"baseline": 1.0, "deeploop": 1.0}), "are both seed 0: each seed once"),
    ({"preset": "cpu", "seed": 1, "build": {}}, "not a report of scripts/compare.py (no 'arms')"),
    ("{not json", "not valid JSON"),
])
def test_reports_of_another_comparison_are_refused_by_name(tmp_path, capsys, second, message):
    first = write(tmp_path, "first.json", report(0, {"baseline": 1.0, "deeploop": 1.0}))
    other = write(tmp_path, "other.json", second)
    assert compare_seeds.main([first, other, "--out", str(tmp_path / "seeds")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("compare_seeds.py: error: ") and message in err, err
    assert "other.json" in err
    assert not list(tmp_path.glob("seeds.*"))


def test_a_command_apart_from_the_seed_is_refused_naming_only_the_overrides_that_differ(tmp_path, capsys):
    """The refusal names the differing overrides (lr=0.002 vs lr=0.001), not both whole commands
    (before: two dicts of every token of both arms, one of them differing)."""
    first = write(tmp_path, "first.json", report(0, {"baseline": 1.0, "deeploop": 1.0}))
    other = write(tmp_path, "other.json", report(1, {"baseline": 1.0, "deeploop": 1.0}, lr="0.002"))
    assert compare_seeds.main([first, other]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"{first}'s (lr=0.002 vs lr=0.001): not the same comparison with another seed"), err
    assert "arch=hrm_tiny" not in err and len(err.splitlines()) == 1


def test_out_may_not_write_over_a_report_it_reads(tmp_path, capsys):
    first = write(tmp_path, "compare_cpu.json", report(0, {"baseline": 1.0, "deeploop": 1.0}))
    other = write(tmp_path, "seed1.json", report(1, {"baseline": 1.0, "deeploop": 1.0}))
    with pytest.raises(SystemExit) as e:
        compare_seeds.main([first, other, "--out", str(tmp_path / "compare_cpu")])
    assert e.value.code == 2
    assert f"would write over {first}, one of the reports it reads" in capsys.readouterr().err
    assert json.loads((tmp_path / "compare_cpu.json").read_text())["seed"] == 0


def test_the_committed_table_is_what_the_committed_reports_give(monkeypatch, capsys):
    """results/compare_cpu_over_seeds.md (the README's figures) is made from the committed reports,
    not written by hand."""
    monkeypatch.chdir(REPO)
    reports = ["results/compare_cpu.json"] + sorted(str(p.relative_to(REPO)) for p in REPO.glob("results/compare_cpu_seed*.json"))
    assert len(reports) == 8
    assert compare_seeds.main(reports) == 0
    assert capsys.readouterr().out == (REPO / "results/compare_cpu_over_seeds.md").read_text()


def test_the_arms_means_are_over_the_seeds_where_both_arms_have_the_figure(tmp_path, capsys):
    """As the docstring says: a seed where one arm diverged is in neither arm's mean, so the two
    means are of the same seeds and differ by the mean paired difference. The baseline's mean was
    over both seeds (1.1000 ± 0.1414 (2)) beside deeploop's over one."""
    files = [write(tmp_path, "a.json", report(0, {"baseline": 1.0, "deeploop": 0.9})),
             write(tmp_path, "b.json", report(1, {"baseline": 1.2, "deeploop": 1.3}, diverged="deeploop"))]
    assert compare_seeds.main(files) == 0
    table = capsys.readouterr().out
    assert "| eval LM loss, baseline | 1.0000 | 1.2000 | 1.0000 (1) | | |" in table   # its seed-1 figure still shown
    assert "| eval LM loss, deeploop | 0.9000 | - | 0.9000 (1) | | |" in table


def test_a_report_whose_runs_trained_with_another_seed_is_refused(tmp_path, capsys):
    """`compare.py --report` writes the seed of its --seed flag (default 0), while its table's
    commands are the ones its runs trained with: seed 1's runs reported again with --seed 2 were
    taken for a third seed, the same runs counted twice (seed= is left out of the comparison)."""
    again = report(2, {"baseline": 1.2, "deeploop": 1.3})
    for arm in again["arms"].values():
        arm["command"] = arm["command"].replace("seed=2", "seed=1")
    files = [write(tmp_path, "s1.json", report(1, {"baseline": 1.2, "deeploop": 1.3})),
             write(tmp_path, "again.json", again)]
    assert compare_seeds.main(files) == 2
    err = capsys.readouterr().err
    assert "again.json: it says seed 2, but its baseline arm trained with seed=1" in err, err


def _changed(change) -> dict:
    second = report(1, {"baseline": 1.0, "deeploop": 1.0})
    change(second)
    return second


@pytest.mark.parametrize("second, message", [
    (_changed(lambda r: r.update(build=None)), "'build' is not an object"),
    (_changed(lambda r: r.update(seed="1")), "'seed' is '1', not a whole number"),
    (_changed(lambda r: r["arms"].update(baseline="HRM")), "arm 'baseline' is not an object"),
    (_changed(lambda r: r["arms"]["baseline"].update(command=["python", "pretrain.py"])),
     "arm 'baseline': 'command' is not a string"),
    (_changed(lambda r: r["arms"]["baseline"].update(command="python pretrain.py 'seed=1")),
     "arm 'baseline': 'command' is not a shell line (No closing quotation)"),
    (_changed(lambda r: r["arms"]["deeploop"].update(eval_lm_loss="1.2")), "arm 'deeploop': 'eval_lm_loss' is '1.2'"),
    (_changed(lambda r: r["arms"]["deeploop"].update(pass_at_k={"top2": {"task": 0.1}})),
     "arm 'deeploop': pass_at_k entry 'top2' is not K"),
    (_changed(lambda r: r["arms"]["deeploop"].update(pass_at_k={"2": {"task": "12.5%"}})),
     "arm 'deeploop': pass@2 task is '12.5%', not a number"),
])
def test_a_report_of_another_shape_is_named_by_its_field_not_a_traceback(tmp_path, capsys, second, message):
    """A hand-edited or foreign JSON with the four top-level fields went on into the table and
    stopped with an AttributeError, a TypeError (a seed "1" sorted beside 0) or shlex's ValueError."""
    first = write(tmp_path, "first.json", report(0, {"baseline": 1.0, "deeploop": 1.0}))
    other = write(tmp_path, "other.json", second)
    assert compare_seeds.main([first, other]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"compare_seeds.py: error: {other}: not a report of "
                                                   f"scripts/compare.py ("), err
    assert message in err, err
