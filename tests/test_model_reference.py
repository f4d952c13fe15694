"""An independent, deliberately naive re-implementation of the published HRM, for other tests.

It works directly on a state dict in the *original* code's key layout (``model.inner.H_level.layers.0
.self_attn.qkv_proj.weight`` ...), with explicit einsum attention, rotation-by-pairs RoPE, a flat
schedule of module calls and a float64 stablemax, so it shares no code and little structure with
``hrm``. It follows DESIGN.md ("Model (hrm)") and the published code's behaviour. The tests at the
bottom check the reference itself against hand-worked numbers.
"""
from __future__ import annotations

import math

import torch

INNER = "model.inner."
ORIGINAL_NAME = "hrm.hrm_act_v1@HierarchicalReasoningModel_ACTV1"


# ------------------------------------------------------------------------------ initialisation
def jax_truncated_normal(shape, std, dtype=torch.float32):
    """Truncated normal as JAX/flax draws it: inverse CDF between the +-2 sigma erf bounds."""
    t = torch.empty(shape, dtype=dtype)
    if std == 0:
        return t.zero_()
    lower, upper = -2.0, 2.0
    a, b = math.erf(lower / math.sqrt(2)), math.erf(upper / math.sqrt(2))
    z = (b - a) / 2
    c = (2 * math.pi) ** -0.5
    pdf_u, pdf_l = c * math.exp(-0.5 * lower ** 2), c * math.exp(-0.5 * upper ** 2)
    comp_std = std / math.sqrt(1 - (upper * pdf_u - lower * pdf_l) / z - ((pdf_u - pdf_l) / z) ** 2)
    t.uniform_(a, b)
    t = torch.erfinv(t) * (math.sqrt(2) * comp_std)
    return torch.clip(t, lower * comp_std, upper * comp_std)


def original_init(cfg: dict, vocab: int, seq_len: int, num_ids: int) -> dict:
    """Weights in the original layout, drawn in the published constructor's order."""
    h, inter = cfg["hidden_size"], _inter(cfg)
    sd = {}
    sd["embed_tokens.embedding_weight"] = jax_truncated_normal((vocab, h), 1 / math.sqrt(h))
    sd["lm_head.weight"] = jax_truncated_normal((vocab, h), 1 / math.sqrt(h))
    jax_truncated_normal((2, h), 1 / math.sqrt(h))  # q_head weight: drawn, then zeroed
    sd["q_head.weight"] = torch.zeros(2, h)
    sd["q_head.bias"] = torch.full((2,), -5.0)
    p_len = -(-cfg["puzzle_emb_ndim"] // h)
    if cfg["puzzle_emb_ndim"] > 0:
        sd["puzzle_emb.weights"] = torch.zeros(num_ids, cfg["puzzle_emb_ndim"])
    if cfg["pos_encodings"] == "learned":
        sd["embed_pos.embedding_weight"] = jax_truncated_normal((seq_len + p_len, h), 1 / math.sqrt(h))
    for level, n in (("H_level", cfg["H_layers"]), ("L_level", cfg["L_layers"])):
        for i in range(n):
            base = f"{level}.layers.{i}."
            sd[base + "self_attn.qkv_proj.weight"] = jax_truncated_normal((3 * h, h), h ** -0.5)
            sd[base + "self_attn.o_proj.weight"] = jax_truncated_normal((h, h), h ** -0.5)
            sd[base + "mlp.gate_up_proj.weight"] = jax_truncated_normal((2 * inter, h), h ** -0.5)
            sd[base + "mlp.down_proj.weight"] = jax_truncated_normal((h, inter), inter ** -0.5)
    sd["H_init"] = jax_truncated_normal((h,), 1.0)
    sd["L_init"] = jax_truncated_normal((h,), 1.0)
    return {INNER + k: v for k, v in sd.items()}


def random_original_weights(cfg: dict, vocab: int, seq_len: int, num_ids: int, seed: int) -> dict:
    """Arbitrary (trained-looking) weights in the original layout: q head and puzzle rows non-zero."""
    g = torch.Generator().manual_seed(seed)
    sd = {}
    for k, v in original_init(cfg, vocab, seq_len, num_ids).items():
        if k.endswith(("q_head.weight", "puzzle_emb.weights")):
            std = 0.3
        else:
            std = v.shape[-1] ** -0.5 if v.dim() > 1 else 1.0
        sd[k] = torch.randn(v.shape, generator=g) * std
    sd[INNER + "q_head.bias"] = torch.tensor([0.1, -0.1])
    sd[INNER + "H_init"] = torch.randn(cfg["hidden_size"], generator=g)
    sd[INNER + "L_init"] = torch.randn(cfg["hidden_size"], generator=g)
    return sd


def _inter(cfg):
    return (-(round(cfg["expansion"] * cfg["hidden_size"] * 2 / 3) // -256)) * 256


# ------------------------------------------------------------------------------------- forward
def ref_norm(x, eps=1e-5):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)


def ref_rope(x, theta):
    """Rotate dimension pairs (i, i + D/2) of x [B, S, H, D] by angle pos * theta^(-2i/D)."""
    S, D = x.shape[1], x.shape[-1]
    freq = theta ** (-torch.arange(0, D, 2, dtype=torch.float32) / D)
    angle = torch.arange(S, dtype=torch.float32)[:, None] * freq[None, :]      # [S, D/2]
    cos, sin = angle.cos()[None, :, None, :], angle.sin()[None, :, None, :]
    a, b = x[..., : D // 2], x[..., D // 2:]
    return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)


def ref_attention(x, w_qkv, w_o, heads, rope_theta):
    B, S, h = x.shape
    d = h // heads
    qkv = x @ w_qkv.T
    q, k, v = (qkv[..., i * h:(i + 1) * h].reshape(B, S, heads, d) for i in range(3))
    if rope_theta is not None:
        q, k = ref_rope(q, rope_theta), ref_rope(k, rope_theta)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(d)
    out = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v)
    return out.reshape(B, S, h) @ w_o.T


def ref_mlp(x, w_gate_up, w_down):
    inter = w_down.shape[1]
    hidden = x @ w_gate_up.T
    gate, up = hidden[..., :inter], hidden[..., inter:]
    return (gate * torch.sigmoid(gate) * up) @ w_down.T


def ref_level(sd, cfg, level, z, injection, alpha=1.0):
    n = cfg["H_layers"] if level == "H_level" else cfg["L_layers"]
    theta = cfg.get("rope_theta", 10000.0) if cfg["pos_encodings"] == "rope" else None
    z = z + injection
    for i in range(n):
        w = lambda name: sd[f"{INNER}{level}.layers.{i}.{name}.weight"]  # noqa: E731
        z = ref_norm(alpha * z + ref_attention(z, w("self_attn.qkv_proj"), w("self_attn.o_proj"),
                                               cfg["num_heads"], theta))
        z = ref_norm(alpha * z + ref_mlp(z, w("mlp.gate_up_proj"), w("mlp.down_proj")))
    return z


def ref_embed(sd, cfg, inputs, puzzle_ids):
    h = cfg["hidden_size"]
    x = sd[INNER + "embed_tokens.embedding_weight"][inputs.long()]
    if cfg["puzzle_emb_ndim"] > 0:
        p_len = -(-cfg["puzzle_emb_ndim"] // h)
        rows = sd[INNER + "puzzle_emb.weights"][puzzle_ids.long()]
        padded = torch.zeros(rows.shape[0], p_len * h, dtype=rows.dtype)
        padded[:, : rows.shape[1]] = rows
        x = torch.cat((padded.reshape(-1, p_len, h), x), dim=1)
    if cfg["pos_encodings"] == "learned":
        x = (x + sd[INNER + "embed_pos.embedding_weight"]) / math.sqrt(2)
    return x * math.sqrt(h)


def ref_segment(sd, cfg, z_H, z_L, x, alpha=1.0):
    """A flat schedule of calls; every call but the last L and last H runs without gradient."""
    schedule = []
    for _ in range(cfg["H_cycles"]):
        schedule += ["L"] * cfg["L_cycles"] + ["H"]
    for i, call in enumerate(schedule):
        with torch.set_grad_enabled(i >= len(schedule) - 2 and torch.is_grad_enabled()):
            if call == "L":
                z_L = ref_level(sd, cfg, "L_level", z_L, z_H + x, alpha)
            else:
                z_H = ref_level(sd, cfg, "H_level", z_H, z_L, alpha)
    return z_H, z_L


def ref_heads(sd, cfg, z_H):
    p_len = -(-cfg["puzzle_emb_ndim"] // cfg["hidden_size"])
    logits = z_H[:, p_len:] @ sd[INNER + "lm_head.weight"].T
    q = z_H[:, 0] @ sd[INNER + "q_head.weight"].T + sd[INNER + "q_head.bias"]
    return logits, q[:, 0], q[:, 1]


def ref_act_step(sd, cfg, carry, batch, training):
    """One ACT step of the published wrapper. carry: dict z_H, z_L, steps, halted, data."""
    halted = carry["halted"]
    keep = halted.view(-1, 1, 1)
    z_H = torch.where(keep, sd[INNER + "H_init"].float(), carry["z_H"])
    z_L = torch.where(keep, sd[INNER + "L_init"].float(), carry["z_L"])
    steps = torch.where(halted, torch.zeros_like(carry["steps"]), carry["steps"])
    data = {k: torch.where(halted.view(-1, *[1] * (v.dim() - 1)), batch[k], v)
            for k, v in carry["data"].items()}
    x = ref_embed(sd, cfg, data["inputs"], data["puzzle_identifiers"])
    z_H, z_L = ref_segment(sd, cfg, z_H, z_L, x)
    logits, q_halt, q_cont = ref_heads(sd, cfg, z_H)
    out = {"logits": logits, "q_halt_logits": q_halt, "q_continue_logits": q_cont}
    z_H, z_L = z_H.detach(), z_L.detach()
    with torch.no_grad():
        steps = steps + 1
        last = steps >= cfg["halt_max_steps"]
        new_halted = last
        if training and cfg["halt_max_steps"] > 1:
            new_halted = new_halted | (q_halt > q_cont)
            explore = torch.rand_like(q_halt) < cfg["halt_exploration_prob"]
            minimum = explore * torch.randint_like(steps, low=2, high=cfg["halt_max_steps"] + 1)
            new_halted = new_halted & (steps >= minimum)
            nH, _ = ref_segment(sd, cfg, z_H, z_L, x)
            _, nq_halt, nq_cont = ref_heads(sd, cfg, nH)
            out["target_q_continue"] = torch.sigmoid(torch.where(last, nq_halt, torch.maximum(nq_halt, nq_cont)))
    return {"z_H": z_H, "z_L": z_L, "steps": steps, "halted": new_halted, "data": data}, out


def ref_stablemax_ce(logits, labels):
    x = logits.double()
    s = torch.where(x < 0, 1 / (1 - x), x + 1)
    logp = torch.log(s / s.sum(-1, keepdim=True))
    valid = labels != -100
    picked = torch.gather(logp, -1, torch.where(valid, labels, 0).long()[..., None])[..., 0]
    return torch.where(valid, -picked, torch.zeros_like(picked))


def ref_loss(out, labels, halted, steps, loss="stablemax"):
    valid = labels != -100
    counts = valid.sum(-1)
    if loss == "stablemax":
        per_token = ref_stablemax_ce(out["logits"], labels)
    else:
        per_token = torch.nn.functional.cross_entropy(
            out["logits"].float().transpose(1, 2), torch.where(valid, labels, 0).long(),
            reduction="none") * valid
    lm = (per_token.sum(-1) / counts.clamp(min=1)).sum()
    correct = valid & (out["logits"].argmax(-1) == labels)
    exact = correct.sum(-1) == counts
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    q_halt = bce(out["q_halt_logits"], exact.float(), reduction="sum")
    total_q = q_halt
    q_cont = None
    if "target_q_continue" in out:
        q_cont = bce(out["q_continue_logits"], out["target_q_continue"], reduction="sum")
        total_q = total_q + q_cont
    counted = halted & (counts > 0)
    metrics = {"count": counted.sum().item(),
               "accuracy": (correct.sum(-1) / counts.clamp(min=1))[counted].sum().item(),
               "exact_accuracy": (counted & exact).sum().item(),
               "q_halt_accuracy": (counted & ((out["q_halt_logits"] >= 0) == exact)).sum().item(),
               "steps": steps[counted].sum().item(),
               "lm_loss": lm.item(), "q_halt_loss": q_halt.item()}
    if q_cont is not None:
        metrics["q_continue_loss"] = q_cont.item()
    return lm + 0.5 * total_q, metrics


def original_config(cfg: dict, data_path: str = "data/none", loss="stablemax") -> dict:
    """An ``all_config.yaml`` as the published pretrain.py dumps it (PretrainConfig.model_dump())."""
    arch = {"name": ORIGINAL_NAME,
            "loss": {"name": "losses@ACTLossHead", "loss_type": f"{loss}_cross_entropy"}}
    arch.update({k: cfg[k] for k in ("halt_exploration_prob", "halt_max_steps", "H_cycles", "L_cycles",
                                     "H_layers", "L_layers", "hidden_size", "num_heads", "expansion",
                                     "puzzle_emb_ndim", "pos_encodings")})
    return {"arch": arch, "data_path": data_path, "global_batch_size": 768, "epochs": 100000,
            "lr": 1e-4, "lr_min_ratio": 1.0, "lr_warmup_steps": 2000, "weight_decay": 0.1,
            "beta1": 0.9, "beta2": 0.95, "puzzle_emb_lr": 1e-2, "puzzle_emb_weight_decay": 0.1,
            "project_name": "Arc-aug-1000 ACT-torch", "run_name": "HierarchicalReasoningModel_ACTV1 x",
            "checkpoint_path": "checkpoints/x", "seed": 0, "checkpoint_every_eval": True,
            "eval_interval": 10000, "eval_save_outputs": []}


# ------------------------------------------------------------------ checks of the reference itself
def test_reference_rope_is_a_rotation_by_position_times_frequency():
    x = torch.zeros(1, 3, 1, 4)
    x[0, :, 0, 0] = 1.0  # unit vector on dimension 0, paired with dimension 2
    out = ref_rope(x, theta=100.0)
    for pos in range(3):  # pair (0, 2) has frequency 100^0 = 1: angle = pos
        assert torch.allclose(out[0, pos, 0], torch.tensor([math.cos(pos), 0.0, math.sin(pos), 0.0]),
                              atol=1e-6)


def test_reference_stablemax_hand_worked():
    logits = torch.tensor([[[0.0, 1.0, -1.0]]])   # s = [1, 2, 1/2], sum 3.5
    ce = ref_stablemax_ce(logits, torch.tensor([[1]]))
    assert abs(ce.item() - (-math.log(2 / 3.5))) < 1e-12


def test_reference_attention_matches_explicit_loops():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 3, 4, generator=g)
    w_qkv, w_o = torch.randn(12, 4, generator=g), torch.eye(4)
    out = ref_attention(x, w_qkv, w_o, heads=1, rope_theta=None)
    q, k, v = x[0] @ w_qkv[:4].T, x[0] @ w_qkv[4:8].T, x[0] @ w_qkv[8:].T
    for i in range(3):
        weights = [math.exp(float(q[i] @ k[j]) / 2.0) for j in range(3)]
        expected = sum(w * v[j] for j, w in enumerate(weights)) / sum(weights)
        assert torch.allclose(out[0, i], expected, atol=1e-5)
