"""Residual scaling for looped (weight-tied) depth: DeepNorm / DeepLoop constants per module.

Block update of every sublayer (attention, then SwiGLU) of a post-norm block:
    x <- RMSNorm(alpha * x + f(x))
and an initialisation gain beta on the residual-branch matrices (value slice of qkv, o_proj,
gate|up, down). The family is alpha = (c N)^p, beta = (d N)^(-p); alpha = beta = 1 is HRM.

N counts sublayer visits of the model that the rule should see (DeepLoop paper, eq. 18). For an
HRM with K_H / K_L blocks per module, C_L low-level cycles and C H-cycles:
    paper            M = 2 (K_H + C_L K_L)        eq. 18: every L call of the last cycle + one H call
    gradient_visible M = 2 (K_H + K_L)            what the one-step gradient really reaches
    forward          M = 2 C (K_H + C_L K_L)      every unrolled visit of a segment
and N = M / 2 (block visits). Defaults (4, 4, C_L=2): paper M=24, N=12, alpha=sqrt(24), beta=96^-1/2.

Ablation ``prenorm_1_over_n`` (arXiv 2606.18524): pre-norm blocks h <- h + eps f(norm(h)) with
eps = lambda / (n sqrt(l)) for l unique layers looped n times. Per module, l is its number of
blocks and n how often its block stack runs under the chosen count: paper = C_L for L and 1 for H
(the calls eq. 18 counts), gradient_visible = 1, forward = C * C_L for L and C for H. alpha = beta
= 1 for that rule; the model adds a final RMSNorm before its heads when H is pre-norm.

Public API
----------
``visit_counts(arch, depth_count) -> (M, N)``
``module_loops(arch, module, depth_count) -> int``
``derive_scaling(arch) -> dict``   {"H": {...}, "L": {...}} with keys rule, depth_count, M, N, p,
                                   c, d, alpha, beta, loops, layers, eps (eps None unless pre-norm);
                                   ValueError for an alpha or beta outside float32's range
                                   (ArchConfig's validation calls it).
``describe_scaling(scaling) -> str`` the single line printed at model construction.
"""
from __future__ import annotations

import math

from hrm.config import ArchConfig


def visit_counts(arch: ArchConfig, depth_count: str) -> tuple[int, int]:
    """(M, N): sublayer visits and block visits N = M/2 under ``depth_count``."""
    K_H, K_L, C_L, C = arch.H_layers, arch.L_layers, arch.L_cycles, arch.H_cycles
    if depth_count == "paper":
        M = 2 * (K_H + C_L * K_L)
    elif depth_count == "gradient_visible":
        M = 2 * (K_H + K_L)
    elif depth_count == "forward":
        M = 2 * C * (K_H + C_L * K_L)
    else:
        raise ValueError(f"unknown depth_count {depth_count!r}")
    return M, M // 2


def module_loops(arch: ArchConfig, module: str, depth_count: str) -> int:
    """How many times the block stack of ``module`` runs per segment under ``depth_count``."""
    if depth_count == "gradient_visible":
        return 1
    if depth_count == "paper":
        return arch.L_cycles if module == "L" else 1
    if depth_count == "forward":
        return arch.H_cycles * (arch.L_cycles if module == "L" else 1)
    raise ValueError(f"unknown depth_count {depth_count!r}")


# float32's largest and smallest normal values: alpha is applied as a float32 tensor and beta
# scales float32 weights (bfloat16 has the same range), so a constant outside them is inf or 0 there.
_FLOAT32_MAX, _FLOAT32_TINY = 3.4028234663852886e38, 1.1754943508222875e-38


def _family_constants(arch: ArchConfig, module: str, s: dict, N: int) -> tuple[float, float]:
    """alpha = (c N)^p, beta = (d N)^-p; refused, naming the settings, when either would be inf or 0
    in float32 (|p| of tens, or an extreme c or d): the first step would give nan without a word.
    Any finite p otherwise, negative too (alpha < 1, beta > 1): the family is defined for every p."""
    def power(base: float, exponent: float) -> float:
        try:
            return base ** exponent
        except OverflowError:   # Python's float power raises rather than return inf
            return math.inf
    alpha, beta = power(s["c"] * N, s["p"]), power(s["d"] * N, -s["p"])
    if all(_FLOAT32_TINY <= v <= _FLOAT32_MAX for v in (alpha, beta)):
        return alpha, beta

    def key(field: str) -> str:   # where the value came from: the module's override or the top level
        if getattr(getattr(arch.scaling, module), field) is not None:
            return f"scaling.{module}.{field}={s[field]:g}"
        if field == "p" and s["rule"] != "custom":   # deepnorm's or deeploop's own
            return f"p={s['p']:g} ({s['rule']})"
        return f"scaling.{field}={s[field]:g}"
    raise ValueError(f"module {module}: {', '.join(map(key, ('p', 'c', 'd')))} give alpha = (c*N)^p = "
                     f"{alpha:.3g} and beta = (d*N)^-p = {beta:.3g} (N={N}), outside float32's range "
                     f"(inf or 0 there): choose a smaller |p|, or other c, d")


def _module_scaling(arch: ArchConfig, module: str) -> dict:
    s = arch.scaling.for_module(module)
    M, N = visit_counts(arch, s["depth_count"])
    layers = arch.H_layers if module == "H" else arch.L_layers
    loops = module_loops(arch, module, s["depth_count"])
    alpha, beta, eps = 1.0, 1.0, None
    if s["rule"] in ("deepnorm", "deeploop", "custom"):
        alpha, beta = _family_constants(arch, module, s, N)
    elif s["rule"] == "prenorm_1_over_n":
        eps = s["lambda_"] / (loops * math.sqrt(layers))
    return dict(rule=s["rule"], depth_count=s["depth_count"], M=M, N=N, p=s["p"], c=s["c"],
                d=s["d"], alpha=alpha, beta=beta, loops=loops, layers=layers, eps=eps)


def derive_scaling(arch: ArchConfig) -> dict:
    """Per module ("H", "L"): the visit counts and the constants the blocks use."""
    return {module: _module_scaling(arch, module) for module in ("H", "L")}


def _describe_module(s: dict) -> str:
    if s["rule"] == "none":
        return "none (alpha=1, beta=1)"
    if s["rule"] == "prenorm_1_over_n":
        return (f"prenorm_1_over_n eps=lambda/(n*sqrt(l))={s['eps']:.5g} "
                f"(depth_count={s['depth_count']}: n={s['loops']} loops, l={s['layers']} layers)")
    return (f"{s['rule']} p={s['p']:g} c={s['c']:g} d={s['d']:g} "
            f"(depth_count={s['depth_count']}: M={s['M']}, N={s['N']}) "
            f"alpha={s['alpha']:.5g} beta={s['beta']:.5g}")


def describe_scaling(scaling: dict) -> str:
    """One readable line; says "H and L" once when both modules got the same constants."""
    H, L = _describe_module(scaling["H"]), _describe_module(scaling["L"])
    body = f"H and L: {H}" if H == L else f"H: {H} | L: {L}"
    return f"[hrm] residual scaling: {body}"
