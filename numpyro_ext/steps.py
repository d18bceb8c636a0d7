"""NumPyro DULA, DMALA and GWG (core: :mod:`discrete_kernels.steps`; constructors:
:mod:`discrete_kernels.constructors`)."""

from __future__ import annotations

from discrete_kernels.constructors import DMALAConstructor, DULAConstructor, GWGConstructor

from .base import DiscreteKernel

__all__ = ["DMALA", "DULA", "GWG"]


class DMALA(DMALAConstructor, DiscreteKernel):
    """Discrete Metropolis-adjusted Langevin algorithm (Zhang et al., 2022).

    Every coordinate is proposed in parallel from the discrete Langevin proposal
    ``q_i(v) ∝ exp(g_i (v - x_i) / 2 - (v - x_i)^2 / (2 alpha))`` and the move is MH
    corrected, so the chain targets the model's posterior exactly. One ``value_and_grad`` per
    step (the current one is cached).

    Parameters
    ----------
    model : callable, optional
        NumPyro model whose latent sites are all discrete (Bernoulli, Binomial, Categorical,
        DiscreteUniform, ...). Mixed models: use as a block of ``numpyro.infer.Gibbs``.
    potential_fn : callable, optional
        Instead of a model: ``potential_fn(z) = -log density`` of a pytree of discrete arrays;
        then ``domain`` and ``init_params`` (in ``MCMC.run``) are required. Categorical
        leaves are passed to it as one-hot floats (shape ``(..., K)``) and kept one-hot.
    domain : Binary, Ordinal, Categorical or a pytree of them
        Potential mode only.
    step_size : float
        ``alpha`` > 0, measured on the values' own scale (one Bernoulli flip has squared
        distance 1). Default 0.5.
    adapt_step_size : bool
        Dual averaging of ``alpha`` during warmup (default True).
    target_accept_prob : float
        Target of the adaptation (default 0.574).
    preconditioner : dict or pytree, optional
        Per-coordinate multipliers of ``alpha`` (App. H of the paper): a dict of site name to
        array (model mode) or a pytree like ``init_params`` (potential mode).
    exact_sites : sequence of str
        Sites whose local differences are evaluated exactly (``N * S`` log-density evaluations
        batched with ``vmap``) instead of from the gradient, for sites used as indices.
        Categorical sites are always exact.
    """


class DULA(DULAConstructor, DiscreteKernel):
    """Discrete unadjusted Langevin algorithm: the DMALA proposal without the MH step.

    Biased for any fixed step size (the bias vanishes as the step size shrinks); moves to a
    proposal with a non-finite log density or gradient are still refused. ``accept_prob``
    reports the MH acceptance the move would have had, a free diagnostic of the bias.
    Step-size adaptation is off by default; when switched on it targets that diagnostic.
    Parameters as :class:`DMALA`.
    """


class GWG(GWGConstructor, DiscreteKernel):
    """Gibbs with gradients (Grathwohl et al., 2021): one coordinate per step.

    The coordinate and its new value are drawn from ``softmax(delta / 2)`` over all
    single-coordinate moves, with ``delta`` the gradient estimate of the change in log density,
    then MH corrected. The baseline the DLP papers compare to.

    Parameters
    ----------
    model, potential_fn, domain, exact_sites
        As in :class:`DMALA`.
    step_size : float, optional
        Optional distance penalty ``dist^2 / (2 alpha)`` on ordinal jumps (no effect on binary
        sites). None (default) is Grathwohl et al.'s GWG; ``step_size`` then reports ``inf``.
    """
