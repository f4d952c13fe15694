"""scripts/alignment_table.py: the visit alignment runs logged, per module and step, by hand."""
import json

import yaml

from scripts import alignment_table


def make_run(folder, records, H_cycles=2, L_cycles=3):
    folder.mkdir(parents=True)
    (folder / "all_config.yaml").write_text(yaml.safe_dump({"arch": {"H_cycles": H_cycles, "L_cycles": L_cycles}}))
    lines = [json.dumps({"step": 1, "num_params": 10, "train/lm_loss": 2.0})]   # a record without alignment
    lines += [json.dumps(r) for r in records]
    (folder / "log.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def record(step, H, L, cosine):
    """As the trainer logs it: alignment/<sublayer> for each sublayer, the summary's mean and min."""
    r = {"step": step, "alignment/mean": 0.0, "alignment/min": 0.0, "alignment_cosine/mean": cosine}
    r.update({f"alignment/H.0.{k}": v for k, v in zip(("attn", "mlp"), H)})
    r.update({f"alignment/L.{i}.attn": v for i, v in enumerate(L)})
    r.update({f"alignment_cosine/L.{i}.attn": 0.5 for i in range(len(L))})   # not alignment: not averaged
    return r


def test_module_means_per_step_and_over_the_run(tmp_path, capsys):
    """H: mean of H.0.attn and H.0.mlp; L: mean of the L sublayers; R from all_config.yaml: H_cycles
    visits for H (2: 1/sqrt 0.707), H_cycles * L_cycles for L (6: 0.408). Steps in order; a step one
    run did not log is '-' for it; the last row averages each column over the run's steps."""
    a = make_run(tmp_path / "a" / "baseline", [record(20, (0.9, 0.7), (0.5, 0.3), 0.1),
                                               record(10, (1.0, 0.8), (0.6, 0.4), 0.2)])
    b = make_run(tmp_path / "b" / "deeploop", [record(10, (0.6, 0.6), (0.45, 0.35), float("nan"))])
    assert alignment_table.main([str(a), str(b), "--out", str(tmp_path / "t")]) == 0
    table = capsys.readouterr().out
    assert "- `baseline` (" + str(a) + "): R = 2 visits per segment for H (1/sqrt(R) = 0.707), 6 for L (0.408)" in table
    assert "| step | baseline H | baseline L | baseline cosine | deeploop H | deeploop L | deeploop cosine |" in table
    assert "| 10 | 0.900 | 0.500 | 0.200 | 0.600 | 0.400 | - |" in table
    assert "| 20 | 0.800 | 0.400 | 0.100 | - | - | - |" in table
    assert table.index("| 10 |") < table.index("| 20 |")
    assert "| mean | 0.850 | 0.450 | 0.150 | 0.600 | 0.400 | - |" in table
    saved = json.loads((tmp_path / "t.json").read_text())
    assert saved["deeploop"]["rows"] == [{"step": 10, "H": 0.6, "L": 0.4, "cosine": None}]
    assert (tmp_path / "t.md").read_text() == table


def test_a_run_without_alignment_records_is_named(tmp_path, capsys):
    plain = make_run(tmp_path / "plain", [])
    assert alignment_table.main([str(plain)]) == 2
    assert capsys.readouterr().err == (f"alignment_table.py: error: {plain}: its log.jsonl holds no visit alignment "
                                       f"(train it with diagnostics_interval=N)\n")
    (plain / "all_config.yaml").write_text("arch: {H_cycles: 2}\n")
    assert alignment_table.main([str(plain)]) == 2
    assert "all_config.yaml: cannot read the run's H_cycles and L_cycles (KeyError" in capsys.readouterr().err
