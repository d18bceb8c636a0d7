"""From a NumPyro model (or a potential) to the core's view: leaves, domains, ``local_fn``.

Nothing here is mathematics: it finds the discrete sites, maps their distributions to
domains, and evaluates the log density with ``jax.value_and_grad`` or, for tables, with
``jax.vmap`` over the single-site substitutions the core builds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro.distributions import constraints

from discrete_kernels import Binary, Categorical, Domain, Integer, Ordinal
from discrete_kernels.chains import pair_substitutions
from discrete_kernels.domains import as_domain
from discrete_kernels.minibatch import SubsamplePlate
from discrete_kernels.sites import (
    CHAIN,
    EXACT,
    GRADIENT,
    ONE_HOT_GRADIENT,
    PLATE,
    LeafSpec,
    check_discrete_sites,
    count_domain,
    ordinal_from_bounds,
    unsupported_site_error,
    unwrap_distribution,
    unwrap_support,
)
from discrete_kernels.tables import (
    coordinate_substitutions,
    other_value_substitutions,
    table_from_element_terms,
    table_from_other_values,
)

SUPPORTED = (
    "Bernoulli, Binomial, BetaBinomial, Categorical, DiscreteUniform and other "
    "distributions with a finite integer support; Poisson, Geometric, NegativeBinomial, "
    "GammaPoisson, ZeroInflated* and other counts (integers >= a bound) with DMALA, DULA or ACS"
)


def _static(value: Any, site: str, what: str) -> np.ndarray:
    try:
        return np.asarray(value)
    except Exception as error:  # a tracer: the bound depends on traced values
        raise ValueError(
            f"Site '{site}': its {what} must be known when the kernel is built (it depends "
            "on traced values)."
        ) from error


def integer_bounds(site: dict) -> tuple[Any, Any] | None:
    """``(lower, upper)`` of a site with an integer-interval or boolean support, else None."""
    support = unwrap_support(site["fn"].support)
    if support is constraints.boolean or isinstance(support, type(constraints.boolean)):
        return jnp.asarray(0), jnp.asarray(1)
    if isinstance(support, type(constraints.integer_interval(0, 1))):
        return support.lower_bound, support.upper_bound
    return None


def domain_of_site(name: str, site: dict) -> Domain:
    """The domain of a discrete latent sample site, or a clear error."""
    fn = site["fn"]
    support = unwrap_support(fn.support)
    if isinstance(unwrap_distribution(fn), (dist.CategoricalProbs, dist.CategoricalLogits)):
        num_values = int(_static(support.upper_bound, name, "number of categories").max()) + 1
        return Categorical(num_values)
    if support is constraints.boolean or isinstance(support, type(constraints.boolean)):
        return Binary()
    if isinstance(support, type(constraints.integer_interval(0, 1))):
        lower = _static(support.lower_bound, name, "lower bound")
        upper = _static(support.upper_bound, name, "upper bound")
        return ordinal_from_bounds(name, lower, upper)
    if isinstance(support, type(constraints.integer_greater_than(0))):
        # counts (Poisson, Geometric, NegativeBinomial*, GammaPoisson, ZeroInflated*, ...):
        # nonnegative_integer and positive_integer are subclasses
        return count_domain(name, _static(support.lower_bound, name, "lower bound"))
    raise unsupported_site_error(name, fn, SUPPORTED)


def subsample_plates(model_trace: dict) -> tuple[SubsamplePlate, ...]:
    """The plates of a traced model that draw a minibatch (``subsample_size < size``)."""
    out = []
    for name, site in model_trace.items():
        if site["type"] != "plate":
            continue
        size, subsample_size = site["args"]
        if subsample_size is not None and int(subsample_size) < int(size):
            out.append(SubsamplePlate(name, int(size), int(subsample_size)))
    return tuple(out)


def latent_in_plates(model_trace: dict, plates: Sequence[SubsamplePlate]) -> dict[str, str]:
    """``{site: plate}`` for the latent sample sites inside one of ``plates``."""
    names = {p.name for p in plates}
    out = {}
    for name, site in model_trace.items():
        if site["type"] != "sample" or site["is_observed"]:
            continue
        inside = [f.name for f in site["cond_indep_stack"] if f.name in names]
        if inside:
            out[name] = inside[0]
    return out


def leaf_specs_for_model(
    kernel_name: str, model_trace: dict, exact_sites: Sequence[str]
) -> tuple[LeafSpec, ...]:
    """Leaf specs of every discrete latent site of a traced model, with input checks."""
    latent = [
        name
        for name, site in model_trace.items()
        if site["type"] == "sample"
        and not site["is_observed"]
        and site["infer"].get("enumerate", "") != "parallel"
    ]
    discrete = [n for n in latent if model_trace[n]["fn"].support.is_discrete]
    check_discrete_sites(
        kernel_name,
        latent,
        discrete,
        exact_sites,
        gibbs="numpyro.infer.Gibbs",
        selector="discrete_latent_sites",
        not_counted="observed sites and sites marked infer={'enumerate': 'parallel'}",
        supported=SUPPORTED,
    )
    specs = []
    for name in discrete:
        domain = domain_of_site(name, model_trace[name])
        exact = isinstance(domain, Categorical) or name in exact_sites
        specs.append(LeafSpec(name, domain, EXACT if exact else GRADIENT))
    return tuple(specs)


def leaf_specs_for_potential(
    domain: Any, treedef: Any, num_leaves: int, names: Sequence[Any] | None = None
) -> tuple:
    """Leaf specs in potential mode from one domain for all leaves or a matching pytree;
    ``names`` (optional) are the leaves' names in messages (the keys of a dict of arrays),
    their indices otherwise."""
    if isinstance(domain, (Binary, Ordinal, Categorical, Integer)):
        domains = [domain] * num_leaves
    else:
        try:
            domains = treedef.flatten_up_to(domain)
        except Exception as error:
            raise ValueError(
                "domain: give one domain (Binary(), Ordinal(S), Categorical(K), Integer()) for "
                "every leaf, or a pytree of domains with the structure of init_params."
            ) from error
    specs = []
    for index, d in enumerate(domains):
        d = as_domain(d, f"domain of leaf {index}")
        mode = ONE_HOT_GRADIENT if isinstance(d, Categorical) else GRADIENT
        specs.append(LeafSpec(index if names is None else names[index], d, mode))
    return tuple(specs)


def coordinate_row_fn(
    log_density: Callable[[tuple], jax.Array], specs: Sequence[LeafSpec]
) -> Callable[[tuple, int, jax.Array], jax.Array]:
    """``(leaves, j, i) -> (S,)``: the log density with flat coordinate ``i`` of leaf ``j``
    set to each of its values, ``S`` evaluations vmapped (a row of the leaf's exact table:
    :class:`discrete_kernels.LocalFnWithRows`)."""

    def row(leaves: tuple, j: int, i: jax.Array) -> jax.Array:
        batch = coordinate_substitutions(specs[j].domain, leaves[j], i)
        return jax.vmap(lambda v: log_density(leaves[:j] + (v,) + leaves[j + 1 :]))(batch)

    return row


def make_local_fn(
    log_density: Callable[[tuple], jax.Array],
    specs: Sequence[LeafSpec],
    element_terms: dict | None = None,
    skipped: frozenset[int] = frozenset(),
) -> Callable[..., tuple[jax.Array, tuple]]:
    """``leaves -> (f, locals)`` for the core, from ``log_density(leaves) -> f``.

    Gradient leaves are differentiated as floats; one-hot leaves (potential mode) are passed
    to ``log_density`` as one-hot floats and differentiated there; exact leaves are
    evaluated at every single-site substitution with ``vmap``; plate leaves from their
    per-coordinate terms (``element_terms[j]: (leaves, v) -> g``, ``g_i(v)`` of the leaf's shape)
    at each of their ``S`` values, every coordinate at once; chain leaves at every change of
    two neighbouring flat coordinates (their pair table, shape (N - 1, S, S)), or, where
    ``element_terms[j]: (f, leaves) -> P`` is given, from the model's terms. The tables of
    the leaves in ``skipped`` (a table leaf the sampler does not read) are left None.
    """
    element_terms = {} if element_terms is None else element_terms
    differentiable = [j for j, s in enumerate(specs) if s.mode not in (EXACT, PLATE, CHAIN)]

    def to_inputs(leaves: tuple, replaced: dict) -> tuple:
        out = list(leaves)
        for j, value in replaced.items():
            out[j] = value
        for j, spec in enumerate(specs):
            if spec.mode == ONE_HOT_GRADIENT and j not in replaced:
                out[j] = jax.nn.one_hot(out[j], spec.domain.num_values)
        return tuple(out)

    def local_fn(leaves: tuple, colour: tuple[int, int] | None = None) -> tuple[jax.Array, tuple]:
        """``(f, locals)``; with ``colour = (j, c)``, only colour ``c``'s rows of coloured
        plate leaf ``j``'s table (the other rows uniform)."""

        def f_of(diff_values: tuple) -> jax.Array:
            return log_density(to_inputs(leaves, dict(zip(differentiable, diff_values))))

        diff_inputs = []
        for j in differentiable:
            spec, x = specs[j], leaves[j]
            if spec.mode == ONE_HOT_GRADIENT:
                diff_inputs.append(jax.nn.one_hot(x, spec.domain.num_values))
            else:
                diff_inputs.append(jnp.asarray(x, dtype=jnp.result_type(float)))
        if differentiable:
            f, grads = jax.value_and_grad(f_of)(tuple(diff_inputs))
        else:
            f, grads = f_of(()), ()
        locals_: list[Any] = [None] * len(specs)
        for j, g in zip(differentiable, grads):
            locals_[j] = g
        for j, spec in enumerate(specs):
            if j in skipped:
                continue
            if spec.mode == PLATE:
                only = colour[1] if colour is not None and colour[0] == j else None
                locals_[j] = _plate_table(f, leaves, j, spec.domain, element_terms[j], only)
            if spec.mode not in (EXACT, CHAIN):
                continue
            x, num_values = leaves[j], spec.domain.num_values
            if spec.mode == CHAIN and j in element_terms:  # from its terms (pair_table(f, leaves))
                locals_[j] = element_terms[j](f, leaves)
                continue
            batch = (
                pair_substitutions(spec.domain, x)
                if spec.mode == CHAIN
                else other_value_substitutions(spec.domain, x)
            )
            values = jax.vmap(lambda v, j=j: log_density(to_inputs(leaves, {j: v})))(batch)
            locals_[j] = (
                jnp.reshape(values, (-1, num_values, num_values))
                if spec.mode == CHAIN
                # the entry at each coordinate's current value is f: N (S - 1) evaluations
                else table_from_other_values(f, values, x, spec.domain)
            )
        return f, tuple(locals_)

    return local_fn


def _plate_table(
    f: jax.Array,
    leaves: tuple,
    j: int,
    domain: Domain,
    terms: Callable,
    only: int | None = None,
) -> jax.Array:
    """The exact table of plate leaf ``j``: its terms ``g_i(v)`` at each value ``v``; with
    ``only``, the rows of that colour of a coloured leaf (the others uniform, ``f``)."""
    x = leaves[j]
    values = jnp.arange(domain.num_values, dtype=x.dtype) + jnp.asarray(domain.low, x.dtype)

    def at(v: jax.Array) -> jax.Array:
        return terms(leaves, v) if only is None else terms(leaves, v, only)

    by_value = jnp.moveaxis(jax.vmap(at)(values), 0, -1)  # (n..., S)
    return table_from_element_terms(f, by_value, x, domain)
