"""The whole model under DeepLoop scaling against a naive float64 HRM written from DESIGN.md alone
(one row at a time, RoPE as a complex rotation of the pairs (i, i + d/2), explicit per-head
attention, a flat call schedule with grad on the last L and H calls only, stablemax from its
definition): evaluation, one training ACT step, its loss, Q target and every gradient.

Unlike tests/test_model_reference.py (the published HRM, alpha = 1) this runs with alpha != 1,
uneven cycles (H_cycles 2, L_cycles 3) and a puzzle row that does not fill its last token."""
from __future__ import annotations

import math

import torch

from hrm.config import ArchConfig
from hrm.loss import ACTLossHead
from hrm.model import HRM

HIDDEN, HEADS, NDIM, SEQ, VOCAB, IDS = 16, 2, 40, 6, 12, 5
PUZZLE_TOKENS = 3                    # ceil(40 / 16), the last 8 entries zero


def _norm(x):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5)


def _rope(x):
    length, dim = x.shape
    half = dim // 2
    freq = 10000.0 ** (-2 * torch.arange(half, dtype=torch.float64) / dim)
    angle = torch.arange(length, dtype=torch.float64)[:, None] * freq[None]
    z = torch.complex(x[:, :half], x[:, half:]) * torch.exp(1j * angle)
    return torch.cat([z.real, z.imag], -1)


def _attention(x, w_qkv, w_o):
    d = HIDDEN // HEADS
    q, k, v = (x @ w_qkv[i * HIDDEN:(i + 1) * HIDDEN].T for i in range(3))
    heads = []
    for h in range(HEADS):
        cols = slice(h * d, (h + 1) * d)
        scores = _rope(q[:, cols]) @ _rope(k[:, cols]).T / math.sqrt(d)
        heads.append(torch.softmax(scores, -1) @ v[:, cols])
    return torch.cat(heads, -1) @ w_o.T


def _swiglu(x, w_gate_up, w_down):
    inner = w_down.shape[1]
    gate, up = (x @ w_gate_up.T)[:, :inner], (x @ w_gate_up.T)[:, inner:]
    return (gate * torch.sigmoid(gate) * up) @ w_down.T


def _module(w, name, blocks, alpha, state, injection):
    x = state + injection
    for i in range(blocks):
        p = lambda s: w[f"{name}.blocks.{i}.{s}.weight"]  # noqa: E731
        x = _norm(alpha * x + _attention(x, p("attn.qkv_proj"), p("attn.o_proj")))
        x = _norm(alpha * x + _swiglu(x, p("mlp.gate_up_proj"), p("mlp.down_proj")))
    return x


def _embed(w, inputs, identifier):
    tokens = w["token_embedding.weight"][inputs.long()]
    row = torch.zeros(PUZZLE_TOKENS * HIDDEN, dtype=torch.float64)
    row[:NDIM] = w["puzzle_embedding.table"][int(identifier)]
    return math.sqrt(HIDDEN) * torch.cat([row.view(PUZZLE_TOKENS, HIDDEN), tokens])


def _segment(w, alpha, z_H, z_L, x, grad):
    calls = (["L"] * 3 + ["H"]) * 2
    for i, call in enumerate(calls):
        with torch.set_grad_enabled(grad and i >= len(calls) - 2):
            if call == "L":
                z_L = _module(w, "L_module", 2, alpha, z_L, z_H + x)
            else:
                z_H = _module(w, "H_module", 1, alpha, z_H, z_L)
    return z_H, z_L


def _heads(w, z_H):
    return z_H[PUZZLE_TOKENS:] @ w["lm_head.weight"].T, z_H[0] @ w["q_head.weight"].T + w["q_head.bias"]


def _bce(logit, target):
    return -(target * torch.log(torch.sigmoid(logit)) + (1 - target) * torch.log(1 - torch.sigmoid(logit)))


def test_model_equals_a_naive_float64_hrm_with_deeploop_scaling():
    torch.manual_seed(0)
    arch = ArchConfig(hidden_size=HIDDEN, num_heads=HEADS, expansion=2, H_layers=1, L_layers=2, H_cycles=2,
                      L_cycles=3, halt_max_steps=3, halt_exploration_prob=0.0, puzzle_emb_ndim=NDIM,
                      scaling=dict(rule="deeploop"))
    model = HRM(arch, VOCAB, SEQ, IDS, verbose=False)
    alpha = math.sqrt(2 * (1 + 3 * 2))        # M_g = 2 (K_H + C_L K_L) = 14, N_g = 7, alpha = sqrt(2 N_g)
    assert model.scaling["L"]["alpha"] == model.scaling["H"]["alpha"] == alpha
    assert model.puzzle_tokens == PUZZLE_TOKENS
    with torch.no_grad():                     # trained-looking Q head and puzzle rows
        model.q_head.weight.normal_(0, 0.3)
        model.q_head.bias.copy_(torch.tensor([0.2, -0.1]))
        model.puzzle_embedding.table.normal_(0, 1.0)
    weights = {k: v.detach().double().clone() for k, v in model.state_dict().items()}
    g = torch.Generator().manual_seed(1)
    batch = {"inputs": torch.randint(0, VOCAB, (3, SEQ), generator=g, dtype=torch.int32),
             "labels": torch.randint(0, VOCAB, (3, SEQ), generator=g),
             "puzzle_identifiers": torch.tensor([1, 4, 2], dtype=torch.int32)}
    batch["labels"][0, :2] = -100
    batch["labels"][2] = -100                 # a row without labels: exactly correct, lm loss 0

    def start():
        size = (SEQ + PUZZLE_TOKENS, HIDDEN)
        return weights["H_init"].expand(size).clone(), weights["L_init"].expand(size).clone()

    # evaluation: reset once, exactly halt_max_steps segments, the last one's outputs
    out = model.predict(batch)
    for b in range(3):
        x = _embed(weights, batch["inputs"][b], batch["puzzle_identifiers"][b])
        z_H, z_L = start()
        for _ in range(3):
            z_H, z_L = _segment(weights, alpha, z_H, z_L, x, grad=False)
        logits, q = _heads(weights, z_H)
        torch.testing.assert_close(out["logits"][b].double(), logits, atol=2e-4, rtol=1e-4)
        torch.testing.assert_close(out["q_halt_logits"][b].double(), q[0], atol=2e-4, rtol=1e-4)

    # one training ACT step from the initial carry: loss, Q target, one-step gradients
    model.train()
    head = ACTLossHead(model)
    result = head(head.initial_carry(batch), batch)
    result.loss.backward()
    w = {k: v.clone().requires_grad_(not k.endswith("_init")) for k, v in weights.items()}
    total = 0.0
    for b in range(3):
        x = _embed(w, batch["inputs"][b], batch["puzzle_identifiers"][b])
        z_H, z_L = _segment(w, alpha, *start(), x, grad=True)
        logits, q = _heads(w, z_H)
        with torch.no_grad():                 # step 1 of 3, not the last: max(halt, continue) of the next segment
            next_H, _ = _segment(w, alpha, z_H.detach(), z_L.detach(), x.detach(), grad=False)
            target = torch.sigmoid(_heads(w, next_H)[1].max())
        torch.testing.assert_close(result.outputs["target_q_continue"][b].double(), target, atol=2e-5, rtol=1e-5)
        labels = batch["labels"][b]
        valid = labels != -100
        s = torch.where(logits >= 0, logits + 1, 1 / (1 - torch.clamp(logits, max=0)))
        log_p = torch.log(s / s.sum(-1, keepdim=True))[torch.arange(SEQ), torch.where(valid, labels, 0)]
        lm = -(log_p * valid).sum() / max(int(valid.sum()), 1)
        exact = float(((logits.argmax(-1) == labels) | ~valid).all())
        total = total + lm + 0.5 * (_bce(q[0], exact) + _bce(q[1], target))
    assert abs(result.loss.item() - total.item()) < 1e-5 * abs(total.item())
    total.backward()
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad.double(), w[name].grad, atol=1e-4, rtol=1e-3, msg=name)
    rows = model.puzzle_embedding
    dense = torch.zeros(IDS, NDIM, dtype=torch.float64).index_add_(0, rows.batch_ids.long(), rows.batch_rows.grad.double())
    torch.testing.assert_close(dense, w["puzzle_embedding.table"].grad, atol=1e-4, rtol=1e-3)
