"""Validated architecture configuration of the HRM (the `arch` group of the Hydra config).

Public API
----------
``ScalingConfig``         the residual-scaling rule (DESIGN.md, "Residual scaling"):
    rule         none | deepnorm | deeploop | custom | prenorm_1_over_n
    p            exponent of the family alpha = (c*N)^p, beta = (d*N)^(-p). None means "the rule's
                 own value" (deepnorm 1/4, deeploop 1/2); required for custom; another value given
                 with none, deepnorm or deeploop makes the rule custom; must stay None for
                 prenorm_1_over_n.
    c, d         constants of the family (2 and 8).
    depth_count  paper | gradient_visible | forward: how N is counted (see hrm.scaling); read by
                 every rule but none (refused there, as c, d and lambda are where no rule reads them).
    lambda       (``lambda_`` in Python) numerator of the pre-norm rule eps = lambda / (n sqrt(l)):
                 per module, n counts how often its block stack runs (depth_count decides which
                 runs; the ``loops`` of the derived scaling, not its N) and l is its block count.
    H, L         ``ModuleScalingOverride``: per-module overrides (paper eq. 20), every field
                 optional, None = inherit from the top level. Setting p on a module without
                 naming its rule makes that module ``custom`` (unless p is its rule's own exponent).
``ModuleScalingOverride`` the same fields, all optional.
``ArchConfig``            one field per knob of the architecture; the YAML presets in configs/arch/
                          mirror it field for field, and its defaults are hrm_v1.yaml's (puzzle_emb_ndim
                          follows hidden_size there and here).
``resolve_forward_dtype(arch, device) -> torch.dtype``  "auto" = bfloat16 on CUDA, float32 elsewhere.

Every model uses ``extra="forbid"``: an unknown key is an error that names it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

if TYPE_CHECKING:   # annotations only: the config loads without torch (pretrain.py's checks, refusals)
    import torch

ScalingRule = Literal["none", "deepnorm", "deeploop", "custom", "prenorm_1_over_n"]
DepthCount = Literal["paper", "gradient_visible", "forward"]

# The exponent that names a rule of the (c N)^p family.
RULE_EXPONENT = {"deepnorm": 0.25, "deeploop": 0.5}
# What each rule reads besides p: the (c N)^p family its constants, the pre-norm rule its lambda,
# and every rule but none its depth count (N, or the pre-norm rule's loops n; none has no constant).
RULE_SETTINGS = {"none": (), "deepnorm": ("c", "d", "depth_count"), "deeploop": ("c", "d", "depth_count"),
                 "custom": ("c", "d", "depth_count"), "prenorm_1_over_n": ("lambda_", "depth_count")}


def _rule_with_exponent(rule: str, p: Optional[float]) -> str:
    """An exponent given with a rule of the (c N)^p family that fixes another one (`arch=hrm_deeploop
    arch.scaling.p=0.45`, or p on hrm_v1's `none`) asks for that member of the family: custom. The
    same at the top level and per module."""
    if p is not None and rule in ("none", *RULE_EXPONENT) and p != RULE_EXPONENT.get(rule):
        return "custom"
    return rule


def refuse_bool(v, info):
    """A before-validator for number fields and lists of numbers: pydantic reads true/false as 1/0, so
    `keep_checkpoints=true` or `arch.H_layers=true` would run with 1 without a word."""
    if isinstance(v, bool):
        raise ValueError(f"{info.field_name.rstrip('_')} takes a number, not {str(v).lower()}")
    flag = next((item for item in v if isinstance(item, bool)), None) if isinstance(v, (list, tuple)) else None
    if flag is not None:
        raise ValueError(f"{info.field_name} takes numbers, not {str(flag).lower()}")
    return v


def _check_rule_and_p(rule: str, p: Optional[float], where: str) -> None:
    """One place for the rule/p consistency check, so top level and overrides say the same thing."""
    if rule == "custom" and p is None:
        raise ValueError(f"{where}p is required when {where}rule=custom")
    if rule == "prenorm_1_over_n" and p is not None:
        raise ValueError(f"{where}p={p} has no effect with {where}rule={rule} (its step is "
                         f"eps = lambda / (n sqrt(l)), n loops of l blocks); remove it or pick rule=custom")


class ModuleScalingOverride(BaseModel):
    """Per-module (H or L) override of ``ScalingConfig``; a None field inherits the top level."""
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)

    rule: Optional[ScalingRule] = None
    p: Optional[float] = None
    c: Optional[float] = None
    d: Optional[float] = None
    depth_count: Optional[DepthCount] = None
    lambda_: Optional[float] = Field(default=None, alias="lambda")

    _no_bool = field_validator("p", "c", "d", "lambda_", mode="before")(refuse_bool)

    @field_validator("c", "d", "lambda_")
    @classmethod
    def _positive(cls, v, info):
        if v is not None and not v > 0:
            raise ValueError(f"{info.field_name.rstrip('_')} must be > 0")
        return v

    def is_empty(self) -> bool:
        return all(getattr(self, name) is None for name in type(self).model_fields)


class ScalingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)

    rule: ScalingRule = "none"
    p: Optional[float] = None
    c: float = 2.0
    d: float = 8.0
    depth_count: DepthCount = "paper"
    lambda_: float = Field(default=1.0, alias="lambda")
    H: ModuleScalingOverride = Field(default_factory=ModuleScalingOverride)
    L: ModuleScalingOverride = Field(default_factory=ModuleScalingOverride)

    _no_bool = field_validator("p", "c", "d", "lambda_", mode="before")(refuse_bool)

    @field_validator("H", "L", mode="before")
    @classmethod
    def _none_is_empty(cls, v):
        return {} if v is None else v

    @field_validator("c", "d", "lambda_")
    @classmethod
    def _positive(cls, v, info):
        if not v > 0:
            raise ValueError(f"scaling.{info.field_name.rstrip('_')} must be > 0")
        return v

    @model_validator(mode="after")
    def _consistent(self):
        self.rule = _rule_with_exponent(self.rule, self.p)
        _check_rule_and_p(self.rule, self.p, "scaling.")
        rules = {name: self.for_module(name)["rule"] for name in ("H", "L")}  # raises naming the module
        self._check_p_is_read(rules)
        self._check_settings_are_read(rules)
        return self

    def _check_p_is_read(self, rules: dict) -> None:
        """A top-level p that neither module reads (each sets its own p, or names a rule of its own:
        `arch.scaling.p=0.3 arch.scaling.H.p=0.4 arch.scaling.L.p=0.4`) would be ignored without a
        word, as c is when both modules set theirs: refuse it. A module reads it as for_module does:
        no p of its own and the top-level rule."""
        if self.p is None:
            return
        why = []
        for module in ("H", "L"):
            override: ModuleScalingOverride = getattr(self, module)
            if override.p is not None:
                why.append(f"scaling.{module}.p={override.p:g} replaces it")
            elif override.rule not in (None, self.rule):
                why.append(f"module {module} uses {rules[module]}")
            else:
                return
        raise ValueError(f"scaling.p={self.p:g} has no effect: {', '.join(why)}")

    def _check_settings_are_read(self, rules: dict) -> None:
        """A c, d, lambda or depth_count that no module's rule reads (`arch.scaling.lambda=2` with
        deeploop, `arch.scaling.c=4` or `arch.scaling.depth_count=forward` with hrm_v1's none) would
        be ignored without a word, as p would: refuse it, as p is refused. The top level's value
        counts as set when it is not the default."""
        for field in ("c", "d", "lambda_", "depth_count"):
            default = type(self).model_fields[field].default
            name, used_by = field.rstrip("_"), [rule for rule, reads in RULE_SETTINGS.items() if field in reads]
            for module in ("H", "L"):
                value = getattr(getattr(self, module), field)
                if value is not None and field not in RULE_SETTINGS[rules[module]]:
                    raise ValueError(f"scaling.{module}.{name}={value} has no effect: module {module} uses "
                                     f"{rules[module]}, and only {' / '.join(used_by)} read {name}")
            inherited = [m for m in ("H", "L") if getattr(getattr(self, m), field) is None]
            value = getattr(self, field)
            if value != default and not any(field in RULE_SETTINGS[rules[m]] for m in inherited):
                why = (", ".join(f"module {m} uses {rules[m]}" for m in inherited) + f", and only "
                       f"{' / '.join(used_by)} read {name}") if inherited else f"H and L set their own {name}"
                raise ValueError(f"scaling.{name}={value} has no effect: {why}")

    def for_module(self, module: str) -> dict:
        """The effective settings of module "H" or "L": the top level updated by its override."""
        override: ModuleScalingOverride = getattr(self, module)
        rule = override.rule
        if rule is None:
            # A bare exponent on a module asks for that member of the family, read as at the top
            # level (below): on none/deepnorm/deeploop it is custom unless it is the rule's own
            # exponent (H.p=0.5 on deeploop stays deeploop, as scaling.p=0.5 does); pre-norm has none.
            rule = "custom" if override.p is not None and self.rule == "prenorm_1_over_n" else self.rule
        if override.p is not None:
            p = override.p
        else:
            # The top-level exponent belongs to the top-level rule only.
            p = self.p if rule == self.rule else None
        rule = _rule_with_exponent(rule, p)
        _check_rule_and_p(rule, p, f"scaling.{module}.")
        return dict(
            rule=rule,
            p=RULE_EXPONENT.get(rule, p),
            c=override.c if override.c is not None else self.c,
            d=override.d if override.d is not None else self.d,
            depth_count=override.depth_count or self.depth_count,
            lambda_=override.lambda_ if override.lambda_ is not None else self.lambda_,
        )


class ArchConfig(BaseModel):
    """The HRM architecture (DESIGN.md, "Model (hrm)")."""
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = "hrm_v1"
    hidden_size: int = 512
    num_heads: int = 8
    expansion: float = 4.0
    H_layers: int = 4
    L_layers: int = 4
    H_cycles: int = 2
    L_cycles: int = 2
    halt_max_steps: int = 16
    halt_exploration_prob: float = 0.1
    # None (the default, or `null`): hidden_size, as the presets' `${.hidden_size}` and HRM's own
    # config say (one puzzle token of the model's width); a fixed 512 gave ArchConfig(hidden_size=64)
    # eight puzzle tokens where the same arch from the YAML has one
    puzzle_emb_ndim: Optional[int] = Field(default=None, validate_default=True)
    pos_encodings: Literal["rope", "learned"] = "rope"
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    forward_dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    loss_type: Literal["stablemax", "softmax"] = "stablemax"
    scaling: ScalingConfig = Field(default_factory=ScalingConfig)

    _no_bool = field_validator("hidden_size", "num_heads", "expansion", "H_layers", "L_layers", "H_cycles",
                               "L_cycles", "halt_max_steps", "halt_exploration_prob", "puzzle_emb_ndim",
                               "rope_theta", "rms_norm_eps", mode="before")(refuse_bool)

    @field_validator("hidden_size", "num_heads", "H_layers", "L_layers", "H_cycles", "L_cycles",
                     "halt_max_steps")
    @classmethod
    def _at_least_one(cls, v, info):
        if v < 1:
            raise ValueError(f"{info.field_name} must be >= 1")
        return v

    @field_validator("puzzle_emb_ndim")
    @classmethod
    def _puzzle_emb_ndim(cls, v, info):
        if v is None:   # hidden_size is validated first (field order); absent when it was refused
            return info.data.get("hidden_size")
        if v < 0:
            raise ValueError("puzzle_emb_ndim must be >= 0")
        return v

    @field_validator("expansion", "rope_theta", "rms_norm_eps")
    @classmethod
    def _positive(cls, v, info):
        if not v > 0:
            raise ValueError(f"{info.field_name} must be > 0")
        return v

    @field_validator("halt_exploration_prob")
    @classmethod
    def _probability(cls, v):
        if not 0.0 <= v <= 1.0:
            raise ValueError("halt_exploration_prob must lie in [0, 1]")
        return v

    @model_validator(mode="after")
    def _heads_divide_hidden(self):
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size={self.hidden_size} is not divisible by "
                             f"num_heads={self.num_heads}")
        if self.pos_encodings == "rope" and (self.hidden_size // self.num_heads) % 2:
            raise ValueError(f"pos_encodings=rope needs an even head_dim, got "
                             f"hidden_size/num_heads={self.hidden_size // self.num_heads}")
        if self.mlp_hidden < 1:
            raise ValueError(f"expansion={self.expansion} gives hidden_size={self.hidden_size} an MLP of width 0 "
                             f"(round(expansion * hidden_size * 2/3) = 0); raise expansion")
        # alpha and beta depend on N, known only here: refuse constants outside float32 now, not
        # when the model is built (hrm.scaling imports this module, hence the late import)
        from hrm.scaling import derive_scaling
        derive_scaling(self)
        return self

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def puzzle_tokens(self) -> int:
        """Number of puzzle-embedding tokens prepended to the sequence: ceil(ndim / hidden)."""
        return -(-self.puzzle_emb_ndim // self.hidden_size)

    @property
    def mlp_hidden(self) -> int:
        """SwiGLU inner width: round(expansion * hidden * 2/3) rounded up to a multiple of 256."""
        inner = round(self.expansion * self.hidden_size * 2 / 3)
        return -(-inner // 256) * 256


def resolve_forward_dtype(arch: ArchConfig, device: torch.device | str) -> torch.dtype:
    """The compute dtype on ``device``: auto means bfloat16 on CUDA (as published) else float32."""
    import torch   # here: the config alone (pretrain.py's checks, refusals) loads without torch
    if arch.forward_dtype == "auto":
        return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32
    return getattr(torch, arch.forward_dtype)
