"""A NumPyro kernel that updates paired sites together: each element of a discrete site (an
inclusion indicator) with the same element of a continuous site (the coefficient it gates),
from the paired proposal of :mod:`discrete_kernels.samplers.paired` with a Metropolis-Hastings
step. Its derivatives in the coefficient come from JAX's autodiff of the model's log density.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.distributions import constraints
from numpyro.handlers import seed, substitute, trace
from numpyro.infer.gibbs import (
    conditioned,
    prototype_trace,
)
from numpyro.infer.mcmc import MCMCKernel
from numpyro.infer.util import log_density
from numpyro.util import identity, is_prng_key

from discrete_kernels import diagnosis
from discrete_kernels.metropolis import (
    accept_probability,
)
from discrete_kernels.samplers.paired import (
    check_pair_options,
    check_pair_sites,
    frozen_pairs_message,
    innermost_distribution,
    innermost_support,
    paired_move,
)

from ._host_warnings import callback_when
from ._incremental import Cache, one_element_evaluator
from ._prior_trace import prior_trace

__all__ = ["PairedGibbs", "PairedGibbsState", "paired_names", "paired_sweep", "read_pairs"]


class PairedGibbsState(NamedTuple):
    """State of :class:`PairedGibbs`.

    Attributes
    ----------
    z : dict
        The current values of the paired sites (constrained: the coefficients' support is the
        real line).
    accept_prob : scalar array
        The mean acceptance probability of the last sweep's paired moves.
    num_moves : integer scalar array
        Paired moves accepted in the last sweep.
    num_warmup_moves : integer scalar array
        Paired moves accepted in the second half of warmup (the frozen-chain check).
    i : integer scalar array
        Sweeps done.
    rng_key : key
    """

    z: dict
    accept_prob: jax.Array
    num_moves: jax.Array
    num_warmup_moves: jax.Array
    i: jax.Array
    rng_key: jax.Array


class Pair(NamedTuple):
    indicator: str
    coefficient: str
    shape: tuple[int, ...]
    #: the indicator's values, shape (S,)
    values: jax.Array


class PairedGibbs(MCMCKernel):
    """Updates each element of a discrete site together with the same element of a
    continuous site: ``pairs={"gamma": "beta"}`` for inclusions ``gamma`` and their
    coefficients ``beta`` (spike-and-slab and variable-selection models, in the indicator
    times coefficient form or the mixture-prior form).

    A sweep visits the elements in order. For element ``j`` it proposes the indicator's value
    and the coefficient together: for each of the indicator's ``S`` values, one Newton step
    of the log density in the coefficient from ``anchor`` gives a Gaussian and the Laplace
    estimate of that value's mass; the value is drawn from those masses and the coefficient
    from its Gaussian, and a Metropolis-Hastings step accepts or rejects the pair (an
    independence proposal given the other elements, exact whatever the approximation). Each
    element costs ``3 S + 1`` evaluations of the model's log density (value, gradient and
    curvature per value; the proposal). The coefficients move only through these updates:
    every element is redrawn each sweep, also where its indicator stays.

    Where the model contracts a constant matrix with a value computed element by element from
    the pair (a regression's ``X @ (gamma * beta)``, or ``X @ beta`` with ``gamma`` in the
    coefficient's prior), an evaluation after one element's change moves that contraction by
    the element's column instead of recomputing it (:mod:`numpyro_ext._incremental`, read
    from the model's program at setup): a design of ``N`` rows and ``P`` predictors costs
    ``N + P`` an evaluation instead of ``N P``, and a sweep ``P (N + P)`` instead of
    ``N P^2``.

    Use it as a block of :class:`numpyro.infer.Gibbs` next to NUTS on the other continuous
    sites: ``Gibbs([(nx.PairedGibbs(model, pairs={"gamma": "beta"}), ["gamma", "beta"]),
    (NUTS(model), None)])``; alone where the pairs are the model's only latent sites.

    Parameters
    ----------
    model : the NumPyro model
    pairs : mapping
        Discrete site name to continuous site name. The discrete site has a finite support
        (``Bernoulli``, ``Categorical``...), the continuous one the real line, and both have
        the same shape.
    anchor : float
        Where each Newton step starts: a coefficient value near which the conditional is
        roughly Gaussian (0, for a coefficient that can be excluded).
    """

    sample_field = "z"

    def __init__(self, model: Callable, pairs: Mapping[str, str], *, anchor: float = 0.0) -> None:
        self._model = model
        self._pair_names, self._anchor = check_pair_options("PairedGibbs", pairs, anchor)
        self._pairs: tuple[Pair, ...] | None = None
        self._num_warmup = 0
        self._has_deterministic = False

    # --- MCMCKernel

    @property
    def model(self) -> Callable:
        return self._model

    @property
    def default_fields(self) -> tuple[str, ...]:
        return ("z", "accept_prob", "num_moves")

    def get_diagnostics_str(self, state: PairedGibbsState) -> str:
        return f"acc. prob={float(np.mean(state.accept_prob)):.2f}"

    def wrap_model(self, wrapper: Callable) -> PairedGibbs:
        kernel = copy.copy(self)
        kernel._model = wrapper(self._model)
        kernel._pairs = None
        return kernel

    def refresh(self, state: PairedGibbsState, model_args, model_kwargs) -> PairedGibbsState:
        """Nothing is cached: a sweep evaluates the model afresh."""
        return state

    def get_constrain_fn(self, model_args: tuple, model_kwargs: dict | None) -> Callable:
        """Identity: the values are constrained (the coefficients' support is unbounded)."""
        return identity

    def postprocess_fn(self, model_args: tuple, model_kwargs: dict | None) -> Callable:
        """Identity, or the values with the model's ``deterministic`` sites computed at them."""
        if not self._has_deterministic:
            return identity
        kwargs = {} if model_kwargs is None else model_kwargs
        model = conditioned(self._model)

        def fn(z: dict) -> dict:
            replay = substitute(seed(model, jax.random.PRNGKey(0)), data=z)
            model_trace = trace(replay).get_trace(*model_args, **kwargs)
            found = {n: s["value"] for n, s in model_trace.items() if s["type"] == "deterministic"}
            return {**z, **found}

        return fn

    def _setup(self, model_trace: dict) -> tuple[Pair, ...]:
        pairs = read_pairs("PairedGibbs", self._pair_names, model_trace)
        paired = paired_names(pairs)
        others = other_latent_sites(model_trace, paired)
        if others:
            raise ValueError(
                f"PairedGibbs samples only its pairs; the model also has latent sites {others}: "
                "use nx.PairedNUTS(model, pairs=...) (NUTS on them inside, chains vectorised), "
                "or a numpyro.infer.Gibbs block next to a kernel for them, e.g. "
                f"Gibbs([(PairedGibbs(model, pairs=...), {sorted(paired)}), (NUTS(model), None)])."
            )
        return pairs

    def init(
        self,
        rng_key: jax.Array,
        num_warmup: int,
        init_params: dict | None,
        model_args: tuple,
        model_kwargs: dict | None,
    ) -> PairedGibbsState:
        kwargs = {} if model_kwargs is None else model_kwargs
        chains, model_trace = setup_trace(self._model, rng_key, model_args, kwargs)
        self._pairs = self._setup(model_trace)
        self._has_deterministic = any(s["type"] == "deterministic" for s in model_trace.values())
        self._num_warmup = int(num_warmup)

        def start(key: jax.Array) -> PairedGibbsState:
            key_start, key_next = jax.random.split(key)
            start_trace = prototype_trace(conditioned(self._model), key_start, model_args, kwargs)
            z = {}
            for pair in self._pairs or ():
                for name in (pair.indicator, pair.coefficient):
                    given = None if init_params is None else init_params.get(name)
                    z[name] = jnp.asarray(start_trace[name]["value"] if given is None else given)
            zero = jnp.zeros((), jnp.int32)
            return PairedGibbsState(z, jnp.zeros(()), zero, zero, zero, key_next)

        return jax.vmap(start)(rng_key) if chains else start(rng_key)

    def sample(
        self, state: PairedGibbsState, model_args: tuple, model_kwargs: dict | None
    ) -> PairedGibbsState:
        kwargs = {} if model_kwargs is None else model_kwargs
        assert self._pairs is not None, "init first"
        sweep = self._sweep_fn(model_args, kwargs)
        chains = not is_prng_key(state.rng_key)
        new = jax.vmap(sweep)(state) if chains else sweep(state)
        names = paired_names(self._pairs)
        frozen_check("PairedGibbs", names, new.i, new.num_warmup_moves, self._num_warmup)
        return new

    def _sweep_fn(self, model_args: tuple, kwargs: dict) -> Callable:
        pairs = self._pairs
        assert pairs is not None
        model, anchor = self._model, self._anchor
        half = self._num_warmup - self._num_warmup // 2

        def log_joint(z: dict) -> jax.Array:
            return log_density(model, model_args, kwargs, z)[0]

        def sweep(state: PairedGibbsState) -> PairedGibbsState:
            key, key_sweep = jax.random.split(state.rng_key)
            z, accept_prob, moves = paired_sweep(log_joint, state.z, pairs, anchor, key_sweep)
            in_half = (state.i >= half) & (state.i < self._num_warmup)
            return PairedGibbsState(
                z,
                accept_prob,
                moves,
                state.num_warmup_moves + jnp.where(in_half, moves, 0),
                state.i + 1,
                key,
            )

        return sweep


def warn_frozen(owner: str, names: set[str], end: Any) -> None:
    """The warning of a chain whose paired moves were all rejected in warmup's second half."""
    warnings.warn(frozen_pairs_message(owner, names, int(end)), stacklevel=3)


def frozen_check(owner: str, names: set[str], step: jax.Array, moves: jax.Array, end: int) -> None:
    """Warn (on the host, once) where a chain reaches the end of warmup (``step == end``)
    without an accepted paired move in its second half (``moves == 0``)."""
    if end >= diagnosis.MIN_WARMUP_FOR_FROZEN_CHECK:
        fire = jnp.any((step == end) & (moves == 0))
        callback_when(fire, warn_frozen, owner, names, end)


def setup_trace(model: Callable, rng_key: jax.Array, model_args: tuple, kwargs: dict) -> tuple:
    """Whether ``rng_key`` holds one key per vectorised chain, and a prior draw of the model
    (from the first chain's key; a fixed key under a transform of the whole run: the setup
    reads shapes and supports only)."""
    chains = not is_prng_key(rng_key)
    key = rng_key[0] if chains else rng_key
    if isinstance(key, jax.core.Tracer):
        key = jax.random.PRNGKey(0)
    return chains, prior_trace(model, key, model_args, kwargs)


def other_latent_sites(model_trace: dict, paired: set[str]) -> list[str]:
    return [
        name
        for name, site in model_trace.items()
        if site["type"] == "sample" and not site["is_observed"] and name not in paired
    ]


def paired_names(pairs: tuple[Pair, ...]) -> set[str]:
    """The names of every paired site."""
    return {n for p in pairs for n in (p.indicator, p.coefficient)}


def read_pairs(owner: str, pair_names: Mapping[str, str], model_trace: dict) -> tuple[Pair, ...]:
    """The pairs of ``pair_names`` (indicator to coefficient) read from a prior draw of the
    model, each checked: latent sample sites, a discrete indicator with a finite support, a
    coefficient on the real line, one shape."""
    pairs = []
    for indicator, coefficient in pair_names.items():
        for name in (indicator, coefficient):
            site = model_trace.get(name)
            if site is None or site["type"] != "sample" or site["is_observed"]:
                raise ValueError(f"{owner}: {name!r} is not a latent sample site of the model.")
        fn = innermost_distribution(model_trace[indicator]["fn"])
        finite = fn.has_enumerate_support and getattr(fn, "is_discrete", False)
        support = model_trace[coefficient]["fn"].support
        shape = tuple(jnp.shape(model_trace[indicator]["value"]))
        check_pair_sites(
            owner,
            indicator,
            coefficient,
            None if finite else type(fn).__name__,
            None if innermost_support(support) is constraints.real else str(support),
            (shape, tuple(jnp.shape(model_trace[coefficient]["value"]))),
        )
        # one compiled program, not one per operation; the support's values are static
        support_values = jax.jit(lambda fn=fn: jnp.ravel(fn.enumerate_support(expand=False)))
        values = jnp.asarray(np.unique(np.asarray(support_values())))
        pairs.append(Pair(indicator, coefficient, shape, values))
    return tuple(pairs)


def paired_sweep(
    log_joint: Callable[[dict], jax.Array],
    z: dict,
    pairs: tuple[Pair, ...],
    anchor: float,
    key: jax.Array,
) -> tuple[dict, jax.Array, jax.Array]:
    """One paired move per element of every pair, in order, on the log density ``log_joint``
    of the paired sites' values ``z``.

    Returns
    -------
    (z, accept_prob, moves)
        The new values, the mean acceptance probability and the number of accepted moves.
    """
    z = dict(z)
    total_accept, total_moves, count = jnp.zeros(()), jnp.zeros((), jnp.int32), 0
    current = log_joint(z)
    for pair in pairs:
        key, key_pair = jax.random.split(key)
        z, current, accept, moves = _pair_sweep(log_joint, z, current, pair, anchor, key_pair)
        total_accept = total_accept + accept
        total_moves = total_moves + moves
        count += int(np.prod(pair.shape, dtype=int))
    return z, total_accept / count, total_moves


def _pair_sweep(
    log_joint: Callable[[dict], jax.Array],
    z: dict,
    current: jax.Array,
    pair: Pair,
    anchor: float,
    key: jax.Array,
) -> tuple[dict, jax.Array, jax.Array, jax.Array]:
    """One pass over a pair's elements in order: the paired move of each.

    Where the log density contracts a constant matrix with a value computed element by
    element from the pair (a regression's ``X @ (gamma * beta)``), each evaluation moves that
    contraction by the changed element's column instead of recomputing it
    (:mod:`numpyro_ext._incremental`): ``N + P`` work an evaluation instead of ``N P``.

    Returns the new values, their log density, the summed acceptance probabilities and the
    number of accepted moves."""
    shape, values = pair.shape, pair.values
    others = {k: v for k, v in z.items() if k not in (pair.indicator, pair.coefficient)}
    dtype_d = jnp.result_type(z[pair.indicator])
    dtype_c = jnp.result_type(z[pair.coefficient])

    def at(d: jax.Array, c: jax.Array) -> jax.Array:
        return log_joint(
            {**others, pair.indicator: d.reshape(shape), pair.coefficient: c.reshape(shape)}
        )

    d0 = jnp.ravel(z[pair.indicator])
    c0 = jnp.ravel(z[pair.coefficient])
    evaluator = one_element_evaluator(at, d0, c0)
    cache0: Cache = {} if evaluator is None else evaluator.full(d0, c0)[1]

    def density(cache: Cache, j: jax.Array, d: jax.Array, c: jax.Array) -> tuple:
        return (at(d, c), cache) if evaluator is None else evaluator.moved(cache, j, d, c)

    def element(carry: tuple, inputs: tuple) -> tuple:
        d, c, current, cache = carry
        j, gumbel, normal, log_uniform = inputs

        def f(v: jax.Array, x: jax.Array) -> jax.Array:
            d_new = d.at[j].set(v.astype(dtype_d))
            return density(cache, j, d_new, c.at[j].set(x.astype(dtype_c)))[0]

        a = jnp.asarray(anchor, dtype_c)

        def expansion(v: jax.Array) -> tuple:
            # value, first and second derivative along the one coordinate: forward mode
            # twice (a smaller program than a gradient over every site)
            one = jnp.ones_like(a)

            def value_and_slope(x: jax.Array) -> tuple:
                return jax.jvp(partial(f, v), (x,), (one,))

            (value, gradient), (_, second) = jax.jvp(value_and_slope, (a,), (one,))
            return value, gradient, -second

        def density_at(index: jax.Array, coefficient: jax.Array) -> jax.Array:
            return f(values[index], coefficient)

        current_index = jnp.argmax(values == d[j].astype(values.dtype))
        index, proposed, proposed_density, log_ratio, accept = paired_move(
            jax.vmap(expansion)(values),
            a,
            density_at,
            (current_index, c[j], current),
            (gumbel, normal.astype(dtype_c), log_uniform),
        )
        d = jnp.where(accept, d.at[j].set(values[index].astype(dtype_d)), d)
        c = jnp.where(accept, c.at[j].set(proposed.astype(dtype_c)), c)
        current = jnp.where(accept, proposed_density, current)
        if evaluator is not None:
            # the contractions at the kept state (unchanged where the move was rejected)
            cache = evaluator.moved(cache, j, d, c)[1]
        return (d, c, current, cache), (accept_probability(log_ratio), accept)

    per_element: tuple[jax.Array, jax.Array]
    size = d0.shape[0]
    # every element's noise drawn at once: one random-bits program, not four per element
    key_value, key_normal, key_accept = jax.random.split(key, 3)
    noise = (
        jnp.arange(size),
        jax.random.gumbel(key_value, (size, values.shape[0]), dtype_c),
        jax.random.normal(key_normal, (size,), dtype_c),
        jnp.log(jax.random.uniform(key_accept, (size,), dtype_c)),
    )
    carry, per_element = jax.lax.scan(element, (d0, c0, current, cache0), noise)
    d, c, current, _ = carry
    probs, accepted = per_element
    z = {**z, pair.indicator: d.reshape(shape), pair.coefficient: c.reshape(shape)}
    return z, current, jnp.sum(probs), jnp.sum(accepted).astype(jnp.int32)
