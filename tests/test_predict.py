"""evaluate/predict.py: our checkpoints and the original code's give the same predictions files,
equal to the model's own evaluation forward, and a checkpoint that does not fit the build is refused."""
import json

import numpy as np
import torch
import yaml

from evaluate import predict
from hrm.checkpoint import load_original_checkpoint, save_model
from tests.test_model_reference import original_config, random_original_weights

ARCH = dict(hidden_size=32, num_heads=2, expansion=2, H_layers=1, L_layers=1, H_cycles=2, L_cycles=2,
            halt_max_steps=2, halt_exploration_prob=0.1, puzzle_emb_ndim=32, pos_encodings="rope")


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


def test_original_and_our_checkpoints_predict_the_same(small_build, tmp_path, capsys):
    original = write_original_run(small_build, tmp_path / "orig")
    assert predict.main([f"checkpoint={original}", "batch_size=16"]) == 0
    from_original = tmp_path / "orig" / "predictions" / "step_1234"
    info = json.loads((from_original / "info.json").read_text())
    assert info["step"] == 1234 and info["data_path"] == str(small_build.resolve())

    model = load_original_checkpoint(str(original), seq_len=900)
    ours = tmp_path / "ours" / "step_7"
    save_model(str(ours / "model.pt"), model, extra={"step": 7})
    out = tmp_path / "ours-preds"
    assert predict.main([f"checkpoint={ours}", f"data_path={small_build}", f"output_dir={out}", "batch_size=16"]) == 0
    a, b = read(from_original), read(out)
    assert a.keys() == b.keys() == {"puzzle_identifiers", "inputs", "preds", "q_halt_logits"}
    for key in a:
        assert np.array_equal(a[key], b[key]), key

    # against the model's evaluation forward on the raw test rows (no reader, no padding)
    inputs = np.load(small_build / "test" / "all__inputs.npy")
    puzzle_ids = np.repeat(np.load(small_build / "test" / "all__puzzle_identifiers.npy"),
                           np.diff(np.load(small_build / "test" / "all__puzzle_indices.npy")))
    real = a["puzzle_identifiers"] != 0
    assert real.sum() == len(inputs) and np.array_equal(a["inputs"][real], inputs)
    with torch.no_grad():
        out = model.predict({"inputs": torch.from_numpy(inputs[:16]).int(),
                             "puzzle_identifiers": torch.from_numpy(puzzle_ids[:16]).int()})
    assert np.array_equal(a["preds"][:16], out["preds"].numpy().astype(np.uint8))
    np.testing.assert_allclose(a["q_halt_logits"][:16], out["q_halt_logits"].numpy(), rtol=1e-5, atol=1e-6)


def test_checkpoint_that_does_not_fit_the_build_is_refused(small_build, tmp_path, capsys):
    original = write_original_run(small_build, tmp_path / "orig", num_ids=5)
    assert predict.main([f"checkpoint={original}"]) == 2
    err = capsys.readouterr().err
    assert "puzzle-embedding table has 5 rows" in err and "do not belong together" in err
    assert predict.main([f"checkpoint={tmp_path / 'nowhere'}"]) == 2
    assert predict.main(["checkpoint"]) == 2


def test_evaluation_skips_the_padding_rows_of_a_batch():
    """The reader pads the last batch with blank rows at its end; they are not run, and a batch of
    padding alone still runs one row (every rank must reach the metrics all-reduce)."""
    from hrm.distributed import DistInfo
    from hrm.evaluation import evaluate

    class RecordingHead(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.sizes = []

        def evaluate(self, batch):
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
    assert head.sizes == [4, 1, 1]
    assert arrays["puzzle_identifiers"].tolist() == [5, 6, 7, 8, 9, 0]
    assert arrays["preds"].shape == (6, 900) and metrics == {"accuracy": 0.5, "count": 5.0}
