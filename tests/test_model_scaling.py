"""Residual scaling (items 6-9): the numbers, where alpha and beta act, the pre-norm ablation, logging."""
from __future__ import annotations

import math

import pytest
import torch

from hrm.checkpoint import original_key_map
from hrm.config import ArchConfig
from hrm.model import HRM
from hrm.scaling import derive_scaling, module_loops, visit_counts
from tests.test_model_reference import INNER, original_init, ref_level, ref_norm


def arch_with(**scaling):
    return ArchConfig(scaling=scaling)  # the published HRM sizes: K_H = K_L = 4, C_L = 2, C = 2


# ------------------------------------------------------------------------------- item 6: numbers
def test_deeploop_paper_count_on_the_published_architecture():
    s = derive_scaling(arch_with(rule="deeploop"))
    for module in ("H", "L"):
        m = s[module]
        assert (m["M"], m["N"], m["p"], m["depth_count"]) == (24, 12, 0.5, "paper")
        assert m["alpha"] == pytest.approx(4.8990, abs=5e-5)
        assert m["beta"] == pytest.approx(0.10206, abs=5e-6)
        assert m["alpha"] == pytest.approx(math.sqrt(24), rel=1e-12)
        assert m["beta"] == pytest.approx(1 / math.sqrt(96), rel=1e-12)


def test_deepnorm_paper_count():
    m = derive_scaling(arch_with(rule="deepnorm"))["H"]
    assert m["alpha"] == pytest.approx(24 ** 0.25, rel=1e-12) == pytest.approx(2.2134, abs=5e-5)
    assert m["beta"] == pytest.approx(96 ** -0.25, rel=1e-12)


@pytest.mark.parametrize("count, M", [("paper", 24), ("gradient_visible", 16), ("forward", 48)])
def test_depth_counts(count, M):
    assert visit_counts(ArchConfig(), count) == (M, M // 2)
    m = derive_scaling(arch_with(rule="deeploop", depth_count=count))["L"]
    assert (m["M"], m["N"]) == (M, M // 2)
    assert m["alpha"] == pytest.approx(math.sqrt(2 * M / 2)) and m["beta"] == pytest.approx((8 * M / 2) ** -0.5)


def test_depth_counts_of_an_uneven_architecture():
    arch = ArchConfig(H_layers=3, L_layers=2, H_cycles=3, L_cycles=4)
    assert visit_counts(arch, "paper") == (2 * (3 + 4 * 2), 11)
    assert visit_counts(arch, "gradient_visible") == (2 * (3 + 2), 5)
    assert visit_counts(arch, "forward") == (2 * 3 * (3 + 4 * 2), 33)


def test_none_and_custom_rules():
    m = derive_scaling(arch_with(rule="none"))["H"]
    assert (m["alpha"], m["beta"], m["eps"]) == (1.0, 1.0, None)
    m = derive_scaling(arch_with(rule="custom", p=0.3, c=3.0, d=5.0))["L"]
    assert m["alpha"] == pytest.approx(36 ** 0.3) and m["beta"] == pytest.approx(60 ** -0.3)


def test_per_module_overrides():
    s = derive_scaling(arch_with(rule="deeploop", H=dict(p=0.25), L=dict(depth_count="forward", c=4.0)))
    assert s["H"]["rule"] == "custom" and s["H"]["alpha"] == pytest.approx(24 ** 0.25)
    assert s["L"]["rule"] == "deeploop" and s["L"]["N"] == 24
    assert s["L"]["alpha"] == pytest.approx(math.sqrt(4 * 24)) and s["L"]["beta"] == pytest.approx(192 ** -0.5)
    s = derive_scaling(arch_with(rule="none", L=dict(rule="deeploop")))
    assert s["H"]["alpha"] == 1.0 and s["L"]["alpha"] == pytest.approx(math.sqrt(24))


# -------------------------------------------------------------------- item 7: where alpha/beta act
def test_initial_standard_deviations_follow_beta():
    torch.manual_seed(0)
    hidden, inner = 256, 768
    arch = ArchConfig(hidden_size=hidden, num_heads=4, H_layers=1, L_layers=1, puzzle_emb_ndim=0,
                      scaling=dict(rule="deeploop", L=dict(p=0.25)))
    model = HRM(arch, 12, 8, 1, verbose=False)
    for module, p in (("H", 0.5), ("L", 0.25)):
        N = 3  # paper count: 2 * (1 + 2 * 1) / 2
        beta = (8 * N) ** -p
        block = getattr(model, f"{module}_module").blocks[0]
        qkv = block.attn.qkv_proj.weight
        expected = {
            "q": (qkv[:hidden], hidden ** -0.5), "k": (qkv[hidden:2 * hidden], hidden ** -0.5),
            "v": (qkv[2 * hidden:], beta * hidden ** -0.5),
            "o": (block.attn.o_proj.weight, beta * hidden ** -0.5),
            "gate|up": (block.mlp.gate_up_proj.weight, beta * hidden ** -0.5),
            "down": (block.mlp.down_proj.weight, beta * inner ** -0.5),
        }
        # The draw is a normal truncated at +-2 of its own sigma, widened so the *truncated* std
        # is the target: sigma = std / sqrt(1 - 4 phi(2) / erf(sqrt 2)), about 1.137 std.
        phi2 = math.exp(-2) / math.sqrt(2 * math.pi)
        sigma_over_std = 1 / math.sqrt(1 - 4 * phi2 / math.erf(math.sqrt(2)))
        for name, (w, std) in expected.items():
            assert w.std().item() == pytest.approx(std, rel=0.02), (module, name)
            bound = 2 * sigma_over_std * std
            assert 0.98 * bound <= w.abs().max().item() <= bound * (1 + 1e-6), (module, name)


def test_rule_none_is_bit_identical_to_the_published_initialisation():
    for pos in ("rope", "learned"):
        cfg = dict(hidden_size=64, num_heads=2, expansion=4, H_layers=2, L_layers=1, H_cycles=2,
                   L_cycles=2, halt_max_steps=2, halt_exploration_prob=0.1, puzzle_emb_ndim=64,
                   pos_encodings=pos)
        torch.manual_seed(123)
        model = HRM(ArchConfig(**cfg, scaling=dict(rule="none")), 12, 10, 5, verbose=False)
        torch.manual_seed(123)
        reference = original_init(cfg, 12, 10, 5)
        ours = model.state_dict()
        mapping = original_key_map(model.arch)
        assert set(mapping) == set(reference)
        for key, value in reference.items():
            assert torch.equal(ours[mapping[key]], value), key


def test_deeploop_init_is_the_unscaled_init_times_beta_on_branch_matrices():
    arch = dict(hidden_size=64, num_heads=2, H_layers=1, L_layers=2, puzzle_emb_ndim=64)
    torch.manual_seed(7)
    plain = HRM(ArchConfig(**arch), 12, 10, 5, verbose=False).state_dict()
    torch.manual_seed(7)
    scaled_model = HRM(ArchConfig(**arch, scaling=dict(rule="deeploop")), 12, 10, 5, verbose=False)
    scaled = scaled_model.state_dict()
    beta = scaled_model.scaling["H"]["beta"]
    assert beta < 1
    for key, w in plain.items():
        if key.endswith("qkv_proj.weight"):
            assert torch.equal(scaled[key][:128], w[:128])          # q and k keep gain 1
            assert torch.equal(scaled[key][128:], w[128:] * beta)   # v scaled
        elif key.endswith(("o_proj.weight", "gate_up_proj.weight", "down_proj.weight")):
            assert torch.equal(scaled[key], w * beta), key
        else:
            assert torch.equal(scaled[key], w), key                 # embeddings, heads, inits


def _as_original(model):
    inverse = {v: k for k, v in original_key_map(model.arch).items()}
    return {inverse[k]: v for k, v in model.state_dict().items() if k in inverse}


@pytest.mark.parametrize("rule", ["deeploop", "deepnorm"])
def test_alpha_scales_the_skip_path_of_every_sublayer_not_the_injection(rule):
    torch.manual_seed(0)
    arch = ArchConfig(hidden_size=32, num_heads=2, H_layers=2, L_layers=2, puzzle_emb_ndim=32,
                      scaling=dict(rule=rule, H=dict(p=0.75)))
    model = HRM(arch, 12, 6, 3, verbose=False)
    sd = _as_original(model)
    cfg = arch.model_dump()
    z, injection = torch.randn(2, 7, 32), torch.randn(2, 7, 32)
    rope = model.rope(7)
    for tag, level in (("H", "H_level"), ("L", "L_level")):
        alpha = model.scaling[tag]["alpha"]
        ours = getattr(model, f"{tag}_module")(z, injection, rope)
        expected = ref_level(sd, cfg, level, z, injection, alpha=alpha)
        assert torch.allclose(ours, expected, atol=1e-5)
        wrong = ref_level(sd, cfg, level, z, injection, alpha=1.0)
        assert not torch.allclose(ours, wrong, atol=1e-3)
    assert model.scaling["H"]["alpha"] != model.scaling["L"]["alpha"]


# ----------------------------------------------------------------------- item 8: pre-norm ablation
def test_prenorm_eps_per_module_and_count():
    arch = arch_with(rule="prenorm_1_over_n", **{"lambda": 2.0})
    s = derive_scaling(arch)
    # paper count: H loops once, L loops C_L = 2 times; 4 unique layers each
    assert s["H"]["eps"] == pytest.approx(2.0 / (1 * 2)) and s["L"]["eps"] == pytest.approx(2.0 / (2 * 2))
    assert s["H"]["alpha"] == s["H"]["beta"] == 1.0
    fwd = derive_scaling(arch_with(rule="prenorm_1_over_n", depth_count="forward"))
    assert fwd["H"]["eps"] == pytest.approx(1 / (2 * 2)) and fwd["L"]["eps"] == pytest.approx(1 / (4 * 2))
    assert module_loops(ArchConfig(), "L", "gradient_visible") == 1


def test_prenorm_block_is_h_plus_eps_f_of_norm_h():
    torch.manual_seed(0)
    arch = ArchConfig(hidden_size=32, num_heads=2, H_layers=1, L_layers=3, puzzle_emb_ndim=32,
                      scaling=dict(rule="prenorm_1_over_n"))
    model = HRM(arch, 12, 6, 3, verbose=False)
    sd = _as_original(model)
    eps = model.scaling["L"]["eps"]
    assert eps == pytest.approx(1 / (2 * math.sqrt(3)))
    z, injection = torch.randn(2, 7, 32), torch.randn(2, 7, 32)
    h = z + injection
    from tests.test_model_reference import ref_attention, ref_mlp
    for i in range(3):
        w = lambda n: sd[f"{INNER}L_level.layers.{i}.{n}.weight"]  # noqa: E731
        h = h + eps * ref_attention(ref_norm(h), w("self_attn.qkv_proj"), w("self_attn.o_proj"), 2, 10000.0)
        h = h + eps * ref_mlp(ref_norm(h), w("mlp.gate_up_proj"), w("mlp.down_proj"))
    assert torch.allclose(model.L_module(z, injection, model.rope(7)), h, atol=1e-5)
    # The unnormalised pre-norm H state is normalised before the heads.
    z_H = 3 * torch.randn(2, 7, 32)
    logits, _, _ = model.heads(z_H)
    assert torch.allclose(logits, ref_norm(z_H[:, 1:]) @ model.lm_head.weight.T, atol=1e-5)


# ------------------------------------------------------------------------------ item 9: reporting
def test_scaling_printed_once_at_construction_and_returned(capsys):
    arch = ArchConfig(hidden_size=32, num_heads=2, H_layers=1, L_layers=1, puzzle_emb_ndim=0,
                      scaling=dict(rule="deeploop", depth_count="gradient_visible"))
    model = HRM(arch, 12, 4, 1)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    assert "depth_count=gradient_visible" in lines[0] and "deeploop" in lines[0]
    assert "alpha=2" in lines[0]  # N = 2: alpha = sqrt(4) = 2
    assert model.scaling == derive_scaling(arch)
    assert set(model.scaling["H"]) == {"rule", "depth_count", "M", "N", "p", "c", "d", "alpha", "beta",
                                       "loops", "layers", "eps"}


def test_compiled_blocks_take_alpha_as_an_input_so_every_alpha_shares_one_graph():
    """Under torch.compile alpha is a tensor input, not a constant: runs that differ only in the
    scaling (a p sweep; hrm_v1 against hrm_deeploop) trace the same graph and reuse the compile
    cache. The compiled block still computes RMSNorm(alpha * x + f(x)) with its own alpha."""
    import torch._dynamo

    from hrm.reasoning import ReasoningBlock

    graphs = []

    def recording_backend(gm, example_inputs):
        graphs.append(gm.code)
        return gm.forward

    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(1))
    for alpha in (1.0, 2.0, 4.899):
        torch.manual_seed(0)
        block = ReasoningBlock(16, 2, 32, 1e-5, alpha=alpha)
        assert "alpha_tensor" not in block.state_dict()          # derived from the config, not saved
        torch._dynamo.reset()
        with torch.no_grad():
            compiled = torch.compile(block, backend=recording_backend, dynamic=False)(x, None)
            eager = block(x, None)
        torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-5)
    torch._dynamo.reset()
    assert len(graphs) == 3 and graphs[0] == graphs[1] == graphs[2]


def test_a_negative_exponent_is_a_member_of_the_family():
    """DESIGN.md puts no sign on p: p < 0 down-weights the skip path (alpha < 1, beta > 1)."""
    m = derive_scaling(arch_with(rule="custom", p=-0.5))["H"]
    assert m["alpha"] == pytest.approx(24 ** -0.5) and m["beta"] == pytest.approx(96 ** 0.5)
