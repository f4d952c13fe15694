"""ArchConfig / ScalingConfig validation and the YAML presets (loaded through Hydra)."""
from __future__ import annotations

import os
import types
import typing

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from pydantic import ValidationError

from hrm.config import ArchConfig, ModuleScalingOverride, ScalingConfig, resolve_forward_dtype

ARCH_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs", "arch")
PRESETS = ["hrm_v1", "hrm_deeploop", "hrm_deepnorm", "hrm_tiny"]


def compose_arch(name, overrides=()):
    with initialize_config_dir(config_dir=ARCH_DIR, version_base=None):
        cfg = compose(config_name=name, overrides=list(overrides))
    return ArchConfig(**OmegaConf.to_container(cfg, resolve=True))


@pytest.mark.parametrize("name", PRESETS)
def test_presets_mirror_arch_config_field_for_field(name):
    raw = OmegaConf.to_container(OmegaConf.load(os.path.join(ARCH_DIR, f"{name}.yaml")), resolve=True)
    assert set(raw) == set(ArchConfig.model_fields)
    assert set(raw["scaling"]) == {"rule", "p", "c", "d", "depth_count", "lambda", "H", "L"}
    for module in ("H", "L"):
        assert set(raw["scaling"][module]) == {"rule", "p", "c", "d", "depth_count", "lambda"}
    arch = compose_arch(name)
    assert arch.name == name
    assert ArchConfig(**raw) == arch  # the file alone and Hydra agree


@pytest.mark.parametrize("name", PRESETS)
def test_puzzle_emb_ndim_follows_hidden_size_as_published(name):
    """HRM's hrm_v1.yaml says `puzzle_emb_ndim: ${.hidden_size}`: `arch.hidden_size=256` keeps one
    puzzle token. A fixed 512 gave ceil(512/256) = 2 tokens (and hidden 1024 one token half zeros)."""
    with initialize_config_dir(config_dir=os.path.dirname(ARCH_DIR), version_base=None):
        cfg = compose(config_name="cfg_pretrain", overrides=[f"arch={name}", "arch.hidden_size=256"])
    arch = ArchConfig(**OmegaConf.to_container(cfg.arch, resolve=True))
    assert (arch.puzzle_emb_ndim, arch.puzzle_tokens) == (256, 1)
    # a number given for it still wins, in either order
    for overrides in (["puzzle_emb_ndim=0", "hidden_size=128"], ["hidden_size=128", "puzzle_emb_ndim=0"]):
        arch = compose_arch(name, overrides)
        assert (arch.hidden_size, arch.puzzle_emb_ndim, arch.puzzle_tokens) == (128, 0, 0)


def test_arch_config_defaults_are_hrm_v1_yaml():
    """ArchConfig built in Python (tests, notebooks) is the hrm_v1 preset: puzzle_emb_ndim follows
    hidden_size as the preset's `${.hidden_size}` does. A fixed default of 512 gave
    ArchConfig(hidden_size=64) eight puzzle tokens where the same YAML override gives one."""
    assert ArchConfig() == compose_arch("hrm_v1")
    small = ArchConfig(hidden_size=64, num_heads=2)
    assert small == compose_arch("hrm_v1", ["hidden_size=64", "num_heads=2"])
    assert (small.puzzle_emb_ndim, small.puzzle_tokens) == (64, 1)
    assert ArchConfig(hidden_size=64, num_heads=2, puzzle_emb_ndim=None).puzzle_emb_ndim == 64   # `null`
    assert ArchConfig(hidden_size=64, num_heads=2, puzzle_emb_ndim=0).puzzle_tokens == 0         # given: wins
    with pytest.raises(ValidationError) as err:      # a refused hidden_size is the one error named
        ArchConfig(hidden_size=0)
    assert [e["loc"] for e in err.value.errors()] == [("hidden_size",)]


def test_preset_values():
    v1, loop, norm, tiny = (compose_arch(n) for n in PRESETS)
    published = dict(hidden_size=512, num_heads=8, expansion=4.0, H_layers=4, L_layers=4, H_cycles=2,
                     L_cycles=2, halt_max_steps=16, halt_exploration_prob=0.1, puzzle_emb_ndim=512,
                     pos_encodings="rope", loss_type="stablemax", forward_dtype="auto")
    for arch in (v1, loop, norm):
        assert {k: getattr(arch, k) for k in published} == published
    assert (v1.scaling.rule, loop.scaling.rule, norm.scaling.rule) == ("none", "deeploop", "deepnorm")
    assert loop.scaling.depth_count == "paper"
    assert 64 <= tiny.hidden_size <= 128 and tiny.H_layers <= 2 and tiny.L_layers <= 2
    assert tiny.scaling.rule == "deeploop" and tiny.halt_max_steps <= 4


def test_hydra_override_of_one_module_exponent():
    arch = compose_arch("hrm_deeploop", ["scaling.H.p=0.25"])
    assert arch.scaling.for_module("H")["p"] == 0.25
    assert arch.scaling.for_module("H")["rule"] == "custom"
    assert arch.scaling.for_module("L")["p"] == 0.5
    arch = compose_arch("hrm_v1", ["scaling.rule=custom", "scaling.p=0.3", "scaling.L.depth_count=forward"])
    assert arch.scaling.for_module("L") == dict(rule="custom", p=0.3, c=2.0, d=8.0,
                                                depth_count="forward", lambda_=1.0)


@pytest.mark.parametrize("kwargs, message", [
    (dict(hidden_sise=64), "hidden_sise"),
    (dict(hidden_size=100, num_heads=8), "hidden_size=100 is not divisible by num_heads=8"),
    (dict(hidden_size=48, num_heads=16), "even head_dim"),
    (dict(H_cycles=0), "H_cycles must be >= 1"),
    # pydantic reads true/false as 1/0 in a number field
    (dict(H_layers=True), "H_layers takes a number, not true"),
    (dict(scaling=dict(rule="deeploop", H=dict(c=True))), r"scaling.H.c\n  Value error, c takes a number, not true"),
    # the SwiGLU width rounds to 0: a ZeroDivisionError when the model is built
    (dict(hidden_size=64, num_heads=2, expansion=0.01), r"expansion=0.01 gives hidden_size=64 an MLP of width 0"),
    (dict(halt_exploration_prob=1.5), "halt_exploration_prob"),
    (dict(puzzle_emb_ndim=-1), "puzzle_emb_ndim"),
    (dict(loss_type="focal"), "loss_type"),
    (dict(pos_encodings="alibi"), "pos_encodings"),
    (dict(forward_dtype="float8"), "forward_dtype"),
    (dict(scaling=dict(rule="custom")), "scaling.p is required when scaling.rule=custom"),
    (dict(scaling=dict(rule="prenorm_1_over_n", p=0.5)), "p=0.5 has no effect with scaling.rule=prenorm_1_over_n"),
    # the loops n of its formula, not the derived N of the (c N)^p family (hrm.scaling)
    (dict(scaling=dict(rule="prenorm_1_over_n", p=0.5)), r"eps = lambda / \(n sqrt\(l\)\), n loops of l blocks"),
    (dict(scaling=dict(rule="deeploop", H=dict(rule="prenorm_1_over_n", p=0.5))), "scaling.H.p=0.5 has no effect"),
    (dict(scaling=dict(rule="deeploop", H=dict(rule="custom"))), "scaling.H.p is required"),
    (dict(scaling=dict(depth_count="all")), "depth_count"),
    (dict(scaling=dict(c=0)), "scaling.c must be > 0"),
    # a non-finite exponent would make alpha and beta nan or inf: the run diverges at its first step
    (dict(scaling=dict(rule="custom", p=float("nan"))), r"scaling.p\n  Input should be a finite number"),
    (dict(scaling=dict(rule="deeploop", H=dict(p=float("inf")))), r"scaling.H.p\n  Input should be a finite number"),
    (dict(rope_theta=float("inf")), r"rope_theta\n  Input should be a finite number"),
    # finite settings whose alpha or beta is inf or 0 in float32 (which the model computes in)
    (dict(scaling=dict(rule="custom", p=30)), r"module H: scaling.p=30, scaling.c=2, scaling.d=8 give alpha = "
                                              r"\(c\*N\)\^p = 2.55e\+41 and beta = \(d\*N\)\^-p = 3.4e-60 \(N=12\)"),
    (dict(scaling=dict(rule="custom", p=400)), r"alpha = \(c\*N\)\^p = inf and beta = \(d\*N\)\^-p = 0 .*float32"),
    (dict(scaling=dict(rule="deeploop", L=dict(c=1e-300))), r"module L: p=0.5 \(deeploop\), scaling.L.c=1e-300, "
                                                            r"scaling.d=8 give alpha = \(c\*N\)\^p = 3.46e-150"),
    (dict(scaling=dict(H=dict(q=1))), "q"),
    (dict(scaling=dict(rule="sqrt")), "rule"),
    # a setting no module's rule reads would be ignored without a word, as p would
    (dict(scaling={"rule": "deeploop", "lambda": 2}), "scaling.lambda=2.0 has no effect: module H uses deeploop, "
                                                      "module L uses deeploop, and only prenorm_1_over_n read lambda"),
    (dict(scaling=dict(rule="none", c=4)), "scaling.c=4.0 has no effect: .*only deepnorm / deeploop / custom read c"),
    (dict(scaling=dict(rule="prenorm_1_over_n", d=4)), "scaling.d=4.0 has no effect"),
    (dict(scaling=dict(rule="deeploop", L={"lambda": 3})), "scaling.L.lambda=3.0 has no effect: module L uses deeploop"),
    (dict(scaling=dict(rule="deeploop", c=3, H=dict(c=2), L=dict(c=5))), "scaling.c=3.0 has no effect: H and L set "
                                                                          "their own c"),
    # depth_count sets N (or the pre-norm loops): rule none has neither, so hrm_v1 with
    # depth_count=gradient_visible trained the unscaled model without a word
    (dict(scaling=dict(rule="none", depth_count="gradient_visible")),
     "scaling.depth_count=gradient_visible has no effect: module H uses none, module L uses none"),
    (dict(scaling=dict(rule="deeploop", H=dict(rule="none", depth_count="forward"))),
     "scaling.H.depth_count=forward has no effect: module H uses none"),
    (dict(scaling=dict(rule="deeploop", depth_count="forward", H=dict(depth_count="paper"), L=dict(depth_count="paper"))),
     "scaling.depth_count=forward has no effect: H and L set their own depth_count"),
    # a top-level p that both modules replace, with their own p or a rule of their own (it ran p=0.4)
    (dict(scaling=dict(rule="deeploop", p=0.3, H=dict(p=0.4), L=dict(p=0.4))),
     "scaling.p=0.3 has no effect: scaling.H.p=0.4 replaces it, scaling.L.p=0.4 replaces it"),
    (dict(scaling=dict(rule="custom", p=0.3, H=dict(rule="deeploop"), L=dict(rule="deepnorm"))),
     "scaling.p=0.3 has no effect: module H uses deeploop, module L uses deepnorm"),
])
def test_validation_errors_name_the_field(kwargs, message):
    with pytest.raises(ValidationError, match=message):
        ArchConfig(**kwargs)


def number_fields(model) -> list[str]:
    """The fields of a pydantic model typed int or float, or Optional of those (not lists of them)."""
    def numeric(annotation) -> bool:
        return annotation in (int, float) or (typing.get_origin(annotation) in (typing.Union, types.UnionType)
                                              and any(numeric(a) for a in typing.get_args(annotation)))
    return [name for name, f in model.model_fields.items() if numeric(f.annotation)]


@pytest.mark.parametrize("model, nest", [(ArchConfig, lambda name: {name: True}),
                                         (ScalingConfig, lambda name: {"scaling": {"rule": "custom", "p": 0.5,
                                                                                   name.rstrip("_"): True}}),
                                         (ModuleScalingOverride, lambda name: {"scaling": {"H": {name.rstrip("_"): True}}})])
def test_every_number_field_refuses_true(model, nest):
    """refuse_bool names its fields by hand: one added later without it would read true as 1."""
    fields = number_fields(model)
    assert fields
    for name in fields:
        with pytest.raises(ValidationError, match=f"{name.rstrip('_')} takes a number, not true"):
            ArchConfig(**nest(name))


def test_a_setting_read_by_one_module_is_accepted():
    """lambda for the one pre-norm module, c for the one module of the (c N)^p family."""
    s = ScalingConfig(**{"rule": "deeploop", "lambda": 2.0, "c": 3.0, "H": {"rule": "prenorm_1_over_n"}})
    assert s.for_module("H")["lambda_"] == 2.0 and s.for_module("L")["c"] == 3.0
    assert ScalingConfig(rule="none", c=3.0, H={"p": 0.3}).for_module("H")["c"] == 3.0   # H is custom
    # depth_count with none at the top level, read by the one module that scales
    s = ScalingConfig(rule="none", depth_count="forward", L={"rule": "deeploop"})
    assert s.for_module("L")["depth_count"] == "forward"


def test_a_top_level_p_read_by_one_module_is_accepted():
    """Only a p that no module reads is refused: here L reads it (H has its own)."""
    scaling = ArchConfig(scaling=dict(rule="custom", p=0.3, H=dict(rule="deeploop"))).scaling
    assert [scaling.for_module(m)["p"] for m in ("H", "L")] == [0.5, 0.3]
    scaling = ArchConfig(scaling=dict(rule="deeploop", p=0.3, H=dict(p=0.4))).scaling
    assert [scaling.for_module(m)["p"] for m in ("H", "L")] == [0.4, 0.3]


def test_lambda_key_and_none_overrides():
    s = ScalingConfig(**{"rule": "prenorm_1_over_n", "lambda": 0.5, "H": None})
    assert s.lambda_ == 0.5 and s.H.is_empty()
    assert s.model_dump(by_alias=True)["lambda"] == 0.5


def test_derived_properties():
    arch = ArchConfig(hidden_size=512, expansion=4, puzzle_emb_ndim=512)
    assert arch.mlp_hidden == 1536          # round(4 * 512 * 2/3) = 1365 -> next multiple of 256
    assert ArchConfig(hidden_size=128, num_heads=4, expansion=4).mlp_hidden == 512  # 341 -> 512
    assert arch.puzzle_tokens == 1
    assert ArchConfig(hidden_size=32, num_heads=2, puzzle_emb_ndim=48).puzzle_tokens == 2
    assert ArchConfig(puzzle_emb_ndim=0).puzzle_tokens == 0


def test_forward_dtype_auto():
    arch = ArchConfig()
    assert resolve_forward_dtype(arch, "cpu") == torch.float32
    assert resolve_forward_dtype(arch, "cuda") == torch.bfloat16
    assert resolve_forward_dtype(ArchConfig(forward_dtype="float32"), "cuda") == torch.float32


def test_an_exponent_on_a_family_rule_asks_for_that_member_custom():
    # arch=hrm_deeploop arch.scaling.p=0.45: the family member p = 0.45, not an error
    s = ArchConfig(scaling=dict(rule="deeploop", p=0.45)).scaling
    assert s.rule == "custom" and s.for_module("H")["p"] == s.for_module("L")["p"] == 0.45
    s = ArchConfig(scaling=dict(rule="none", p=0.5)).scaling             # hrm_v1 arch.scaling.p=0.5
    assert s.for_module("L") == dict(rule="custom", p=0.5, c=2.0, d=8.0, depth_count="paper", lambda_=1.0)
    assert ArchConfig(scaling=dict(rule="deeploop", p=0.5)).scaling.rule == "deeploop"   # its own exponent
    # per module the same: an explicit family rule with another exponent is that custom member
    s = ArchConfig(scaling=dict(rule="deeploop", L=dict(rule="deepnorm", p=0.3))).scaling
    assert (s.for_module("L")["rule"], s.for_module("L")["p"]) == ("custom", 0.3)
    assert (s.for_module("H")["rule"], s.for_module("H")["p"]) == ("deeploop", 0.5)


def test_a_module_exponent_equal_to_its_rules_own_keeps_the_rules_name():
    """H.p=0.5 on deeploop is deeploop, as scaling.p=0.5 is at the top level (it was printed as
    `H: custom ... | L: deeploop ...` with the same numbers); another exponent is custom."""
    s = ArchConfig(scaling=dict(rule="deeploop", H=dict(p=0.5))).scaling
    assert s.for_module("H") == s.for_module("L") == dict(rule="deeploop", p=0.5, c=2.0, d=8.0,
                                                          depth_count="paper", lambda_=1.0)
    assert ArchConfig(scaling=dict(rule="deepnorm", L=dict(p=0.5))).scaling.for_module("L")["rule"] == "custom"
    assert ArchConfig(scaling=dict(rule="none", L=dict(p=0.5))).scaling.for_module("L")["rule"] == "custom"
    s = ArchConfig(scaling={"rule": "prenorm_1_over_n", "H": dict(p=0.5)}).scaling
    assert (s.for_module("H")["rule"], s.for_module("L")["rule"]) == ("custom", "prenorm_1_over_n")
