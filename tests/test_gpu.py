"""CUDA checks (skipped without a GPU; scripts/gpu_check.sh runs them on one).

The CPU suite proves the algorithms; these prove that the same code gives the same numbers on CUDA,
where other kernels run: SDPA's CUDA kernels instead of the CPU one, plain autograd instead of the
hand-written CPU paths (hrm.layers, hrm.attention), bfloat16 and torch.compile.
"""
from __future__ import annotations

import copy

import pytest
import torch

from hrm.attention import attend
from hrm.compiled import compile_fixed_shapes
from hrm.config import ArchConfig
from hrm.loss import ACTLossHead
from hrm.model import HRM
from hrm.optim import AdamATan2
from hrm.puzzle_embedding import PuzzleSignSGD
from tests.test_model_layers import naive_attention

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
DEVICE = torch.device("cuda")

SEQ_LEN, VOCAB, PUZZLES, BATCH = 900, 12, 50, 4
# Every part of the model, no exploration (its random draws differ between CPU and CUDA generators).
ARCH = dict(name="gpu-test", hidden_size=64, num_heads=2, expansion=4, H_layers=2, L_layers=2, H_cycles=2,
            L_cycles=2, halt_max_steps=3, halt_exploration_prob=0.0, puzzle_emb_ndim=64,
            scaling={"rule": "deeploop"})


@pytest.fixture(autouse=True)
def exact_float32_matmuls():
    """TF32 would round float32 products to 10 mantissa bits on CUDA; compare true float32."""
    saved = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    yield
    torch.set_float32_matmul_precision(saved)


def batch_on(device) -> dict:
    g = torch.Generator().manual_seed(1)
    inputs = torch.randint(2, VOCAB, (BATCH, SEQ_LEN), generator=g)
    labels = torch.randint(2, VOCAB, (BATCH, SEQ_LEN), generator=g)
    labels[:, 400:] = -100
    ids = torch.randint(1, PUZZLES, (BATCH,), generator=g, dtype=torch.int32)
    return {k: v.to(device) for k, v in dict(inputs=inputs, labels=labels, puzzle_identifiers=ids).items()}


def one_step(model: HRM, device, compile_model: bool = False) -> dict:
    """One training step (ACT segment, loss, backward, both optimizers) from a fresh carry."""
    head = ACTLossHead(model).train()
    dense = AdamATan2(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    sparse = PuzzleSignSGD(model.puzzle_embedding, lr=1e-2, weight_decay=0.1)
    batch = batch_on(device)
    forward = compile_fixed_shapes(head) if compile_model else head   # as the trainer compiles it
    model.puzzle_embedding.prepare_lookup(BATCH)  # as the trainer does: the step stays one graph
    result = forward(head.initial_carry(batch), batch)
    (result.loss / BATCH).backward()
    grads = {name: p.grad.detach().cpu().clone() for name, p in model.named_parameters()}
    grads["puzzle rows"] = torch.cat([rows.grad for rows, _ in model.puzzle_embedding.lookups]).cpu()
    dense.step()
    sparse.step()
    return {"loss": result.loss.detach().double().cpu(),
            "logits": result.outputs["logits"].float().cpu(),
            "q_halt": result.outputs["q_halt_logits"].float().cpu(),
            "z_H": result.carry.z_H.float().cpu(),
            "grads": grads,
            "weights": {k: v.detach().float().cpu() for k, v in model.state_dict().items()}}


def twin_models(**arch_overrides) -> tuple[HRM, HRM]:
    torch.manual_seed(0)
    cpu = HRM(ArchConfig(**{**ARCH, **arch_overrides}), VOCAB, SEQ_LEN, PUZZLES, verbose=False)
    return cpu, copy.deepcopy(cpu).to(DEVICE)


def assert_close(actual: torch.Tensor, expected: torch.Tensor, rel: float, what: str) -> None:
    scale = expected.abs().max().clamp_min(1e-12)
    error = (actual.double() - expected.double()).abs().max() / scale
    assert error <= rel, f"{what}: max error {error:.2e} of the largest magnitude (allowed {rel:.0e})"


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_sdpa_on_gpu_matches_naive_reference(dtype, tol):
    """Item 2 on CUDA: SDPA (and `auto`, which takes flash-attn when installed) against the float64
    softmax(QK^T/sqrt(d))V, at ARC's sequence length (900 tokens + 1 puzzle token)."""
    g = torch.Generator(device=DEVICE).manual_seed(0)
    q, k, v = (torch.randn(2, 4, 901, 64, generator=g, device=DEVICE).to(dtype) for _ in range(3))
    expected = naive_attention(q, k, v)
    for backend in ("sdpa", "auto"):
        out = attend(q, k, v, backend=backend)
        assert out.dtype == dtype and out.shape == q.shape
        assert_close(out, expected, tol, f"{backend} {dtype}")


def test_float32_training_step_on_gpu_matches_cpu():
    """Same weights, batch and step on both devices: losses, outputs, gradients (CPU: hand-written
    paths; CUDA: autograd) and the updated weights agree to float32 round-off."""
    cpu_model, gpu_model = twin_models(forward_dtype="float32")
    cpu, gpu = one_step(cpu_model, "cpu"), one_step(gpu_model, DEVICE)
    assert_close(gpu["loss"], cpu["loss"], 1e-5, "loss")
    for key in ("logits", "q_halt", "z_H"):
        assert_close(gpu[key], cpu[key], 1e-4, key)
    for name, grad in cpu["grads"].items():
        assert_close(gpu["grads"][name], grad, 1e-3, f"gradient of {name}")
    # AdamATan2's first step moves a weight by lr*atan2(0.1*g, |g|) = ±lr*atan(0.1) whatever |g|,
    # so a gradient at round-off level may flip either way: compare where the gradient is clear.
    # (Buffers stay as they were; the puzzle table's sign-SGD flips the same way.)
    parameters = [name for name in cpu["grads"] if name in cpu["weights"]]
    assert len(parameters) == len(cpu["grads"]) - 1       # all but the puzzle rows
    for name in parameters:
        grad = cpu["grads"][name]
        clear = grad.abs() > 1e-3 * grad.abs().max()
        error = (gpu["weights"][name] - cpu["weights"][name]).abs()[clear].max().item() if clear.any() else 0.0
        assert error <= 1e-5, f"updated {name}: max difference {error:.2e}"


def test_bfloat16_forward_on_gpu_tracks_float32():
    """bfloat16 (forward_dtype auto on CUDA): the loss stays within bf16 round-off of float32's."""
    _, gpu32 = twin_models(forward_dtype="float32")
    gpu16 = copy.deepcopy(gpu32)
    gpu16.arch = gpu16.arch.model_copy(update={"forward_dtype": "bfloat16"})
    assert gpu16.compute_dtype(DEVICE) == torch.bfloat16
    full, half = one_step(gpu32, DEVICE), one_step(gpu16, DEVICE)
    assert_close(half["loss"], full["loss"], 5e-3, "bf16 loss")
    assert_close(half["logits"], full["logits"], 5e-2, "bf16 logits")


def test_compiled_step_on_gpu_matches_eager():
    """torch.compile (inductor, CUDA) of the ACT step gives eager's numbers (one layer per module:
    the compile wait grows with the unrolled graph)."""
    _, eager_model = twin_models(forward_dtype="float32", H_layers=1, L_layers=1)
    compiled_model = copy.deepcopy(eager_model)
    eager, compiled = one_step(eager_model, DEVICE), one_step(compiled_model, DEVICE, compile_model=True)
    assert_close(compiled["loss"], eager["loss"], 1e-5, "compiled loss")
    assert_close(compiled["logits"], eager["logits"], 1e-4, "compiled logits")
    for name, grad in eager["grads"].items():
        assert_close(compiled["grads"][name], grad, 1e-3, f"compiled gradient of {name}")


def test_bfloat16_step_and_segment_trace_as_one_graph_on_gpu():
    """In bf16 on CUDA (what a run uses) the ACT step and the evaluation segment are single graphs
    (fullgraph=True raises at a graph break): the CUDA-only code the CPU suite cannot trace,
    FlashAttention when installed (its lookup, its op) included. Dynamo only (backend "eager")."""
    import torch._dynamo

    _, model = twin_models(H_layers=1, L_layers=1)
    assert model.compute_dtype(DEVICE) == torch.bfloat16
    head = ACTLossHead(model).train()
    batch = batch_on(DEVICE)
    torch._dynamo.reset()
    try:
        step = compile_fixed_shapes(head, backend="eager", fullgraph=True)
        model.puzzle_embedding.prepare_lookup(BATCH)
        result = step(head.initial_carry(batch), batch)
        result.loss.backward()
        assert torch.isfinite(result.loss)
        segment = compile_fixed_shapes(model.segment, backend="eager", fullgraph=True)
        with torch.inference_mode():
            assert model.predict(batch, segment)["preds"].shape == (BATCH, SEQ_LEN)
    finally:
        torch._dynamo.reset()


def test_compiled_evaluation_segment_on_gpu_matches_eager():
    """Evaluation under compile (hrm.evaluation.compiled_segment, inductor on CUDA): the
    halt_max_steps segments of HRM.predict give eager's logits and predictions."""
    from hrm.evaluation import compiled_segment

    _, model = twin_models(forward_dtype="float32", H_layers=1, L_layers=1)
    batch = batch_on(DEVICE)
    with torch.inference_mode():
        eager = model.predict(batch)
        compiled = model.predict(batch, compiled_segment(model))
    assert_close(compiled["logits"].float().cpu(), eager["logits"].float().cpu(), 1e-4, "compiled eval logits")
    agree = (compiled["preds"] == eager["preds"]).float().mean().item()
    assert agree > 0.999, f"compiled eval predictions agree on {agree:.4%} of the cells"


def test_puzzle_row_sums_repeat_bit_for_bit_on_gpu():
    """Every rank sums the same gathered rows and applies their sign, so the sums must come out the
    same each time (CUDA's index_add_ adds in no fixed order); and the update is the CPU's."""
    from hrm.puzzle_embedding import PuzzleEmbedding, sum_rows_by_slot

    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 6, (4096,), generator=g)              # many rows per id, as a global batch
    grads = torch.randn(4096, 64, generator=g)
    slot = torch.unique(ids, return_inverse=True)[1].to(DEVICE)
    first = sum_rows_by_slot(slot, grads.to(DEVICE), 6)
    for _ in range(5):
        assert torch.equal(sum_rows_by_slot(slot, grads.to(DEVICE), 6), first)
    tables = []
    for device in ("cpu", DEVICE):
        emb = PuzzleEmbedding(6, 64).to(device).train()
        rows = emb(ids.to(device))
        (rows * grads.to(device)).sum().backward()
        PuzzleSignSGD(emb, lr=0.1, weight_decay=0.5).step()
        tables.append(emb.table.cpu())
    assert torch.equal(tables[1], tables[0])
