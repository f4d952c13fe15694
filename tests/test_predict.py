"""evaluate/predict.py: our checkpoints and the original code's give the same predictions files,
equal to the model's own evaluation forward, and a checkpoint that does not fit the build is refused."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from conftest import ROOT
from evaluate import predict
from hrm.checkpoint import load_original_checkpoint, save_model
from tests.test_model_reference import original_config, random_original_weights

ARCH = dict(hidden_size=32, num_heads=2, expansion=2, H_layers=1, L_layers=1, H_cycles=2, L_cycles=2,
            halt_max_steps=2, halt_exploration_prob=0.1, puzzle_emb_ndim=32, pos_encodings="rope")


# Tests that evaluate a whole test split use tiny_build (6 rows; small_build's 40 rows are most of a
# test's time) unless they need more rows than that.
def write_original_run(small_build, folder, num_ids=None):
    meta = json.loads((small_build / "test" / "dataset.json").read_text())
    weights = random_original_weights(ARCH, 12, 900, num_ids or meta["num_puzzle_identifiers"], seed=4)
    folder.mkdir()
    torch.save({"_orig_mod." + k: v for k, v in weights.items()}, folder / "step_1234")
    (folder / "all_config.yaml").write_text(yaml.dump(original_config(ARCH, str(small_build))))
    return folder / "step_1234"


def read(folder):
    with np.load(folder / "rank_0.npz") as f:
        return {k: f[k] for k in f.files}


def test_original_and_our_checkpoints_predict_the_same(tiny_build, tmp_path, capsys):
    # batches of 4: a full one, then one padded (the tiny build's 6 test rows); of 3, none padded
    original = write_original_run(tiny_build, tmp_path / "orig")
    assert predict.main([f"checkpoint={original}", "batch_size=4"]) == 0
    from_original = tmp_path / "orig" / "predictions" / "step_1234"
    info = json.loads((from_original / "info.json").read_text())
    assert info["step"] == 1234 and info["data_path"] == str(tiny_build.resolve())

    model = load_original_checkpoint(str(original), seq_len=900)
    ours = tmp_path / "ours" / "step_7"
    save_model(str(ours / "model.pt"), model, extra={"step": 7})
    out = tmp_path / "ours-preds"
    assert predict.main([f"checkpoint={ours}", f"data_path={tiny_build}", f"output_dir={out}", "batch_size=4"]) == 0
    a, b = read(from_original), read(out)
    assert a.keys() == b.keys() == {"puzzle_identifiers", "inputs", "preds", "q_halt_logits"}
    for key in a:
        assert np.array_equal(a[key], b[key]), key
    # the metrics said are the model's, whatever the batch (none that scores the padding rows)
    said = [line for line in capsys.readouterr().out.splitlines() if " test rows: " in line]
    assert predict.main([f"checkpoint={ours}", f"data_path={tiny_build}", f"output_dir={tmp_path / 'b3'}",
                         "batch_size=3"]) == 0
    said += [line for line in capsys.readouterr().out.splitlines() if " test rows: " in line]
    assert len(said) == 3 and len(set(said)) == 1 and "q_halt_loss" not in said[0], said

    # against the model's evaluation forward on the raw test rows (no reader, no padding)
    inputs = np.load(tiny_build / "test" / "all__inputs.npy")
    puzzle_ids = np.repeat(np.load(tiny_build / "test" / "all__puzzle_identifiers.npy"),
                           np.diff(np.load(tiny_build / "test" / "all__puzzle_indices.npy")))
    real = a["puzzle_identifiers"] != 0
    n = len(inputs)
    assert real.sum() == n and n % 4 and np.array_equal(a["inputs"][real], inputs)
    # the first batch, as predict.py ran it (4 rows): argmax over logits is only bit-stable between
    # forwards of the same shape
    with torch.no_grad():
        out = model.predict({"inputs": torch.from_numpy(inputs[:4]).int(),
                             "puzzle_identifiers": torch.from_numpy(puzzle_ids[:4]).int()})
    assert np.array_equal(a["preds"][:4], out["preds"].numpy().astype(np.uint8))
    np.testing.assert_allclose(a["q_halt_logits"][:4], out["q_halt_logits"].numpy(), rtol=1e-5, atol=1e-6)


def test_an_original_checkpoint_named_without_a_step_number_has_no_step(tiny_build, tmp_path):
    original = write_original_run(tiny_build, tmp_path / "orig")
    renamed = original.rename(original.with_name("step_\u00b2"))      # isdigit() yet no number: int() refuses it
    assert predict.main([f"checkpoint={renamed}", "batch_size=16"]) == 0
    assert json.loads((tmp_path / "orig" / "predictions" / renamed.name / "info.json").read_text())["step"] is None


@pytest.mark.parametrize("content, message", [("{}", "no whole-number seq_len"),
                                              ('{"seq_len": ', "not valid JSON")])
def test_an_original_checkpoint_with_a_damaged_train_dataset_json_names_it(small_build, tmp_path, capsys,
                                                                           content, message):
    # the original's seq_len comes from its build's train/dataset.json: a bare KeyError traceback, or
    # json's message naming no file, before
    import shutil
    build = Path(shutil.copytree(small_build, tmp_path / "build"))
    original = write_original_run(build, tmp_path / "orig")
    (build / "train" / "dataset.json").write_text(content)
    assert predict.main([f"checkpoint={original}", "batch_size=16"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"predict.py: error: {build / 'train' / 'dataset.json'}: ") and message in err, err
    assert err.count("\n") == 1, err


def test_checkpoint_that_does_not_fit_the_build_is_refused(small_build, tmp_path, capsys):
    original = write_original_run(small_build, tmp_path / "orig", num_ids=5)
    assert predict.main([f"checkpoint={original}"]) == 2
    err = capsys.readouterr().err
    assert "puzzle-embedding table has 5 rows" in err and "do not belong together" in err
    assert predict.main([f"checkpoint={tmp_path / 'nowhere'}"]) == 2
    assert predict.main(["checkpoint"]) == 2


def test_a_model_without_puzzle_embedding_evaluates_any_build_of_its_shape(tiny_build, tmp_path, capsys):
    """puzzle_emb_ndim=0: no weight belongs to a puzzle, so a build other than the training one (its
    identifier count and names differ) is evaluated, not refused for a table the model lacks; the
    predictions are the model's own on that build's rows."""
    from hrm.config import ArchConfig
    from hrm.model import HRM
    torch.manual_seed(0)
    model = HRM(ArchConfig(**dict(ARCH, puzzle_emb_ndim=0)), 12, 900, 5, verbose=False)
    step = tmp_path / "run" / "step_3"
    save_model(str(step / "model.pt"), model, extra={"step": 3, "data": {"identifiers_sha256": "0" * 64,
                                                                          "digest": None}})
    out = tmp_path / "preds"
    inputs = np.load(tiny_build / "test" / "all__inputs.npy")
    n = len(inputs)     # one batch of every row: the same forward shape as model.predict's below
    assert predict.main([f"checkpoint={step}", f"data_path={tiny_build}", f"output_dir={out}",
                         f"batch_size={n}"]) == 0, capsys.readouterr().err
    a = read(out)
    with torch.no_grad():
        own = model.predict({"inputs": torch.from_numpy(inputs).int(),
                             "puzzle_identifiers": torch.from_numpy(a["puzzle_identifiers"][:n])})
    assert np.array_equal(a["preds"][:n], own["preds"].numpy().astype(np.uint8))
    # with a table, the same mismatch is refused (its rows would belong to other puzzles)
    with_table = HRM(ArchConfig(**ARCH), 12, 900, 5, verbose=False)
    save_model(str(step / "model.pt"), with_table, extra={"step": 3})
    assert predict.main([f"checkpoint={step}", f"data_path={tiny_build}", f"output_dir={out}"]) == 2
    assert "puzzle-embedding table has 5 rows" in capsys.readouterr().err


def test_evaluation_skips_the_padding_rows_of_a_batch():
    """The reader pads the last batch with blank rows at its end; one of them is run for all (and a
    batch of padding alone runs one row: every rank must reach the metrics all-reduce)."""
    from hrm.distributed import DistInfo
    from hrm.evaluation import evaluate

    class RecordingHead(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.sizes = []

        def evaluate(self, batch, segment=None):
            n = len(batch["inputs"])
            self.sizes.append(n)
            real = (batch["puzzle_identifiers"] != 0).sum()
            return {"count": real, "accuracy": real * 0.5}, {"preds": batch["inputs"], "q_halt_logits": torch.zeros(n)}

    def batch(ids):
        n = len(ids)
        return {"inputs": torch.full((n, 900), 3, dtype=torch.uint8), "labels": torch.zeros(n, 900, dtype=torch.long),
                "puzzle_identifiers": torch.tensor(ids, dtype=torch.int32)}

    head = RecordingHead()
    metrics, arrays = evaluate(head, [batch([5, 6, 7, 8]), batch([9, 0, 0, 0]), batch([0, 0, 0, 0])],
                               DistInfo(0, 1, 0, torch.device("cpu")))
    assert head.sizes == [4, 2, 1]
    assert arrays["puzzle_identifiers"].tolist() == [5, 6, 7, 8, 9, 0, 0]
    assert arrays["preds"].shape == (7, 900) and metrics == {"accuracy": 0.5, "count": 5.0}
    # compiled (a segment given): every batch runs whole, one shape, but the same rows are kept
    head.sizes.clear()
    metrics, arrays = evaluate(head, [batch([5, 6, 7, 8]), batch([9, 0, 0, 0]), batch([0, 0, 0, 0])],
                               DistInfo(0, 1, 0, torch.device("cpu")), segment=object())
    assert head.sizes == [4, 4, 4]
    assert arrays["puzzle_identifiers"].tolist() == [5, 6, 7, 8, 9, 0, 0]
    assert arrays["preds"].shape == (7, 900) and metrics == {"accuracy": 0.5, "count": 5.0}


def test_skipping_padding_rows_keeps_every_metric_of_running_them_all():
    """HRM runs every blank row, and its eval q_halt_loss counts each as an exactly-correct row
    (BCE(q_halt, 1)); the other metrics ignore them. Skipping them must not change any number."""
    from hrm.config import ArchConfig
    from hrm.distributed import DistInfo
    from hrm.evaluation import evaluate
    from hrm.loss import ACTLossHead
    from hrm.model import HRM

    torch.manual_seed(0)
    arch = ArchConfig(hidden_size=32, num_heads=2, expansion=2, H_layers=1, L_layers=1, H_cycles=1, L_cycles=2,
                      halt_max_steps=2, puzzle_emb_ndim=32, scaling=dict(rule="deeploop"))
    head = ACTLossHead(HRM(arch, 12, 16, 6, verbose=False))
    torch.nn.init.normal_(head.model.q_head.weight, std=0.5)   # q_halt of a blank row far from the -5 bias
    g = torch.Generator().manual_seed(1)

    def batch(real, blank):
        labels = torch.randint(2, 12, (real + blank, 16), generator=g)
        labels[real:] = -100
        inputs = torch.randint(2, 12, (real + blank, 16), generator=g)
        inputs[real:] = 0
        ids = torch.randint(1, 6, (real + blank,), generator=g, dtype=torch.int32)
        ids[real:] = 0
        return {"inputs": inputs, "labels": labels, "puzzle_identifiers": ids}

    batches = [batch(4, 0), batch(1, 3), batch(0, 4)]
    sums = {}
    with torch.inference_mode():
        for b in batches:   # the reference: every row of every batch, as the original evaluates
            for k, v in head.evaluate(b)[0].items():
                sums[k] = sums.get(k, 0.0) + float(v)
    expected = {k: v / sums["count"] for k, v in sums.items() if k != "count"}
    metrics, _ = evaluate(head, batches, DistInfo(0, 1, 0, torch.device("cpu")))
    assert metrics["count"] == sums["count"] == 5
    with torch.inference_mode():    # the blank rows matter: 7 of the 12 rows' q_halt terms
        real_only = sum(float(head.evaluate({k: v[:r] for k, v in b.items()})[0]["q_halt_loss"])
                        for b, r in zip(batches[:2], (4, 1)))
    assert abs(real_only / 5 - expected["q_halt_loss"]) > 0.1 * expected["q_halt_loss"]
    for k, v in expected.items():
        assert metrics[k] == pytest.approx(v, rel=1e-5, abs=1e-7), k
    blank_only, _ = evaluate(head, batches[2:], DistInfo(0, 1, 0, torch.device("cpu")))
    assert blank_only["count"] == 0 and blank_only["accuracy"] == 0.0   # no labelled row: counted 0, not 1


# ------------------------------------------------------------------------------ refused inputs
def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("predict.py: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_predictions_that_cannot_be_written_exit_2_with_one_line(tiny_build, tmp_path, monkeypatch, capsys):
    """A full disk while writing the rank file: one line naming the folder and the cause, exit 2 as
    vote.py's unwritable output, no info.json (no vote reads the folder) and no temporary file left."""
    import errno
    original = write_original_run(tiny_build, tmp_path / "orig")
    out = tmp_path / "preds"

    def full_disk(file, **arrays):
        Path(file).write_bytes(b"partial")     # what a write cut short leaves behind
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr("hrm.evaluation.np.savez", full_disk)
    assert predict.main([f"checkpoint={original}", f"output_dir={out}", "batch_size=4"]) == 2
    err = capsys.readouterr().err.split("\r")[-1]     # after the progress bar
    assert err.startswith("predict.py: error: cannot write the predictions into ") and err.count("\n") == 1, err
    assert str(out) in err and "No space left on device" in err, err
    assert sorted(p.name for p in out.iterdir()) == []


def test_a_rank_file_that_cannot_be_renamed_into_place_leaves_no_temporary_file(tiny_build, tmp_path, capsys):
    """A folder named rank_0.npz where the rank file goes: exit 2 naming the folder, and the hidden
    .rank_0.tmp.npz written for it is removed, where it stayed (as .info.json.tmp would)."""
    original = write_original_run(tiny_build, tmp_path / "orig")
    out = tmp_path / "preds"
    (out / "rank_0.npz").mkdir(parents=True)
    assert predict.main([f"checkpoint={original}", f"output_dir={out}", "batch_size=4"]) == 2
    err = capsys.readouterr().err.split("\r")[-1]
    assert err.startswith("predict.py: error: cannot write the predictions into ") and str(out) in err, err
    assert sorted(p.name for p in out.iterdir()) == ["rank_0.npz"]


@pytest.mark.parametrize("device, message", [("tpu", "device must be one of auto, cpu, cuda, got 'tpu'"),
                                             ("cuda", "device=cuda but CUDA is not available")])
def test_unknown_or_unavailable_device_is_refused(device, message, small_build, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    checkpoint = write_original_run(small_build, tmp_path / "orig")    # one that would evaluate on the CPU
    assert predict.main([f"checkpoint={checkpoint}", f"device={device}"]) == 2
    assert message in one_line_error(capsys)
    assert not (tmp_path / "orig" / "predictions").exists()
    # checked first, so a typo costs no checkpoint read (they can be GBs)
    assert predict.main([f"checkpoint={tmp_path / 'nowhere'}", f"device={device}"]) == 2
    assert message in one_line_error(capsys)


def truncated_torch_file(path):
    torch.save({"format": "hrm-deeploop/model-v1", "state": {"w": torch.zeros(4096)}}, path)
    path.write_bytes(path.read_bytes()[:2000])      # a copy or download cut short


@pytest.mark.parametrize("name, make", [
    ("manifest.json", lambda p: p.write_text(json.dumps({"digest": "abc", "files": []}))),
    ("notes.txt", lambda p: p.write_text("hello\n")),
    ("all_config.yaml", lambda p: p.write_text("arch:\n  name: hrm_v1\n")),    # torch: IndexError
    ("empty.pt", lambda p: p.write_bytes(b"")),
    ("step_3/model.pt", truncated_torch_file),
])
def test_a_file_that_is_not_a_checkpoint_is_named(name, make, tmp_path, capsys):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    make(path)
    given = path.parent if name.endswith("model.pt") else path   # a step folder, as users pass it
    assert predict.main([f"checkpoint={given}"]) == 2
    err = one_line_error(capsys)
    assert f"{path} is not a checkpoint: torch cannot read it" in err
    assert "step_<N>/ folder or its model.pt, or an original HRM checkpoint" in err


def test_a_torch_file_holding_no_dict_is_not_a_checkpoint(tmp_path, capsys):
    torch.save(torch.zeros(3), tmp_path / "step_5")
    (tmp_path / "all_config.yaml").write_text("arch: {}\n")   # beside it, as for an original checkpoint
    assert predict.main([f"checkpoint={tmp_path / 'step_5'}"]) == 2
    assert f"{tmp_path / 'step_5'} is not a checkpoint: it holds a Tensor" in one_line_error(capsys)


def test_a_corrupt_trainer_state_beside_our_checkpoint_is_named(tmp_path, capsys):
    from hrm.config import ArchConfig
    from hrm.model import HRM
    save_model(str(tmp_path / "step_2" / "model.pt"), HRM(ArchConfig(**ARCH), 12, 16, 6, verbose=False),
               extra={"step": 2})
    (tmp_path / "step_2" / "trainer.pt").write_text("not torch\n")   # where data_path is looked up
    assert predict.main([f"checkpoint={tmp_path / 'step_2'}"]) == 2
    assert f"{tmp_path / 'step_2' / 'trainer.pt'} is not a checkpoint" in one_line_error(capsys)


@pytest.mark.parametrize("text, said", [
    ("arch: [unclosed\n", "not valid YAML"), ("just a line\n", "not an HRM training config"),
    (b"\x80\x02 not text", "not valid YAML"),     # was the codec's message, naming no file
    # was a traceback (AttributeError)
    ("arch: {name: hrm.hrm_act_v1@X, loss: softmax_cross_entropy}\n", "arch.loss is not a mapping"),
])
def test_a_broken_all_config_beside_an_original_checkpoint_is_named(text, said, small_build, tmp_path, capsys):
    checkpoint = write_original_run(small_build, tmp_path / "orig")
    config_file = tmp_path / "orig" / "all_config.yaml"
    config_file.write_bytes(text) if isinstance(text, bytes) else config_file.write_text(text)
    assert predict.main([f"checkpoint={checkpoint}", f"data_path={small_build}"]) == 2
    assert f"{config_file}: {said}" in one_line_error(capsys)


def test_a_relative_data_path_of_training_is_found_from_another_directory(tiny_build, tmp_path, monkeypatch,
                                                                           capsys):
    from hrm.distributed import DistInfo
    from hrm.train import Trainer
    from tests.test_train import micro_config
    monkeypatch.chdir(tiny_build.parent)       # train with data_path relative to here, as users do
    Trainer(micro_config(Path(tiny_build.name), tmp_path / "run", max_steps=1, eval_save_predictions=False),
            DistInfo(0, 1, 0, torch.device("cpu")), progress=False).fit()
    monkeypatch.chdir(tmp_path)                 # then predict from somewhere else
    assert not Path(tiny_build.name).exists()
    assert predict.main([f"checkpoint={tmp_path / 'run' / 'step_1'}", "batch_size=16"]) == 0
    info = json.loads((tmp_path / "run" / "predictions" / "step_1" / "info.json").read_text())
    assert info["data_path"] == str(tiny_build.resolve())
    # run again: the default folder now holds predictions (training's, as a rule; here the first
    # run's, which info.json names), replaced with a word
    assert "note:" not in capsys.readouterr().out
    assert predict.main([f"checkpoint={tmp_path / 'run' / 'step_1'}", "batch_size=16"]) == 0
    assert (f"note: {tmp_path / 'run' / 'predictions' / 'step_1'} holds the predictions of checkpoint "
            f"{tmp_path / 'run' / 'step_1'} (step 1): they are replaced; output_dir=DIR keeps them"
            ) in capsys.readouterr().out


def test_a_relative_data_path_naming_another_build_here_is_not_taken_for_the_training_one(tiny_build, tmp_path,
                                                                                           monkeypatch):
    """Predicting from another project folder that holds its own build under the same relative name
    (another --seed, another num_aug): the build training read is still there, by its absolute path,
    and is the one evaluated; the relative path as typed was taken, and refused as another build."""
    import shutil
    from hrm.distributed import DistInfo
    from hrm.train import Trainer
    from tests.test_train import micro_config
    monkeypatch.chdir(tiny_build.parent)
    Trainer(micro_config(Path(tiny_build.name), tmp_path / "run", max_steps=1, eval_save_predictions=False),
            DistInfo(0, 1, 0, torch.device("cpu")), progress=False).fit()
    elsewhere = tmp_path / "other-project"
    other = Path(shutil.copytree(tiny_build, elsewhere / tiny_build.name))
    names = json.loads((other / "identifiers.json").read_text())
    (other / "identifiers.json").write_text(json.dumps(names[:1] + names[:0:-1]))   # other puzzle names
    monkeypatch.chdir(elsewhere)
    assert predict.main([f"checkpoint={tmp_path / 'run' / 'step_1'}", "batch_size=16"]) == 0
    info = json.loads((tmp_path / "run" / "predictions" / "step_1" / "info.json").read_text())
    assert info["data_path"] == str(tiny_build.resolve())


def test_a_recorded_build_that_is_not_there_says_where_it_came_from(small_build, tmp_path, capsys):
    """The released checkpoints record data/arc-aug-1000, relative to another machine: the refusal
    says the path is the checkpoint's record and how to give another; a data_path given is just named."""
    original = write_original_run(small_build, tmp_path / "orig")
    config = yaml.safe_load((tmp_path / "orig" / "all_config.yaml").read_text())
    (tmp_path / "orig" / "all_config.yaml").write_text(yaml.dump(dict(config, data_path=str(tmp_path / "moved"))))
    assert predict.main([f"checkpoint={original}"]) == 2
    err = capsys.readouterr().err
    assert f"that is the data_path recorded with checkpoint {original}: pass data_path=DIR" in err
    assert predict.main([f"checkpoint={original}", f"data_path={tmp_path / 'elsewhere'}"]) == 2
    err = capsys.readouterr().err
    assert "elsewhere" in err and "recorded with checkpoint" not in err
    # a recorded build that is there but damaged is named as such, without the hint
    (tmp_path / "moved" / "test").mkdir(parents=True)
    assert predict.main([f"checkpoint={original}"]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "moved") in err and "recorded with checkpoint" not in err


def test_a_build_other_than_the_training_one_is_refused(tiny_build, tmp_path, capsys):
    """Another --seed gives a build of the same size (the row-count check passes) with other puzzle
    names: our checkpoints record the training build, so predict.py refuses it by name."""
    from arc_data.build import BuildConfig, build
    from hrm.distributed import DistInfo
    from hrm.train import Trainer
    from tests.test_train import micro_config
    Trainer(micro_config(tiny_build, tmp_path / "run", max_steps=1, eval_save_predictions=False),
            DistInfo(0, 1, 0, torch.device("cpu")), progress=False).fit()
    capsys.readouterr()     # training's own warnings (its short warmup): not predict.py's words
    other = tmp_path / "seed43"
    build(BuildConfig(num_aug=2, limit_tasks=2, seed=43, output_dir=str(other)), progress=False)   # as tiny_build
    assert (json.loads((other / "test" / "dataset.json").read_text())["num_puzzle_identifiers"]
            == json.loads((tiny_build / "test" / "dataset.json").read_text())["num_puzzle_identifiers"])
    step = tmp_path / "run" / "step_1"
    assert predict.main([f"checkpoint={step}", f"data_path={other}", "batch_size=16"]) == 2
    err = one_line_error(capsys)
    assert f"data_path={other} is not the build {step} was trained on: its puzzle names differ" in err
    assert not (tmp_path / "run" / "predictions").exists()
    assert predict.main([f"checkpoint={step}", f"data_path={tiny_build}", "batch_size=16"]) == 0


def test_a_refused_build_says_nothing_of_replacing_the_predictions(tiny_build, tmp_path, capsys):
    """The default folder holds predictions (an earlier predict.py's here, training's as a rule): a
    start refused for its build replaces nothing, so it must not say they "are replaced" (it did,
    the note coming before the build's checks)."""
    from hrm.distributed import DistInfo
    from hrm.train import Trainer
    from tests.test_train import micro_config
    Trainer(micro_config(tiny_build, tmp_path / "run", max_steps=1, eval_save_predictions=False),
            DistInfo(0, 1, 0, torch.device("cpu")), progress=False).fit()
    step = tmp_path / "run" / "step_1"
    assert predict.main([f"checkpoint={step}", "batch_size=16"]) == 0
    other = tmp_path / "renamed"
    import shutil
    shutil.copytree(tiny_build, other)
    names = json.loads((other / "identifiers.json").read_text())
    (other / "identifiers.json").write_text(json.dumps(names[:1] + names[:0:-1]))   # other puzzle names
    capsys.readouterr()
    assert predict.main([f"checkpoint={step}", f"data_path={other}", "batch_size=16"]) == 2
    said = capsys.readouterr()
    assert "is not the build" in said.err and "replaced" not in said.out + said.err


def test_a_malformed_record_of_the_training_build_is_refused_by_name(tiny_build, tmp_path, capsys):
    """A hand-edited checkpoint whose record of its build lacks identifiers_sha256: predict.py and
    resume name the file (they raised KeyError in the build check)."""
    from hrm.distributed import DistInfo
    from hrm.train import Trainer
    from tests.test_train import micro_config
    cpu = DistInfo(0, 1, 0, torch.device("cpu"))
    Trainer(micro_config(tiny_build, tmp_path / "run", max_steps=1, eval_save_predictions=False), cpu,
            progress=False).fit()
    capsys.readouterr()     # training's own warnings (its short warmup): not predict.py's words
    step = tmp_path / "run" / "step_1"
    for name, data in (("model.pt", lambda f: f["extra"]), ("trainer.pt", lambda f: f)):
        contents = torch.load(step / name, weights_only=True)
        data(contents)["data"] = {"digest": None}
        torch.save(contents, step / name)
    assert predict.main([f"checkpoint={step}", "batch_size=16"]) == 2
    err = one_line_error(capsys)
    assert f"{step / 'model.pt'}: its record of the build it was trained on ('data') is not" in err
    with pytest.raises(ValueError, match=f"{step / 'trainer.pt'}: its record of the build"):
        Trainer(micro_config(tiny_build, tmp_path / "run", max_steps=2, resume="latest"), cpu, progress=False)


def test_compiled_segment_evaluation_is_one_graph_and_matches_eager(tiny_build, tmp_path, monkeypatch):
    """predict.py compile=true (what training's evaluation does under compile): every batch, the
    padded last one included, and every segment reuse one graph (first segment's start states too),
    and the predictions equal the eager ones; the compiled run computes the padded batch whole but
    keeps the same rows as eager (one blank row), so the two files hold the same rows. (The 6 test
    rows of the tiny build in batches of 4: a full batch, then a padded one.)"""
    import torch._dynamo
    import torch._dynamo.testing

    original = write_original_run(tiny_build, tmp_path / "orig")
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    made = []

    def fake_compiled_segment(model):   # the real one's settings, a backend fast enough for a test
        made.append(model)
        return torch.compile(model.segment, backend=counter, dynamic=False)

    monkeypatch.setattr(predict, "compiled_segment", fake_compiled_segment)
    torch._dynamo.reset()
    try:
        assert predict.main([f"checkpoint={original}", "batch_size=4", "output_dir=" + str(tmp_path / "eager")]) == 0
        assert not made                                  # auto: not on CPU
        assert predict.main([f"checkpoint={original}", "batch_size=4", "compile=true",
                             "output_dir=" + str(tmp_path / "compiled")]) == 0
    finally:
        torch._dynamo.reset()
    assert len(made) == 1 and counter.frame_count == 1
    eager, compiled = read(tmp_path / "eager"), read(tmp_path / "compiled")
    n = len(np.load(tiny_build / "test" / "all__inputs.npy"))
    assert n > 4 and n % 4 and len(compiled["preds"]) == len(eager["preds"]) == n + 1   # one blank row of the last batch
    assert (compiled["puzzle_identifiers"] != 0).sum() == n and compiled["puzzle_identifiers"][-1] == 0
    for key in ("puzzle_identifiers", "inputs", "preds"):
        assert np.array_equal(eager[key], compiled[key]), key
    np.testing.assert_allclose(eager["q_halt_logits"], compiled["q_halt_logits"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_prints_the_usage_and_exits_0(flag, capsys):
    assert predict.main(["checkpoint=anything", flag]) == 0
    out = capsys.readouterr().out
    assert "python evaluate/predict.py checkpoint=PATH [data_path=DIR]" in out


@pytest.mark.parametrize("key", ["output_dir", "data_path", "checkpoint"])
def test_an_empty_value_is_refused_not_taken_for_the_default(key, small_build, tmp_path, monkeypatch, capsys):
    """`output_dir=$OUT` with OUT unset wrote over the default folder (training's predictions of
    that step); `data_path=` looked for ./test, `checkpoint=` took the current folder for a run."""
    original = write_original_run(small_build, tmp_path / "orig")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(predict, "evaluate", lambda *a, **k: pytest.fail("evaluated"))
    args = {"checkpoint": str(original), key: ""}
    assert predict.main([f"{k}={v}" for k, v in args.items()]) == 2
    assert f"{key}= has no value (an unset shell variable?)" in one_line_error(capsys)
    assert not (tmp_path / "orig" / "predictions").exists()


def test_predict_refuses_bad_compile_and_batch_size_before_loading(tmp_path, monkeypatch, capsys):
    missing = tmp_path / "no-such-checkpoint"   # never read: the arguments are refused first
    assert predict.main([f"checkpoint={missing}", "compile=maybe"]) == 2
    assert "compile must be auto, true or false, got 'maybe'" in capsys.readouterr().err
    assert predict.main([f"checkpoint={missing}", "batch_size=\u00b2"]) == 2     # isdigit(), not a number
    assert "batch_size must be a positive whole number, got '\u00b2'" in capsys.readouterr().err
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert predict.main([f"checkpoint={missing}", "batch_size=16", "device=cpu"]) == 2
    assert "batch_size=16 is not divisible by the world size 3" in capsys.readouterr().err
    assert predict.main([f"checkpoint={missing}", "device=cpu"]) == 2   # the CPU default, 32
    assert ("the default batch_size=32 is not divisible by the world size 3; pass batch_size=N, a multiple of it"
            in capsys.readouterr().err)     # a value the user never typed: said to be the default


# ------------------------------------------------------------------------------ output folder
@pytest.mark.parametrize("below, message", [("", "exists and is not a directory"),
                                            ("deeper/still", "is in its path and is not a directory")])
def test_an_output_dir_blocked_by_a_file_is_refused_before_loading(below, message, tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    target = afile / below if below else afile
    missing = tmp_path / "no-such-checkpoint"     # never read: output_dir is refused first
    assert predict.main([f"checkpoint={missing}", f"output_dir={target}"]) == 2
    err = one_line_error(capsys)
    assert err.startswith(f"predict.py: error: output_dir {target}") and message in err, err
    assert afile.read_text() == "x"


def test_a_default_output_folder_blocked_by_a_file_is_refused_before_evaluating(small_build, tmp_path,
                                                                                monkeypatch, capsys):
    original = write_original_run(small_build, tmp_path / "orig")
    (tmp_path / "orig" / "predictions").write_text("x")       # where <run>/predictions/step_1234 would go
    monkeypatch.setattr(predict, "evaluate", lambda *a, **k: pytest.fail("evaluated before the check"))
    assert predict.main([f"checkpoint={original}"]) == 2
    err = one_line_error(capsys)
    assert f"{tmp_path / 'orig' / 'predictions'} is in its path and is not a directory" in err
    assert "output_dir=DIR" in err


def test_predictions_already_in_output_dir_are_replaced_with_a_note(small_build, tmp_path, monkeypatch, capsys):
    """output_dir= reused for another checkpoint (one folder for several steps) replaces what is
    there: said before the evaluation, as for the default folder, naming whose predictions they were."""
    from hrm.evaluation import _EMPTY

    def evaluate(*args, **kwargs):      # the model's work is not the point: no rows, at once
        print(" test rows: (evaluated)")
        return {}, dict(_EMPTY)

    monkeypatch.setattr(predict, "evaluate", evaluate)
    original = write_original_run(small_build, tmp_path / "orig")
    out = tmp_path / "preds"
    out.mkdir()
    for r in range(2):      # a 2-rank evaluation of another checkpoint
        (out / f"rank_{r}.npz").write_bytes(b"old")
    (out / "info.json").write_text(json.dumps({"data_path": str(small_build), "step": 3, "world_size": 2,
                                               "checkpoint": "other/step_3"}))
    assert predict.main([f"checkpoint={original}", f"output_dir={out}", "batch_size=16"]) == 0
    said = capsys.readouterr().out
    assert (f"note: {out} holds the predictions of checkpoint other/step_3 (step 3): they are replaced; give "
            f"another output_dir to keep them") in said
    assert said.index("note:") < said.index(" test rows: ")       # before the evaluation
    assert sorted(p.name for p in out.iterdir()) == ["info.json", "rank_0.npz"]
    assert json.loads((out / "info.json").read_text())["checkpoint"] == str(original)


@pytest.mark.parametrize("held, said", [
    ({"info.json": json.dumps({"step": 40, "checkpoint": None})},      # training's own
     "the predictions of training's evaluation of step 40"),
    ({"info.json": "{not json"}, "the predictions of an earlier evaluation"),
    ({"rank_0.npz": "x"}, "the rank files of an evaluation that did not finish"),
    ({"notes.txt": "x"}, None),
])
def test_what_an_output_folder_already_holds_is_named(held, said, tmp_path):
    for name, text in held.items():
        (tmp_path / name).write_text(text)
    assert predict.earlier_predictions(tmp_path) == said
    assert predict.earlier_predictions(tmp_path / "not-yet") is None


# ------------------------------------------------------------------------------ run folders
def write_run_folder(small_build, tmp_path, steps=(3, 7), latest="step_7") -> Path:
    """A training run's folder as hrm.train_checkpoint lays it out: step_<N>/{model,trainer}.pt, latest."""
    model = load_original_checkpoint(str(write_original_run(small_build, tmp_path / "orig")), seq_len=900)
    run = tmp_path / "checkpoints" / "proj" / "run"
    for step in steps:
        save_model(str(run / f"step_{step}" / "model.pt"), model, extra={"step": step})
        torch.save({"format": "hrm-deeploop/train-v1", "step": step, "config": {"data_path": str(small_build)}},
                   run / f"step_{step}" / "trainer.pt")
    if latest:
        (run / "latest").write_text(latest)
    return run


def test_a_run_folder_stands_for_its_latest_checkpoint(tiny_build, tmp_path, capsys):
    run = write_run_folder(tiny_build, tmp_path)
    assert predict.main([f"checkpoint={run}", "batch_size=16"]) == 0
    assert f"checkpoint: {run / 'step_7'} (the latest of the run folder {run})" in capsys.readouterr().out
    info = json.loads((run / "predictions" / "step_7" / "info.json").read_text())
    assert info["step"] == 7 and info["checkpoint"] == str(run / "step_7")


def test_a_run_folder_is_resolved_as_resume_latest_resolves_it(small_build, tmp_path):
    run = write_run_folder(small_build, tmp_path, latest="step_3")
    assert predict.resolve_checkpoint(str(run)) == str(run / "step_3")          # `latest` is followed
    (run / "latest").unlink()
    assert predict.resolve_checkpoint(str(run)) == str(run / "step_7")          # else the newest complete one
    (run / "step_7" / "trainer.pt").unlink()                                    # step_7 incomplete
    assert predict.resolve_checkpoint(str(run)) == str(run / "step_3")
    assert predict.resolve_checkpoint(str(run / "step_7")) == str(run / "step_7")   # a step folder: as given


def cut_short(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])   # a copy or a save cut short


@pytest.mark.parametrize("damaged", ["model.pt", "trainer.pt"])
def test_a_truncated_checkpoint_file_points_to_the_previous_step(damaged, tiny_build, tmp_path, capsys):
    """As resuming does (hrm.train_checkpoint.previous_checkpoint_hint): the step before is named,
    ready to pass, and it evaluates."""
    run = write_run_folder(tiny_build, tmp_path)                       # step_3, step_7 (latest)
    cut_short(run / "step_7" / damaged)
    assert predict.main([f"checkpoint={run}", "batch_size=16"]) == 2
    err = one_line_error(capsys)
    assert f"{run / 'step_7' / damaged} is not a checkpoint: torch cannot read it" in err
    assert err.endswith(f"truncated or corrupt?); checkpoint={run / 'step_3'} evaluates the previous checkpoint\n")
    assert predict.main([f"checkpoint={run / 'step_3'}", "batch_size=16"]) == 0
    assert (run / "predictions" / "step_3" / "info.json").is_file()


def test_a_truncated_first_checkpoint_says_what_a_checkpoint_is(small_build, tmp_path, capsys):
    run = write_run_folder(small_build, tmp_path)
    cut_short(run / "step_3" / "model.pt")                              # nothing before it to suggest
    assert predict.main([f"checkpoint={run / 'step_3'}"]) == 2
    err = one_line_error(capsys)
    assert "previous checkpoint" not in err and f"; expected {predict.EXPECTED}" in err


def test_folders_without_a_checkpoint_are_explained(small_build, tmp_path, capsys):
    run = tmp_path / "run"
    (run / "step_5").mkdir(parents=True)              # a run killed before its first checkpoint
    (run / "latest").write_text("step_5")
    assert predict.main([f"checkpoint={run}"]) == 2
    assert (f"checkpoint {run} is a run folder without a complete checkpoint (a step_<N>/ folder with "
            f"model.pt and trainer.pt)") in one_line_error(capsys)
    original = write_original_run(small_build, tmp_path / "orig")
    torch.save({}, tmp_path / "orig" / "step_99")
    torch.save({}, tmp_path / "orig" / "step_\u00b2")      # not a step number, though str.isdigit says so
    assert predict.main([f"checkpoint={tmp_path / 'orig'}"]) == 2      # the original code's run folder
    err = one_line_error(capsys)
    assert f"checkpoint={original}" in err and "(the newest of 2)" in err, err
    (tmp_path / "empty").mkdir()
    assert predict.main([f"checkpoint={tmp_path / 'empty'}"]) == 2
    assert f"checkpoint {tmp_path / 'empty'}: a folder without model.pt" in one_line_error(capsys)
    # a folder of run folders (a sweep's checkpoint_path, a project): the runs, and how to pass one
    sweep = tmp_path / "sweep"
    for job in ("lr=0.002", "lr=0.001"):
        (sweep / job / "step_4").mkdir(parents=True)
        for name in ("model.pt", "trainer.pt"):
            (sweep / job / "step_4" / name).write_bytes(b"")
    assert predict.main([f"checkpoint={sweep}"]) == 2
    assert one_line_error(capsys).endswith(
        f"checkpoints); it holds the run folders lr=0.001, lr=0.002 (a project's, or a sweep's checkpoint_path): "
        f"checkpoint={sweep / 'lr=0.001'} evaluates its latest\n")


def test_a_runs_files_that_are_not_checkpoints_are_named_with_what_to_pass(tmp_path, capsys):
    """The step's training state was called 'not one of our checkpoints', a predictions file
    corrupt ('torch cannot read it'), a predictions folder 'a run folder without a checkpoint'."""
    run = tmp_path / "run"
    for name in ("step_3/model.pt", "step_3/trainer.pt", "step_3/rank_0.pt", "predictions/step_2/info.json",
                 "predictions/step_3/info.json", "predictions/step_3/rank_0.npz"):
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_bytes(b"")
    vote = f"which vote.py reads: python evaluate/vote.py --predictions {run / 'predictions' / 'step_3'}"
    for given, said in [
            ("step_3/trainer.pt", f"is the training state saved beside the step's weights: pass the step folder, "
                                  f"checkpoint={run / 'step_3'} (or its model.pt)"),
            ("step_3/rank_0.pt", "is the training state saved beside the step's weights"),
            ("predictions/step_3/rank_0.npz", f"is a predictions file, {vote}"),
            ("predictions/step_3", f"holds predictions, {vote}; predict.py takes a checkpoint"),
            ("predictions", f"holds predictions, {vote}; predict.py takes a checkpoint")]:   # the newest step
        assert predict.main([f"checkpoint={run / given}"]) == 2
        assert f"checkpoint {run / given} {said}" in one_line_error(capsys), given


def test_a_missing_step_folder_names_the_run_and_its_checkpoints(tmp_path, capsys):
    """checkpoint=<run>/step_5 (removed by keep_checkpoints, or mistyped), or its model.pt: the run's
    step folders are listed and the run folder suggested, as resuming does."""
    run = tmp_path / "run"
    for step in (3, 7):
        (run / f"step_{step}").mkdir(parents=True)
        (run / f"step_{step}" / "trainer.pt").write_bytes(b"")
    for missing in (run / "step_5", run / "step_5" / "model.pt"):
        assert predict.main([f"checkpoint={missing}"]) == 2
        assert one_line_error(capsys) == (f"predict.py: error: checkpoint {missing}: no such file or folder; the run "
                                          f"folder {run} holds step_3, step_7: checkpoint={run} evaluates its newest\n")
    # step_7 is there without its model.pt: the run folder, whose newest it is, is no way out
    assert predict.main([f"checkpoint={run / 'step_7' / 'model.pt'}"]) == 2
    assert "evaluates its newest" not in one_line_error(capsys)


def test_a_copy_beside_the_step_folders_is_not_a_checkpoint(tiny_build, tmp_path, capsys):
    """`cp -r step_7 step_7.bak` in a run folder: step_7 still evaluates (the previous-checkpoint
    hint lists the run's step_<N> folders only), and the run folder still means step_7."""
    import shutil
    run = write_run_folder(tiny_build, tmp_path, latest=None)
    shutil.copytree(run / "step_7", run / "step_7.bak")
    shutil.copytree(run / "step_7", run / "step_best")
    shutil.copytree(run / "step_7", run / "step_\u00b2")        # isdigit() yet no number: int() refuses it
    assert predict.main([f"checkpoint={run / 'step_7'}", "batch_size=16"]) == 0, capsys.readouterr().err
    assert predict.resolve_checkpoint(str(run)) == str(run / "step_7")


def test_under_torchrun_a_refusal_is_said_once(tmp_path):
    """Every rank checks the same arguments and files before the process group exists: LOCAL_RANK 0
    says what is wrong, the others say nothing and outwait it (exiting first, they could have had
    torchrun stop it before it printed)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", "29533",
           str(ROOT / "evaluate" / "predict.py"), f"checkpoint={tmp_path / 'nowhere'}"]
    run = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert run.returncode != 0
    assert run.stderr.count(f"predict.py: error: checkpoint {tmp_path / 'nowhere'}: no such file") == 1, run.stderr[-3000:]


def test_a_save_left_unrenamed_predicts_into_its_steps_folder(tiny_build, tmp_path, capsys):
    """A step saved again and killed between its renames leaves `.step_7.tmp` (complete) and
    `.step_7.old`: the run folder's latest is that `.tmp`, which is step 7. Its predictions go to
    predictions/step_7, where training's of step 7 go, not to a hidden predictions/.step_7.tmp."""
    run = write_run_folder(tiny_build, tmp_path)
    (run / "step_7").rename(run / ".step_7.tmp")
    (run / ".step_7.old").mkdir()
    assert predict.main([f"checkpoint={run}", "batch_size=16"]) == 0
    assert f"checkpoint: {run / '.step_7.tmp'} (the latest of the run folder {run})" in capsys.readouterr().out
    assert sorted(p.name for p in (run / "predictions").iterdir()) == ["step_7"]
    info = json.loads((run / "predictions" / "step_7" / "info.json").read_text())
    assert info["step"] == 7 and info["checkpoint"] == str(run / ".step_7.tmp")
