"""AdamATan2: Adam without epsilon, the ratio m / sqrt(v) replaced by atan2 (arXiv 2407.05872).

Per step t, for every parameter p with gradient g (lr, betas (b1, b2), weight_decay wd):
    p <- p * (1 - lr * wd)                                  decoupled weight decay
    m <- lerp(m, g, 1 - b1);  v <- lerp(v, g^2, 1 - b2)
    p <- p - (lr / (1 - b1^t)) * atan2(m, sqrt(v) / sqrt(1 - b2^t))
No extra scale factors. ``lr`` may be 0 at construction (a schedule sets param_groups[i]["lr"]).

On CUDA, when the ``adam_atan2`` package's compiled backend imports, its fused kernel runs the
update; everywhere else the pure-PyTorch code below does. Both keep the same state (``step`` as a
float32 scalar tensor on the parameter's device, ``exp_avg``, ``exp_avg_sq``), so checkpoints move
between them. The fallback works from the step tensor without reading it on the host.

Public API
----------
``AdamATan2(params, lr=1e-3, betas=(0.9, 0.999), weight_decay=1e-2)``
``fused_backend_available() -> bool``
"""
from __future__ import annotations

import functools

import torch


@functools.cache
def _fused_backend():
    try:
        import adam_atan2_backend  # compiled extension shipped by the adam-atan2 package
        return adam_atan2_backend
    except ImportError:
        return None


def fused_backend_available() -> bool:
    return _fused_backend() is not None


def _reference_update(params, grads, exp_avgs, exp_avg_sqs, steps, lr, beta1, beta2, weight_decay):
    for p, g, m, v, step in zip(params, grads, exp_avgs, exp_avg_sqs, steps):
        if step.device.type == "cpu":
            t = step.item()              # free on the host
            bias1 = 1 - beta1 ** t
            bias2_sqrt = (1 - beta2 ** t) ** 0.5
        else:
            # 0-dim tensors on the device: no host sync inside the step.
            t = step.double()
            bias1 = 1 - beta1 ** t
            bias2_sqrt = (1 - beta2 ** t).sqrt().to(v.dtype)
        p.mul_(1 - lr * weight_decay)
        m.lerp_(g, 1 - beta1)
        v.lerp_(g.square(), 1 - beta2)
        update = torch.atan2(m, v.sqrt() / bias2_sqrt)
        if isinstance(bias1, torch.Tensor):
            p.sub_(update * (lr / bias1).to(p.dtype))
        else:
            # a multiply, not sub_(alpha=...): an absurd lr (> float32 max) then gives inf weights,
            # which the trainer's divergence guard reports, instead of a conversion error here
            p.sub_(update.mul_(lr / bias1))


class AdamATan2(torch.optim.Optimizer):
    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 weight_decay: float = 1e-2):
        if not lr >= 0:
            raise ValueError(f"lr must be >= 0, got {lr}")
        if not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"betas must lie in [0, 1), got {betas}")
        if not weight_decay >= 0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), weight_decay=weight_decay))

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        # torch leaves a loaded "step" where it was loaded (the CPU, for checkpoints read with
        # map_location="cpu"); the fused kernel dereferences it on the parameter's device, and the
        # fallback reads it there without a host sync. Put it back beside its parameter.
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state.get(p)
                if state and "step" in state:
                    state["step"] = state["step"].to(device=p.device, dtype=torch.float32)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params, grads, exp_avgs, exp_avg_sqs, steps = [], [], [], [], []
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("AdamATan2 does not support sparse gradients")
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                params.append(p)
                grads.append(p.grad)
                exp_avgs.append(state["exp_avg"])
                exp_avg_sqs.append(state["exp_avg_sq"])
                steps.append(state["step"])
            if not params:
                continue
            torch._foreach_add_(steps, 1)
            beta1, beta2 = group["betas"]
            lr, weight_decay = float(group["lr"]), group["weight_decay"]
            backend = _fused_backend()
            # The fused kernel takes one device and one dtype per launch.
            buckets: dict = {}
            for i, p in enumerate(params):
                buckets.setdefault((p.device, p.dtype), []).append(i)
            for (device, _), idx in buckets.items():
                lists = [[t[i] for i in idx] for t in (params, grads, exp_avgs, exp_avg_sqs, steps)]
                if backend is not None and device.type == "cuda":
                    backend.adam_atan2_cuda_impl_(*lists, lr, beta1, beta2, weight_decay)
                else:
                    _reference_update(*lists, lr, beta1, beta2, weight_decay)
        return loss
