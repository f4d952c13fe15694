"""Checkpoints (items 10, 11): our safe format, strict loading, and checkpoints of the original code.

The original-code checks compare our model, loaded from weights written in the original key layout,
with the independent reference of tests/test_model_reference.py: logits, q logits, carry, halting,
Q targets, losses, metrics and gradients, over several ACT steps.
"""
from __future__ import annotations

import json
import os
import pickle
import re

import pytest
import torch
import yaml

from hrm.checkpoint import (CheckpointError, arch_from_original_config, load_model,
                            load_original_checkpoint, load_state_strict, original_key_map,
                            save_model)
from hrm.config import ArchConfig
from hrm.loss import ACTLossHead
from hrm.model import HRM
from tests.test_model_reference import (INNER, original_config, random_original_weights,
                                        ref_act_step, ref_loss)

VOCAB, SEQ, IDS = 12, 16, 7
CFG = dict(hidden_size=32, num_heads=2, expansion=2, H_layers=2, L_layers=1, H_cycles=2, L_cycles=2,
           halt_max_steps=3, halt_exploration_prob=0.5, puzzle_emb_ndim=48, pos_encodings="rope")


def write_original(tmp_path, cfg, sd, compiled=True, with_dataset=True, loss="stablemax"):
    data = tmp_path / "data"
    if with_dataset:
        (data / "train").mkdir(parents=True)
        (data / "train" / "dataset.json").write_text(json.dumps({"seq_len": SEQ, "vocab_size": VOCAB}))
    run = tmp_path / "run"
    run.mkdir()
    prefix = "_orig_mod." if compiled else ""
    torch.save({prefix + k: v for k, v in sd.items()}, run / "step_100")
    (run / "all_config.yaml").write_text(yaml.dump(original_config(cfg, str(data), loss)))
    return str(run / "step_100")


def make_batch(seed, size=5):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, VOCAB, (size, SEQ), generator=g)
    labels[:, SEQ - 5:] = -100
    labels[-1] = -100  # a row without labels: counted nowhere, loss 0
    return {"inputs": torch.randint(0, VOCAB, (size, SEQ), generator=g, dtype=torch.int32),
            "labels": labels,
            "puzzle_identifiers": torch.randint(0, IDS, (size,), generator=g, dtype=torch.int32)}


def ref_initial_carry(batch, cfg):
    p_len = -(-cfg["puzzle_emb_ndim"] // cfg["hidden_size"])
    shape = (batch["inputs"].shape[0], SEQ + p_len, cfg["hidden_size"])
    return {"z_H": torch.zeros(shape), "z_L": torch.zeros(shape),
            "steps": torch.zeros(shape[0], dtype=torch.int32),
            "halted": torch.ones(shape[0], dtype=torch.bool),
            "data": {k: torch.zeros_like(v) for k, v in batch.items()}}


def close(a, b, tol=2e-5):
    assert a.shape == b.shape
    ok = torch.allclose(a.float(), b.float(), atol=tol, rtol=tol)
    assert ok, f"max |difference| {(a.float() - b.float()).abs().max().item():.3g} > {tol}"


def test_original_checkpoint_eval_matches_reference(tmp_path):
    sd = random_original_weights(CFG, VOCAB, SEQ, IDS, seed=1)
    sd[INNER + "H_init"] = sd[INNER + "H_init"].bfloat16()  # as saved by a bfloat16 GPU run
    path = write_original(tmp_path, CFG, sd)
    model = load_original_checkpoint(path)  # seq_len found through data_path/train/dataset.json
    assert model.seq_len == SEQ and model.arch.loss_type == "stablemax"
    model.eval()

    batch = make_batch(0)
    carry, ref_carry = model.initial_carry(batch), ref_initial_carry(batch, CFG)
    for _ in range(CFG["halt_max_steps"]):
        with torch.no_grad():
            carry, out = model(carry, batch)
            ref_carry, ref_out = ref_act_step(sd, CFG, ref_carry, batch, training=False)
        for key in ("logits", "q_halt_logits", "q_continue_logits"):
            close(out[key], ref_out[key])
        close(carry.z_H, ref_carry["z_H"])
        close(carry.z_L, ref_carry["z_L"])
        assert torch.equal(carry.steps, ref_carry["steps"])
        assert torch.equal(carry.halted, ref_carry["halted"])
    assert carry.halted.all()  # evaluation halts exactly at halt_max_steps


@pytest.mark.parametrize("loss", ["stablemax", "softmax"])
def test_original_checkpoint_training_steps_match_reference(tmp_path, loss):
    """ACT in training mode: halting, exploration draws, Q targets, losses, metrics, gradients."""
    sd = random_original_weights(CFG, VOCAB, SEQ, IDS, seed=2)
    model = load_original_checkpoint(write_original(tmp_path, CFG, sd, compiled=False, loss=loss))
    head = ACTLossHead(model).train()
    ref_sd = {k: v.clone().requires_grad_(v.is_floating_point() and "puzzle_emb" not in k
                                          and not k.endswith("_init"))
              for k, v in sd.items()}
    ref_sd[INNER + "puzzle_emb.weights"].requires_grad_(True)
    key_map = original_key_map(model.arch)

    batch0 = make_batch(0)
    carry, ref_carry = head.initial_carry(batch0), ref_initial_carry(batch0, CFG)
    halted_seen = []
    for step in range(5):
        batch = make_batch(step)
        torch.manual_seed(100 + step)
        result = head(carry, batch)
        torch.manual_seed(100 + step)
        ref_carry, ref_out = ref_act_step(ref_sd, CFG, ref_carry, batch, training=True)
        ref_total, ref_metrics = ref_loss(ref_out, ref_carry["data"]["labels"], ref_carry["halted"],
                                          ref_carry["steps"], loss)
        carry = result.carry
        assert torch.equal(carry.halted, ref_carry["halted"])
        assert torch.equal(carry.steps, ref_carry["steps"])
        close(result.outputs["target_q_continue"], ref_out["target_q_continue"])
        assert abs(result.loss.item() - ref_total.item()) < 1e-4 * max(1.0, abs(ref_total.item()))
        assert set(result.metrics) == set(ref_metrics)
        for k, v in ref_metrics.items():
            assert abs(result.metrics[k].item() - v) < 1e-4 * max(1.0, abs(v)), k
        assert bool(result.all_halted) == bool(ref_carry["halted"].all())
        halted_seen.append(carry.halted.clone())

        # One-step gradients: every dense weight, and the puzzle rows of the batch.
        model.zero_grad(set_to_none=True)
        for v in ref_sd.values():
            v.grad = None
        result.loss.backward()
        ref_total.backward()
        params = dict(model.named_parameters())
        for orig_key, our_key in key_map.items():
            if our_key in params:
                close(params[our_key].grad, ref_sd[orig_key].grad, tol=5e-4)
        rows = model.puzzle_embedding
        dense = torch.zeros(IDS, CFG["puzzle_emb_ndim"]).index_add_(0, rows.batch_ids.long(),
                                                                    rows.batch_rows.grad)
        close(dense, ref_sd[INNER + "puzzle_emb.weights"].grad, tol=5e-4)
    halted = torch.stack(halted_seen)
    assert halted.any() and not halted.all()  # the run exercised both halting and continuing


def test_original_checkpoint_learned_positions_without_prefix(tmp_path):
    cfg = dict(CFG, pos_encodings="learned", puzzle_emb_ndim=32)
    sd = random_original_weights(cfg, VOCAB, SEQ, IDS, seed=3)
    path = write_original(tmp_path, cfg, sd, compiled=False, with_dataset=False)
    model = load_original_checkpoint(path).eval()  # seq_len from the position table
    assert model.seq_len == SEQ and model.arch.pos_encodings == "learned"
    batch = make_batch(4)
    carry, ref_carry = model.initial_carry(batch), ref_initial_carry(batch, cfg)
    with torch.no_grad():
        for _ in range(2):
            carry, out = model(carry, batch)
            ref_carry, ref_out = ref_act_step(sd, cfg, ref_carry, batch, training=False)
    close(out["logits"], ref_out["logits"])
    close(carry.z_H, ref_carry["z_H"])


def test_original_checkpoint_errors_name_the_keys(tmp_path):
    sd = random_original_weights(CFG, VOCAB, SEQ, IDS, seed=4)
    sd[INNER + "H_level.layers.0.self_attn.extra.weight"] = torch.zeros(1)
    with pytest.raises(CheckpointError, match=r"unknown keys \['model.inner.H_level.layers.0.self_attn.extra.weight'\]"):
        load_original_checkpoint(write_original(tmp_path, CFG, sd))

    sd = random_original_weights(CFG, VOCAB, SEQ, IDS, seed=4)
    (tmp_path / "b").mkdir()
    path = write_original(tmp_path / "b", dict(CFG, L_layers=2), sd)   # config says 2 L blocks
    with pytest.raises(CheckpointError, match="model.inner.L_level.layers.1.mlp.down_proj.weight"):
        load_original_checkpoint(path)

    # a key held both with and without torch.compile's prefix: one silently replaced the other
    (tmp_path / "d").mkdir()
    path = write_original(tmp_path / "d", CFG, sd)
    torch.save(dict(torch.load(path, weights_only=True), **{INNER + "H_init": torch.ones(CFG["hidden_size"])}), path)
    with pytest.raises(CheckpointError, match=r"holds model.inner.H_init both with and without the '_orig_mod.' prefix"):
        load_original_checkpoint(path)

    (tmp_path / "c").mkdir()
    path = write_original(tmp_path / "c", CFG, sd, with_dataset=False)
    with pytest.raises(CheckpointError, match="pass seq_len"):
        load_original_checkpoint(path)
    assert load_original_checkpoint(path, seq_len=SEQ).seq_len == SEQ


def test_original_config_mapping():
    arch = arch_from_original_config(original_config(dict(CFG, puzzle_emb_ndim=512, hidden_size=512,
                                                          num_heads=8), loss="softmax"))
    assert arch.loss_type == "softmax" and arch.hidden_size == 512 and arch.scaling.rule == "none"
    bad = original_config(CFG)
    bad["arch"]["mystery_knob"] = 3
    with pytest.raises(CheckpointError, match="mystery_knob"):
        arch_from_original_config(bad)
    bad = original_config(CFG)
    bad["arch"]["name"] = "some.other@Model"
    with pytest.raises(CheckpointError, match="not the original HRM"):
        arch_from_original_config(bad)


def edit_config(path, change):
    """Rewrite the all_config.yaml beside original checkpoint `path` with change(config)."""
    config_file = os.path.join(os.path.dirname(path), "all_config.yaml")
    with open(config_file) as f:
        config = yaml.safe_load(f)
    change(config)
    with open(config_file, "w") as f:
        yaml.dump(config, f)
    return config_file


def test_original_config_without_puzzle_emb_ndim_means_no_puzzle_embedding(tmp_path):
    """The original's model config defaults puzzle_emb_ndim to 0 (ours to hidden_size): a run that left it
    out has no puzzle table, and its checkpoint loads and computes as the original's."""
    cfg = dict(CFG, puzzle_emb_ndim=0)
    sd = random_original_weights(cfg, VOCAB, SEQ, IDS, seed=5)
    path = write_original(tmp_path, cfg, sd)
    edit_config(path, lambda c: c["arch"].pop("puzzle_emb_ndim"))
    model = load_original_checkpoint(path).eval()
    assert model.arch.puzzle_emb_ndim == 0 and model.puzzle_tokens == 0
    batch = make_batch(6)
    carry, ref_carry = model.initial_carry(batch), ref_initial_carry(batch, cfg)
    with torch.no_grad():
        carry, out = model(carry, batch)
        ref_carry, ref_out = ref_act_step(sd, cfg, ref_carry, batch, training=False)
    close(out["logits"], ref_out["logits"])
    close(out["q_halt_logits"], ref_out["q_halt_logits"])


def test_original_config_without_a_field_the_original_requires_is_refused(tmp_path):
    """halt_max_steps (like the cycles) shows nowhere in the weights: without it in the file, our
    default (16, the run's was 3) gave another model without a word."""
    path = write_original(tmp_path, CFG, random_original_weights(CFG, VOCAB, SEQ, IDS, seed=5))
    config_file = edit_config(path, lambda c: c["arch"].pop("halt_max_steps"))
    with pytest.raises(CheckpointError, match=rf"^{re.escape(config_file)}: arch lacks \['halt_max_steps'\]"):
        load_original_checkpoint(path)


@pytest.mark.parametrize("content, message", [
    (b"", "not an HRM training config: a YAML mapping was expected, not NoneType"),
    (b"arch: hrm_v1\n", "arch is not a mapping"),
    (b"arch: {name: hrm.hrm_act_v1@HierarchicalReasoningModel_ACTV1, loss: stablemax_cross_entropy}\n",
     "arch.loss is not a mapping"),
    (None, "arch.hidden_size: Input should be a valid integer"),    # a field of the wrong type
    (b"\x80\x02 not text", "not valid YAML"),
])
def test_a_damaged_original_config_is_named_in_one_line(content, message, tmp_path):
    path = write_original(tmp_path, CFG, random_original_weights(CFG, VOCAB, SEQ, IDS, seed=5))
    config_file = os.path.join(os.path.dirname(path), "all_config.yaml")
    if content is None:
        edit_config(path, lambda c: c["arch"].update(hidden_size="wide"))
    else:
        with open(config_file, "wb") as f:
            f.write(content)
    with pytest.raises(CheckpointError) as caught:
        load_original_checkpoint(path)
    text = str(caught.value)
    assert text.startswith(f"{config_file}: ") and message in text and "\n" not in text, text


# ---------------------------------------------------------------------------------- our format
def tiny_arch(**kw):
    base = dict(hidden_size=32, num_heads=2, H_layers=1, L_layers=1, halt_max_steps=2,
                puzzle_emb_ndim=32, scaling={"rule": "deeploop"})
    base.update(kw)
    return ArchConfig(**base)


def test_save_load_roundtrip_is_exact(tmp_path):
    torch.manual_seed(0)
    model = HRM(tiny_arch(), VOCAB, SEQ, IDS, verbose=False)
    with torch.no_grad():
        model.puzzle_embedding.table.normal_()
    path = str(tmp_path / "ckpt" / "model.pt")
    save_model(path, model, extra={"step": 7})
    loaded, extra = load_model(path)
    assert extra == {"step": 7}
    assert loaded.arch == model.arch and loaded.scaling == model.scaling
    for (k, a), (k2, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert k == k2 and torch.equal(a, b)
    batch = make_batch(0)
    assert torch.equal(model.predict(batch)["logits"], loaded.predict(batch)["logits"])
    payload = torch.load(path, weights_only=True)
    assert payload["scaling"]["H"]["alpha"] == model.scaling["H"]["alpha"]


def test_a_checkpoint_saved_with_other_scaling_than_this_code_derives_is_said(tmp_path, capsys):
    """The saved constants are what the weights were trained under; a derivation changed between
    versions of this code would run them under others without a word."""
    model = HRM(tiny_arch(), VOCAB, SEQ, IDS, verbose=False)
    path = str(tmp_path / "model.pt")
    save_model(path, model)
    load_model(path)
    assert capsys.readouterr().err == ""
    payload = torch.load(path, weights_only=True)
    payload["scaling"]["L"]["alpha"] = 3.0            # as an older derivation might have given
    torch.save(payload, path)
    loaded, _ = load_model(path)
    err = capsys.readouterr().err
    assert err.startswith(f"warning: {path} was saved with other residual scaling than this code derives from "
                          f"its arch (L.alpha): it runs with this code's ") and loaded.scaling == model.scaling


def test_strict_load_names_unknown_missing_and_mismatched_keys():
    model = HRM(tiny_arch(), VOCAB, SEQ, IDS, verbose=False)
    state = dict(model.state_dict())
    with pytest.raises(CheckpointError, match=r"unknown keys: \['bogus.weight'\]"):
        load_state_strict(model, dict(state, **{"bogus.weight": torch.zeros(1)}))
    partial = dict(state)
    del partial["L_init"]
    with pytest.raises(CheckpointError, match=r"missing keys: \['L_init'\]"):
        load_state_strict(model, partial)
    with pytest.raises(CheckpointError, match=r"shape mismatch for lm_head.weight: model \(12, 32\), "
                                              r"checkpoint \(13, 32\)"):
        load_state_strict(model, dict(state, **{"lm_head.weight": torch.zeros(13, 32)}))
    with pytest.raises(CheckpointError, match="dtype mismatch for H_init"):
        load_state_strict(model, dict(state, H_init=torch.zeros(32, dtype=torch.int64)))


class _Payload:
    def __reduce__(self):
        return (print, ("code ran while loading",))


def test_loading_never_unpickles_code(tmp_path):
    path = tmp_path / "evil.pt"
    with open(path, "wb") as f:
        pickle.dump({"format": "hrm-deeploop/model-v1", "x": _Payload()}, f, protocol=2)
    refused = "torch cannot read it (UnpicklingError: Weights only load failed"   # weights_only: no code ran
    with pytest.raises(CheckpointError, match=re.escape(refused)):
        load_model(str(path))
    os.replace(path, tmp_path / "step_1")
    (tmp_path / "all_config.yaml").write_text(yaml.dump(original_config(CFG)))
    with pytest.raises(CheckpointError, match=re.escape(refused)):
        load_original_checkpoint(str(tmp_path / "step_1"), seq_len=SEQ)


def test_not_our_format_is_refused(tmp_path):
    path = tmp_path / "raw.pt"
    torch.save({"lm_head.weight": torch.zeros(1)}, path)
    with pytest.raises(CheckpointError, match="load_original_checkpoint"):
        load_model(str(path))


def test_a_truncated_checkpoint_is_named_by_either_loader(tmp_path):
    model = HRM(tiny_arch(), VOCAB, SEQ, IDS, verbose=False)
    path = tmp_path / "model.pt"
    save_model(str(path), model)
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(CheckpointError, match=f"{path} is not a checkpoint: torch cannot read it"):
        load_model(str(path))
    (tmp_path / "all_config.yaml").write_text(yaml.safe_dump({"arch": {
        "name": "hrm.hrm_act_v1@HierarchicalReasoningModel_ACTV1", "H_cycles": 2, "L_cycles": 2, "H_layers": 1,
        "L_layers": 1, "hidden_size": 32, "expansion": 2, "num_heads": 2, "pos_encodings": "rope",
        "halt_max_steps": 2, "halt_exploration_prob": 0.1}}))
    with pytest.raises(CheckpointError, match=f"{path} is not a checkpoint: torch cannot read it"):
        load_original_checkpoint(str(path))


def test_an_arch_this_version_refuses_is_named_with_the_file(tmp_path):
    """A checkpoint of a later version (a field this one does not know) or of a combination this
    version refuses: pydantic's ValidationError traceback, naming no file, before; now one line."""
    model = HRM(tiny_arch(), VOCAB, SEQ, IDS, verbose=False)
    path = str(tmp_path / "model.pt")
    save_model(path, model)
    payload = torch.load(path, weights_only=True)
    payload["arch"]["sliding_window"] = 64
    payload["arch"]["hidden_size"] = 0
    torch.save(payload, path)
    with pytest.raises(CheckpointError) as caught:
        load_model(path)
    said = str(caught.value)
    assert said.startswith(f"{path}: arch.hidden_size: ") and "; arch.sliding_window: Extra inputs" in said, said
    assert "\n" not in said


def test_a_write_error_is_given_the_file_name_without_losing_its_message():
    """named_write_error adds the file to an OSError that lacks one; one without an errno (a plain
    OSError("...") from a file object or library) keeps its own message rather than becoming
    '[Errno None] None: <file>'."""
    from hrm.checkpoint import named_write_error
    named = named_write_error(OSError(28, "No space left on device"), "/run/model.pt.tmp")
    assert str(named) == "[Errno 28] No space left on device: '/run/model.pt.tmp'"
    plain = named_write_error(OSError("the stream was closed"), "/run/model.pt.tmp")
    assert "the stream was closed" in str(plain) and "/run/model.pt.tmp" in str(plain)
    assert "None" not in str(plain)


def test_a_disk_that_fills_up_under_torchs_own_writer_is_the_oserror_naming_the_file(tmp_path, monkeypatch):
    """ENOSPC from the file torch.save writes into: torch's zip writer, closing on the way out,
    raises its own RuntimeError ('unexpected pos 1846656 vs 1846608') in its place. write_atomic
    raises the OSError underneath, naming the file (the trainer's one-line CheckpointNotSaved, exit
    1, takes OSError only: that RuntimeError was a traceback), and removes what it had written."""
    import errno
    import io

    import hrm.checkpoint
    from hrm.checkpoint import write_atomic

    class FillsUp(io.FileIO):   # a disk with 60 kB free: a write stores what fits, the next one fails
        def write(self, data):
            room = 60_000 - self.tell()
            if room <= 0:
                raise OSError(errno.ENOSPC, "No space left on device")
            return super().write(memoryview(data).cast("B")[:room])
    monkeypatch.setattr(hrm.checkpoint, "open", lambda path, mode: io.BufferedWriter(FillsUp(path, mode)),
                        raising=False)
    with pytest.raises(OSError) as caught:
        write_atomic(tmp_path / "model.pt", {"w": torch.zeros(100_000)})   # 400 kB: past the buffer
    assert caught.value.errno == errno.ENOSPC and "model.pt.tmp" in str(caught.value), repr(caught.value)
    assert not any(tmp_path.iterdir())


def test_a_rename_that_fails_leaves_no_tmp_file(tmp_path):
    """A folder where the file goes: the rename fails, naming the path, and the .tmp written for
    it is removed with it, where it stayed beside the folder."""
    from hrm.checkpoint import write_atomic
    (tmp_path / "model.pt").mkdir()
    with pytest.raises(OSError) as caught:
        write_atomic(tmp_path / "model.pt", {"w": torch.zeros(4)})
    assert "model.pt" in str(caught.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]
