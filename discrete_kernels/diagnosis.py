"""What the adapters find about a model or a chain that is not a bad input, written once for
both: supports that move with another site's value (refused at setup), chains that make no
move in warmup (the warning and its likely causes), and discrete sites that set the
distribution of continuous sites another Gibbs block updates (the setup note).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .domains import Binary, Categorical, Domain

__all__ = [
    "DISCRETE_NO_MOVE_CAUSES",
    "ESH_NO_MOVE_CAUSES",
    "MIN_WARMUP_FOR_FROZEN_CHECK",
    "check_fixed_supports",
    "frozen_check_start",
    "gated_sites",
    "gated_sites_message",
    "movable_supports",
    "no_move_message",
]


# ------------------------------------------------------------------------------------------
# supports that depend on other sites


def movable_supports(
    sites: Sequence[tuple[str, Domain]], bounds_of: Callable[[str], tuple[Any, Any] | None]
) -> dict[str, tuple[Any, Any]]:
    """The integer bounds ``{site: (lower, upper)}`` of the sites whose support could move
    with another site's value, as :func:`check_fixed_supports` takes them. Booleans cannot,
    nor categorical sites: their support is their number of categories, the last dimension of
    their probabilities (a shape, fixed under tracing), so their check would only cost setup
    time (a trace per other site and value)."""
    out = {}
    for name, domain in sites:
        bounds = None if isinstance(domain, (Binary, Categorical)) else bounds_of(name)
        if bounds is not None:
            out[name] = bounds
    return out


def check_fixed_supports(
    base: Mapping[str, tuple[Any, Any]],
    perturbed: Sequence[tuple[str, Mapping[str, tuple[Any, Any] | None]]],
) -> None:
    """Refuse a model in which the support of a sampled site depends on another site's value.

    The kernels fix each site's support (its domain) at setup. The adapters trace the model
    once more for each other site ``s`` set to a few other values, and pass the bounds they
    see; any change means the support moves with ``s`` and the chain would be sampled on the
    wrong range.

    Parameters
    ----------
    base : {site: (lower, upper)}
        Bounds of each integer-interval site at the setup trace (numpy arrays or scalars).
    perturbed : sequence of (changed_site, {site: (lower, upper)})
        Bounds seen with ``changed_site`` set to another value.
    """
    for changed, bounds in perturbed:
        for site, (lower, upper) in base.items():
            seen = bounds.get(site)
            if site == changed or seen is None:
                continue
            new_lower, new_upper = seen
            same = np.array_equal(np.asarray(lower), np.asarray(new_lower)) and np.array_equal(
                np.asarray(upper), np.asarray(new_upper)
            )
            if not same:
                raise ValueError(
                    f"The support of site {site!r} depends on the value of site {changed!r} "
                    f"(bounds {_span(lower, upper)} at the setup trace, "
                    f"{_span(new_lower, new_upper)} with another value of {changed!r}). "
                    "These kernels sample each site on a support fixed at setup, so they "
                    "refuse this model: write it with a fixed "
                    f"support for {site!r} (e.g. its largest range plus a factor that is -inf "
                    "outside the dependent range), or sample it with NumPyro's DiscreteHMCGibbs."
                )


def _span(lower: Any, upper: Any) -> str:
    lower, upper = np.asarray(lower), np.asarray(upper)
    if lower.size == 1 and upper.size == 1:
        return f"[{lower.item():g}, {upper.item():g}]"
    return f"[{lower.min():g}..{lower.max():g}, {upper.min():g}..{upper.max():g}]"


# ------------------------------------------------------------------------------------------
# chains that cannot move

MIN_WARMUP_FOR_FROZEN_CHECK = 20
"""Warmups shorter than this are too short to call a chain that has not moved frozen."""


def frozen_check_start(num_warmup: int) -> int:
    """First warmup step of the window the frozen-chain check looks at: the second half.

    A chain can move early in warmup and then stop for good (a step size adapted down until
    only the proposals equal to the current state are accepted, or a chain that has fallen
    into a state no proposal leaves); checking the whole warmup would miss it.
    """
    return num_warmup // 2


DISCRETE_NO_MOVE_CAUSES = (
    "Likely causes: the gradient's estimate of the local differences is "
    "badly wrong for these sites (pass exact_sites=[...] to evaluate them exactly), the "
    "step size adapted to where only proposals equal to the current state are accepted "
    "(the acceptance_rate statistic then looks healthy: compare it with accepted), or the "
    "chain sits where no proposal has positive probability. The step_size, "
    "acceptance_rate and accepted statistics show what the kernel tried."
)

ESH_NO_MOVE_CAUSES = (
    "Likely causes: every orbit point but the start has a log density or gradient that is "
    "-inf or NaN (the chain sits next to a region of zero density, or the model returns NaN "
    "there), or the step size is far too long for the target's scale (pass a smaller "
    "step_size). The max_weight_fraction statistic near 1 and moved false show it."
)


def no_move_message(
    owner: str,
    sites: Sequence[Any],
    num_warmup: int,
    chains: Any = None,
    causes: str = DISCRETE_NO_MOVE_CAUSES,
) -> str:
    """Warning text for a chain that made no move in the second half of its warmup."""
    which = "The chain" if chains is None else f"Chains {list(chains)}"
    window = num_warmup - frozen_check_start(num_warmup)
    return (
        f"{owner}: {which} made no move in the last {window} of its {num_warmup} warmup steps "
        f"on sites {list(sites)}; unless it starts moving again, every draw will equal its "
        f"current state. {causes}"
    )


# ------------------------------------------------------------------------------------------
# continuous sites whose distribution a discrete site sets (spike-and-slab pairs)


def gated_sites(
    base: Mapping[str, Any], perturbed: Sequence[tuple[str, Mapping[str, Any]]]
) -> dict[str, list[str]]:
    """Which continuous sites of other Gibbs blocks have a distribution that a discrete site
    of this block sets, as ``{discrete site: [continuous sites]}``.

    Parameters
    ----------
    base : {continuous site: log densities}
        Each continuous site's element-wise log density at the setup trace.
    perturbed : sequence of (discrete_site, {continuous site: log densities})
        The same with ``discrete_site`` set to another value.
    """
    gates: dict[str, list[str]] = {}
    for changed, densities in perturbed:
        for site, before in base.items():
            after = densities.get(site)
            if after is None or site in gates.get(changed, []):
                continue
            before, after = np.asarray(before, float), np.asarray(after, float)
            if before.shape != after.shape or not np.allclose(before, after, atol=1e-6):
                gates.setdefault(changed, []).append(site)
    return gates


def gated_sites_message(
    owner: str, gates: Mapping[str, Sequence[str]], moves: str, otherwise: str = ""
) -> str:
    """The setup note of a block whose discrete sites set the distribution of continuous
    sites that another block updates: drawing each given the other, a coordinate can switch
    only where the continuous value is likely under both of its values, which a narrow
    spike makes rare. ``moves``: the joint moves the adapter's PPL offers, a template with
    the fields ``{pairs}`` (``{discrete: continuous}``) and ``{sites}`` (their names);
    ``otherwise``: a last sentence (another remedy), or empty."""
    described = "; ".join(
        f"site {d!r} sets the distribution of {', '.join(map(repr, cs))}" for d, cs in gates.items()
    )
    pairs = {d: cs[0] for d, cs in gates.items()}
    sites = [name for pair in pairs.items() for name in pair]
    return (
        f"{owner}: {described}, which another Gibbs block updates. Blocks that draw each given "
        "the other switch a coordinate only where the continuous value is likely under both "
        "discrete values: with a narrow spike (SSVS) a chain can keep a coordinate for "
        "thousands of steps while still moving elsewhere, so nothing else warns. Draw each "
        f"pair in one move: {moves.format(pairs=pairs, sites=sites)} (a finite discrete site "
        "and a real-valued site of one shape)." + (f" {otherwise}" if otherwise else "")
    )
