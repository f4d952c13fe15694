"""AdamATan2 (item 4): the pure-PyTorch rule against a float64 hand computation."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from hrm import optim
from hrm.optim import AdamATan2, fused_backend_available


def hand_adam_atan2(p0, grads, lr, b1, b2, wd):
    """Element by element in Python floats (double precision), straight from the formula."""
    p = [float(x) for x in p0]
    m = [0.0] * len(p)
    v = [0.0] * len(p)
    for t, g in enumerate(grads, start=1):
        g = [float(x) for x in g]
        for i in range(len(p)):
            p[i] *= 1 - lr * wd
            m[i] = m[i] + (1 - b1) * (g[i] - m[i])
            v[i] = v[i] + (1 - b2) * (g[i] * g[i] - v[i])
            p[i] -= lr / (1 - b1 ** t) * math.atan2(m[i], math.sqrt(v[i]) / math.sqrt(1 - b2 ** t))
    return p, m, v


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-13), (torch.float32, 2e-6)])
@pytest.mark.parametrize("branch", ["cpu", "device"])
def test_fallback_matches_hand_computation_over_several_steps(dtype, tol, branch, monkeypatch):
    """`branch` "device": the fallback's other branch, which a CUDA run without the fused kernel
    takes (bias corrections from the step tensor on the device, no host sync), forced on the CPU by
    letting every tensor report a CUDA device while the update runs (only that branch reads it)."""
    if branch == "device":
        update = optim._reference_update

        def as_on_cuda(*args):
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(torch.Tensor, "device", property(lambda self: torch.device("cuda")))
                update(*args)
        monkeypatch.setattr(optim, "_reference_update", as_on_cuda)
    g = torch.Generator().manual_seed(0)
    p0 = torch.randn(7, generator=g, dtype=torch.float64)
    grads = [torch.randn(7, generator=g, dtype=torch.float64) * 10 ** (k - 3) for k in range(6)]
    grads[2][3] = 0.0
    lr, b1, b2, wd = 0.01, 0.9, 0.95, 0.1
    param = torch.nn.Parameter(p0.to(dtype).clone())
    opt = AdamATan2([param], lr=lr, betas=(b1, b2), weight_decay=wd)
    for grad in grads:
        param.grad = grad.to(dtype)
        opt.step()
    p, m, v = hand_adam_atan2(p0.to(dtype).double(), [x.to(dtype).double() for x in grads], lr, b1, b2, wd)
    state = opt.state[param]
    assert torch.allclose(param.double(), torch.tensor(p, dtype=torch.float64), atol=tol, rtol=0)
    assert torch.allclose(state["exp_avg"].double(), torch.tensor(m, dtype=torch.float64), atol=tol, rtol=tol)
    assert torch.allclose(state["exp_avg_sq"].double(), torch.tensor(v, dtype=torch.float64), atol=tol, rtol=tol)
    assert state["step"].dtype == torch.float32 and state["step"].item() == 6


def test_first_step_moves_by_lr_times_atan2_of_sign():
    # t = 1: m = (1-b1) g, sqrt(v)/sqrt(1-b2) = |g|: update = lr/(1-b1) * atan2((1-b1) g, |g|)
    param = torch.nn.Parameter(torch.tensor([1.0, -1.0, 0.0], dtype=torch.float64))
    opt = AdamATan2([param], lr=0.1, betas=(0.9, 0.99), weight_decay=0.0)
    param.grad = torch.tensor([3.0, -0.5, 0.0], dtype=torch.float64)
    opt.step()
    step = 0.1 / 0.1 * math.atan2(0.1, 1.0)
    assert torch.allclose(param, torch.tensor([1.0 - step, -1.0 + step, 0.0], dtype=torch.float64))


def test_lr_beyond_float32_range_gives_non_finite_weights_not_an_error():
    """A sweep's absurd lr (here 1e39 > float32 max) must reach the trainer's divergence guard as
    non-finite weights, not stop inside the optimizer with a conversion error."""
    param = torch.nn.Parameter(torch.tensor([1.0, -1.0]))
    opt = AdamATan2([param], lr=1e39, betas=(0.9, 0.95), weight_decay=0.0)
    param.grad = torch.tensor([1.0, -1.0])
    opt.step()
    assert param.tolist() == [-math.inf, math.inf]


def test_lr_zero_at_construction_and_schedule_sets_it():
    a = torch.nn.Parameter(torch.ones(3))
    b = torch.nn.Parameter(torch.ones(3))
    opt = AdamATan2([{"params": [a]}, {"params": [b], "weight_decay": 0.0}], lr=0.0, betas=(0.9, 0.95),
                    weight_decay=0.5)
    a.grad = torch.ones(3)
    opt.step()
    assert torch.equal(a, torch.ones(3))          # lr 0: no decay, no move
    assert opt.state[b] == {}                     # no gradient: skipped, no state
    for group in opt.param_groups:
        group["lr"] = 0.1
    a.grad, b.grad = torch.ones(3), -torch.ones(3)
    opt.step()
    assert (a < 1).all() and (b > 1).all()
    assert a[0].item() < 1 - 0.1 * 0.5 * 1 + 1e-6   # decay applied to a's group only


def test_state_dict_round_trip():
    p = torch.nn.Parameter(torch.randn(4))
    opt = AdamATan2([p], lr=0.01)
    p.grad = torch.randn(4)
    opt.step()
    fresh = AdamATan2([p], lr=0.01)
    fresh.load_state_dict(opt.state_dict())
    assert set(fresh.state[p]) == {"step", "exp_avg", "exp_avg_sq"}
    assert torch.equal(fresh.state[p]["exp_avg"], opt.state[p]["exp_avg"])


def test_loaded_step_counter_lives_beside_its_parameter():
    """A checkpoint read with map_location="cpu" into parameters on another device (the meta
    device stands in for CUDA here): the step counter follows its parameter, where the fused kernel
    dereferences it; torch's own load_state_dict would leave it on the CPU."""
    p = torch.nn.Parameter(torch.randn(4))
    opt = AdamATan2([p], lr=0.01)
    p.grad = torch.randn(4)
    opt.step()
    q = torch.nn.Parameter(torch.empty(4, device="meta"))
    moved = AdamATan2([q], lr=0.01)
    moved.load_state_dict(opt.state_dict())
    assert {k: (v.device.type, v.dtype) for k, v in moved.state[q].items()} == {
        "step": ("meta", torch.float32), "exp_avg": ("meta", torch.float32), "exp_avg_sq": ("meta", torch.float32)}


@pytest.mark.parametrize("kwargs, message", [(dict(lr=-1.0), "lr"), (dict(betas=(1.0, 0.9)), "betas"),
                                             (dict(weight_decay=-0.1), "weight_decay")])
def test_invalid_hyperparameters(kwargs, message):
    with pytest.raises(ValueError, match=message):
        AdamATan2([torch.nn.Parameter(torch.zeros(1))], **kwargs)


def test_fused_kernel_is_called_as_the_adam_atan2_package_calls_it(monkeypatch):
    """On CUDA the adam-atan2 package's extension runs the update:
    adam_atan2_backend.adam_atan2_cuda_impl_(params, grads, exp_avgs, exp_avg_sqs, state_steps, lr,
    beta1, beta2, weight_decay), lists of tensors and floats, each step a float32 0-dim tensor on
    its parameter's device that the caller has already advanced (the package's own optimizer does
    _foreach_add_ first); the kernel reads it and updates p, m and v in place. A stand-in with the
    kernel's arithmetic (step_size = lr / (1 - b1^t), atan2(m, sqrt(v) / sqrt(1 - b2^t))) on the
    CPU, with tensors reporting a CUDA device, must then give the hand computation."""
    calls = []

    def adam_atan2_cuda_impl_(params, grads, exp_avgs, exp_avg_sqs, state_steps, lr, beta1, beta2, weight_decay):
        assert all(isinstance(x, list) for x in (params, grads, exp_avgs, exp_avg_sqs, state_steps))
        assert all(type(x) is float for x in (lr, beta1, beta2, weight_decay))
        calls.append([s.item() for s in state_steps])
        for p, g, m, v, s in zip(params, grads, exp_avgs, exp_avg_sqs, state_steps):
            assert s.dtype == torch.float32 and s.dim() == 0
            t = s.item()
            p.mul_(1 - lr * weight_decay)
            m.lerp_(g, 1 - beta1)
            v.lerp_(g * g, 1 - beta2)
            p.sub_(lr / (1 - beta1 ** t) * torch.atan2(m, v.sqrt() / math.sqrt(1 - beta2 ** t)))

    monkeypatch.setattr(optim, "_fused_backend", lambda: SimpleNamespace(adam_atan2_cuda_impl_=adam_atan2_cuda_impl_))
    g = torch.Generator().manual_seed(0)
    p0 = torch.randn(7, generator=g)
    grads = [torch.randn(7, generator=g) * 10 ** (k - 3) for k in range(6)]
    param = torch.nn.Parameter(p0.clone())
    opt = AdamATan2([param], lr=0.01, betas=(0.9, 0.95), weight_decay=0.1)
    param.grad = grads[0]
    opt.step()              # on the CPU: the fallback, which also makes the state
    assert calls == []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.Tensor, "device", property(lambda self: torch.device("cuda")))
        for grad in grads[1:]:
            param.grad = grad
            opt.step()
    assert calls == [[2.0], [3.0], [4.0], [5.0], [6.0]]
    p, _, _ = hand_adam_atan2(p0.double(), [x.double() for x in grads], 0.01, 0.9, 0.95, 0.1)
    assert torch.allclose(param.double(), torch.tensor(p, dtype=torch.float64), atol=2e-6, rtol=0)


@pytest.mark.skipif(not (torch.cuda.is_available() and fused_backend_available()),
                    reason="needs CUDA and the adam_atan2 backend")
def test_fused_kernel_matches_fallback_on_gpu():
    """Ten steps of the fused kernel equal the fallback's; halfway the fused optimizer is saved,
    read back with map_location="cpu" (as checkpoints are) and continued."""
    import io
    torch.manual_seed(0)
    fused_p = torch.nn.Parameter(torch.randn(1000, device="cuda"))
    ref_p = torch.nn.Parameter(fused_p.detach().cpu().clone())
    fused = AdamATan2([fused_p], lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    ref = AdamATan2([ref_p], lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    for i in range(10):
        if i == 5:
            buffer = io.BytesIO()
            torch.save(fused.state_dict(), buffer)
            buffer.seek(0)
            fused = AdamATan2([fused_p], lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
            fused.load_state_dict(torch.load(buffer, map_location="cpu", weights_only=True))
        grad = torch.randn(1000) * 1e-3
        fused_p.grad, ref_p.grad = grad.cuda(), grad.clone()
        fused.step()
        ref.step()
    assert torch.allclose(fused_p.cpu(), ref_p, atol=1e-6)
    assert fused.state[fused_p]["step"].item() == 10
