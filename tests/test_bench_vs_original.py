"""scripts/bench_vs_original.py: the FlashAttention stand-in and the checkout check (the timing
itself needs a checkout of the original code, which the tests do not have)."""
from __future__ import annotations

import subprocess
import sys
import pathlib

import pytest
import torch

from scripts.bench_vs_original import install_flash_attn_stand_in
from tests.test_model_layers import naive_attention

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_flash_attn_stand_in_is_attention_in_the_flash_layout(monkeypatch):
    monkeypatch.delitem(sys.modules, "flash_attn", raising=False)
    install_flash_attn_stand_in()
    from flash_attn import flash_attn_func
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 7, 3, 8, generator=g) for _ in range(3))   # [batch, seq, heads, dim]
    out = flash_attn_func(q=q, k=k, v=v, causal=False)
    expected = naive_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)
    assert out.shape == (2, 7, 3, 8)
    assert torch.allclose(out.double(), expected, atol=1e-5)
    out.view(2, 7, 24)   # the original reshapes the output with .view: it must be contiguous


def test_refuses_a_folder_without_the_original_code(tmp_path):
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_vs_original.py"),
                          "--original", str(tmp_path)], capture_output=True, text=True)
    assert run.returncode != 0
    assert "models/hrm/hrm_act_v1.py" in run.stderr and str(tmp_path) in run.stderr


def test_no_timed_step_is_refused_before_any_work_here_and_in_bench_model(tmp_path, monkeypatch, capsys):
    """--steps 0 timed nothing and ended in a traceback (no median of no times): refused at once.
    In this process (a traceback fails the test here too); both command lines run elsewhere (above,
    and scripts/gpu_check.sh's rehearsal in tests/test_gpu_check.py)."""
    from scripts import bench_model, bench_vs_original
    for script, main in (("bench_vs_original.py", bench_vs_original.main), ("bench_model.py", bench_model.main)):
        extra = ["--original", str(tmp_path)] if script == "bench_vs_original.py" else ["--config", "cpu-bench"]
        monkeypatch.setattr(sys, "argv", [script, "--steps", "0", *extra])
        with pytest.raises(SystemExit) as exited:
            main()
        err = capsys.readouterr().err
        assert exited.value.code == 2 and "Traceback" not in err, err
        assert "--steps must be at least 1" in err, err
