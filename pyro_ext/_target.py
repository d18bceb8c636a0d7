"""From a Pyro model (or a potential) to the core's view: leaves, domains, ``local_fn``.

Nothing here is mathematics: it finds the discrete sites with ``poutine.trace``, maps their
distributions to domains, and evaluates the log density with torch autograd or, for tables,
at every single-site substitution the core builds (or, for a plate leaf, its per-coordinate
terms at each of its values, :mod:`pyro_ext._plates`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.poutine.util import site_is_subsample
from torch.distributions import constraints

from discrete_kernels import Binary, Categorical, Domain
from discrete_kernels import sites as site_rules
from discrete_kernels.domains import as_domain, as_finite
from discrete_kernels.minibatch import SubsamplePlate
from discrete_kernels.sites import (
    EXACT,
    GRADIENT,
    ONE_HOT_GRADIENT,
    PLATE,
    LeafSpec,
)
from discrete_kernels.tables import (
    other_value_substitutions,
    table_from_element_terms,
    table_from_other_values,
)

Values = dict  # {site name: user-facing value}


def as_tensor(value: Any) -> torch.Tensor:
    """``value`` as a tensor; a tensor comes back as it is, on its own device.

    ``torch.as_tensor`` of a tensor copies it to torch's default device when one is set
    (``torch.set_default_device``): a model whose tensors live elsewhere would then see its
    own values moved.
    """
    return value if isinstance(value, torch.Tensor) else torch.as_tensor(value)


def fork_rng():
    """``torch.random.fork_rng`` over the CPU generator and, where CUDA is in use, the current
    CUDA device's: a setup probe that draws from a model on a GPU leaves the kernel's random
    stream as it was (forking only the CPU's would not). CUDA is not started for it."""
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    return torch.random.fork_rng(devices=[torch.cuda.current_device()] if cuda else [])


SUPPORTED = (
    "Bernoulli, Binomial, Categorical, OneHotCategorical and other distributions with a "
    "finite integer support; Poisson, Geometric, NegativeBinomial, GammaPoisson, "
    "ZeroInflated* and other counts (integers >= a bound) with DMALA, DULA or ACS"
)


def check_model_trace(kernel_name: str, model_trace) -> None:
    """Refuse what these kernels cannot sample correctly: sites marked for parallel
    enumeration (subsampling plates: :func:`subsample_plates`, checked by the sampler)."""
    for name, site in model_trace.nodes.items():
        if site["type"] != "sample" or site_is_subsample(site):
            continue
        if not site["is_observed"] and site["infer"].get("enumerate") == "parallel":
            raise ValueError(
                f"{kernel_name}: site {name!r} is marked infer={{'enumerate': 'parallel'}}; "
                "these kernels sample discrete sites instead of enumerating them. Remove the "
                "mark to sample it, or sum it out in the model."
            )


def subsample_plates(model_trace) -> tuple[SubsamplePlate, ...]:
    """The plates of a traced model that draw a minibatch (``subsample_size < size``): Pyro
    draws a new one at every trace of the model and scales the terms inside by ``N / b``."""
    out = []
    for name, site in model_trace.nodes.items():
        if site["type"] != "sample" or not site_is_subsample(site):
            continue
        size = getattr(site["fn"], "size", None)
        subsample_size = getattr(site["fn"], "subsample_size", None)
        if size is not None and subsample_size is not None and subsample_size < size:
            out.append(SubsamplePlate(name, int(size), int(subsample_size)))
    return tuple(out)


def latent_in_plates(model_trace, plates: Sequence[SubsamplePlate]) -> dict[str, str]:
    """``{site: plate}`` for the latent sites inside one of ``plates``."""
    names = {p.name for p in plates}
    out = {}
    for name in latent_sites(model_trace):
        for frame in model_trace.nodes[name]["cond_indep_stack"]:
            if frame.name in names:
                out[name] = frame.name
                break
    return out


def integer_bounds(site: dict) -> tuple[Any, Any] | None:
    """``(lower, upper)`` of a site with an integer-interval or boolean support (as numpy),
    else None."""
    support = site_rules.unwrap_support(site["fn"].support)
    if support is constraints.boolean:
        return 0, 1
    if isinstance(support, constraints.integer_interval):
        to_numpy = lambda b: torch.as_tensor(b).detach().cpu().numpy()  # noqa: E731
        return to_numpy(support.lower_bound), to_numpy(support.upper_bound)
    return None


def domain_of_site(name: str, site: dict) -> tuple[Domain, str]:
    """Domain and local-information mode of a discrete latent site, or a clear error."""
    fn = site["fn"]
    base = site_rules.unwrap_distribution(fn)
    support = site_rules.unwrap_support(fn.support)
    if isinstance(base, dist.OneHotCategorical):
        return Categorical(int(base.probs.shape[-1])), ONE_HOT_GRADIENT
    if isinstance(base, dist.Categorical):
        return Categorical(int(base.probs.shape[-1])), EXACT
    if support is constraints.boolean:
        return Binary(), GRADIENT
    if isinstance(support, constraints.integer_interval):
        bounds = integer_bounds(site)
        assert bounds is not None  # an integer interval has bounds
        return site_rules.ordinal_from_bounds(name, *bounds), GRADIENT
    if isinstance(support, type(constraints.nonnegative_integer)):
        # counts: Poisson, Geometric, NegativeBinomial, GammaPoisson, ZeroInflated*, ...
        lower = torch.as_tensor(support.lower_bound).detach().cpu().numpy()
        return site_rules.count_domain(name, lower), GRADIENT
    raise site_rules.unsupported_site_error(name, fn, SUPPORTED)


def trace_model(model: Callable, args: tuple, kwargs: dict, data: dict | None = None):
    """One trace of the model (sites in ``data`` conditioned)."""
    conditioned = poutine.condition(model, data=data) if data else model
    return poutine.trace(conditioned).get_trace(*args, **kwargs)


def latent_sites(model_trace) -> list[str]:
    return [
        name
        for name, site in model_trace.nodes.items()
        if site["type"] == "sample" and not site["is_observed"] and not site_is_subsample(site)
    ]


def discrete_sites(model_trace) -> list[str]:
    """Names of the unobserved sample sites with a discrete support (a Gibbs site selector)."""
    return [n for n in latent_sites(model_trace) if model_trace.nodes[n]["fn"].support.is_discrete]


def leaf_specs_for_model(
    kernel_name: str, model_trace, exact_sites: Sequence[str]
) -> tuple[LeafSpec, ...]:
    """Leaf specs of every discrete latent site of a traced model, with input checks."""
    latent = latent_sites(model_trace)
    discrete = discrete_sites(model_trace)
    site_rules.check_discrete_sites(
        kernel_name,
        latent,
        discrete,
        exact_sites,
        gibbs="pyro_ext.Gibbs",
        selector="discrete_sites",
        not_counted="observed sites",
        supported=SUPPORTED,
    )
    specs = []
    for name in discrete:
        domain, mode = domain_of_site(name, model_trace.nodes[name])
        if name in exact_sites and mode == GRADIENT:
            mode = EXACT
        specs.append(LeafSpec(name, domain, mode))
    return tuple(specs)


def leaf_specs_for_potential(domain: Any, names: Sequence[str]) -> tuple[LeafSpec, ...]:
    """Leaf specs in potential mode: one domain for every site or a dict of domains."""
    specs = []
    for name in names:
        if isinstance(domain, dict):
            if name not in domain:
                raise ValueError(f"domain: no domain for '{name}'; got keys {sorted(domain)}.")
            d = domain[name]
        else:
            d = domain
        d = as_domain(d, f"domain of '{name}'")
        mode = ONE_HOT_GRADIENT if isinstance(d, Categorical) else GRADIENT
        specs.append(LeafSpec(name, d, mode))
    return tuple(specs)


def to_internal(spec: LeafSpec, value: torch.Tensor) -> torch.Tensor:
    """Internal leaf (categorical as indices) from a user-facing value."""
    if spec.mode == ONE_HOT_GRADIENT:
        return value.argmax(-1)
    return value.detach()


def to_user(spec: LeafSpec, x: torch.Tensor, like: torch.Tensor | None = None) -> torch.Tensor:
    """User-facing value (one-hot where the model expects it) from an internal leaf."""
    if spec.mode == ONE_HOT_GRADIENT:
        dtype = torch.get_default_dtype() if like is None else like.dtype
        return torch.nn.functional.one_hot(x.long(), spec.domain.num_values).to(dtype)
    return x


def model_log_density(model: Callable, args: tuple, kwargs: dict) -> Callable[[dict], Any]:
    """``values -> log joint`` of a model with the given sites conditioned."""

    def log_density(values: dict) -> torch.Tensor:
        return trace_model(model, args, kwargs, values).log_prob_sum()

    return log_density


class NegatedPotential:
    """``values -> -potential_fn(values)``, the log density of a potential; :func:`make_local_fn`
    differentiates ``potential_fn`` itself, seeding its backward pass with -1 (two eager
    operations fewer per step than negating before and after)."""

    def __init__(self, potential_fn: Callable) -> None:
        self.potential_fn = potential_fn

    def __call__(self, values: Values) -> torch.Tensor:
        return -self.potential_fn(values)


def potential_log_density(potential_fn: Callable) -> Callable[[dict], Any]:
    return NegatedPotential(potential_fn)


class _GradientSeeds:
    """The 0-dim tensors (1 or -1) that start a backward pass, one per dtype, device and sign,
    made once: ``torch.autograd.grad`` would otherwise make its ``ones_like`` at every call."""

    def __init__(self) -> None:
        self._seeds: dict = {}

    def __call__(self, like: torch.Tensor, sign: float) -> torch.Tensor:
        # get_device: an int (-1 on the CPU); .device builds a torch.device at every call
        key = (like.dtype, like.get_device(), like.shape, sign)
        seed = self._seeds.get(key)
        if seed is None:
            seed = torch.full(like.shape, sign, dtype=like.dtype, device=like.device)
            self._seeds[key] = seed
        return seed


def _grad_enabled() -> Any:
    """``torch.enable_grad()``, or no context where gradients are on already (the usual case;
    entering and leaving one costs about a microsecond, a step enters two)."""
    return _NO_CONTEXT if torch.is_grad_enabled() else torch.enable_grad()


_NO_CONTEXT = contextlib.nullcontext()


def make_local_fn(
    log_density: Callable[[Values], torch.Tensor],
    specs: Sequence[LeafSpec],
    element_terms: dict | None = None,
    functional: bool = False,
) -> Callable[[tuple], tuple[torch.Tensor, tuple]]:
    """``leaves -> (f, locals)`` for the core, from ``log_density(values) -> f``.

    Gradient and one-hot leaves are differentiated with autograd (``functional=True``: with
    ``torch.func.grad_and_value``, which ``torch.compile`` traces into the same program where
    ``torch.autograd.grad`` would split it); exact leaves are evaluated
    at every single-site substitution (one model evaluation each); plate leaves from their
    per-coordinate terms (``element_terms[j]: values -> g`` of the leaf's shape) at each of
    their ``S`` values, every coordinate at once (:func:`plate_table`).
    ``local_fn(leaves, only=j)`` computes leaf ``j``'s local alone
    (:class:`discrete_kernels.LocalFnByLeaf`).
    """
    element_terms = {} if element_terms is None else element_terms
    negated = log_density.potential_fn if isinstance(log_density, NegatedPotential) else None
    seeds = _GradientSeeds()

    def user_values(leaves: tuple, replaced: dict) -> Values:
        values = {}
        for j, (spec, x) in enumerate(zip(specs, leaves)):
            values[spec.name] = replaced[j] if j in replaced else to_user(spec, x)
        return values

    # which leaves take which local information, decided once (the step calls local_fn twice)
    differentiable = (GRADIENT, ONE_HOT_GRADIENT)
    differentiated = [j for j, spec in enumerate(specs) if spec.mode in differentiable]
    tabulated = any(spec.mode in (PLATE, EXACT) for spec in specs)

    def local_fn(
        leaves: tuple, only: int | None = None, colour: int | None = None
    ) -> tuple[torch.Tensor, tuple]:
        """``(f, locals)``; with ``only``, leaf ``only``'s local alone (the others None), and
        with ``colour`` too, only that colour's rows of a coloured plate leaf's table."""
        diff = {}
        for j in differentiated if only is None else [j for j in differentiated if j == only]:
            spec, x = specs[j], leaves[j]
            if spec.mode == GRADIENT:
                value = x.detach()
                if not value.is_floating_point():
                    value = value.to(torch.get_default_dtype())
            else:
                value = to_user(spec, x)
            # torch.func differentiates its arguments itself
            diff[j] = value if functional else value.requires_grad_(True)
        if functional and diff:
            f, grads = _functional_gradients(log_density, negated, user_values, leaves, diff)
        else:
            f, grads = _autograd_gradients(log_density, negated, seeds, user_values, leaves, diff)
        locals_: list = [None] * len(specs)
        for (j, value), g in zip(diff.items(), grads):
            locals_[j] = torch.zeros_like(value) if g is None else g  # no graph: create_graph off
        if not tabulated:
            return f, tuple(locals_)
        with torch.no_grad():
            for j, spec in enumerate(specs):
                if only is not None and j != only:
                    continue
                if spec.mode == PLATE and spec.colours is not None:
                    locals_[j] = coloured_plate_table(
                        f, leaves, j, spec.domain, element_terms[j], colour
                    )
                elif spec.mode == PLATE:
                    locals_[j] = plate_table(
                        f,
                        leaves,
                        j,
                        spec.domain,
                        element_terms[j],
                        lambda ys: user_values(ys, {}),
                    )
                if spec.mode != EXACT:
                    continue
                x = leaves[j]
                # the current value of each coordinate needs no evaluation: it is f itself
                batch = other_value_substitutions(spec.domain, x)
                values = torch.stack(
                    [log_density(user_values(leaves, {j: value})) for value in batch]
                )
                locals_[j] = table_from_other_values(f, values, x, spec.domain)
        return f, tuple(locals_)

    return local_fn


def _autograd_gradients(
    log_density: Callable,
    negated: Callable | None,
    seeds: _GradientSeeds,
    user_values: Callable,
    leaves: tuple,
    diff: dict,
) -> tuple[torch.Tensor, tuple]:
    """``(f, gradients)``: the log density at ``leaves`` (detached) and its gradients with
    respect to ``diff``'s values (tensors that require grad; None where unused), by autograd."""
    with _grad_enabled():
        if diff and negated is not None:  # differentiate the potential, negated in the seed
            potential = negated(user_values(leaves, diff))
            # an alias and a negation: 1.4 µs, where one negation under no_grad takes 2.9
            # (entering and leaving the context)
            f = -potential.detach()
            seed = seeds(potential, -1.0)
            return f, torch.autograd.grad(potential, list(diff.values()), seed, allow_unused=True)
        f = log_density(user_values(leaves, diff))
        grads: tuple = ()
        if diff:
            seed = seeds(f, 1.0)
            grads = torch.autograd.grad(f, list(diff.values()), seed, allow_unused=True)
        return f.detach(), grads


def _functional_gradients(
    log_density: Callable,
    negated: Callable | None,
    user_values: Callable,
    leaves: tuple,
    diff: dict,
) -> tuple[torch.Tensor, tuple]:
    """``(f, gradients)`` as :func:`_autograd_gradients`, by ``torch.func.grad_and_value``
    (zeros where a value is unused)."""
    positions = list(diff)

    def of(*values: torch.Tensor) -> torch.Tensor:
        replaced = dict(zip(positions, values))
        if negated is not None:
            return -negated(user_values(leaves, replaced))
        return log_density(user_values(leaves, replaced))

    argnums = tuple(range(len(positions)))
    grads, f = torch.func.grad_and_value(of, argnums=argnums)(*diff.values())
    return f.detach(), tuple(grads)


def coloured_plate_table(
    f: torch.Tensor,
    leaves: tuple,
    j: int,
    domain: Domain,
    coloured_terms: Callable[[tuple, int, int | None], torch.Tensor],
    colour: int | None = None,
) -> torch.Tensor:
    """The exact single-site table of coloured leaf ``j`` (shape (n..., S)): for each value,
    its terms summed by owner colour by colour (``coloured_terms(leaves, v, colour)``, C
    evaluations: :func:`pyro_ext._plates.coloured_terms_fn`), completed by the log density
    ``f``. With ``colour``, that colour's rows alone (one evaluation per value; the other
    rows are uniform, ``f`` at every value: a draw of ``colour`` does not read them)."""
    x = leaves[j]
    domain = as_finite(domain)
    values = range(domain.low, domain.low + domain.num_values)  # S: small
    stacked = torch.stack([coloured_terms(leaves, v, colour) for v in values], dim=-1)
    stacked = stacked.to(f.dtype)
    return table_from_element_terms(f.detach(), stacked, x, domain)


def plate_table(
    f: torch.Tensor,
    leaves: tuple,
    j: int,
    domain: Domain,
    terms: Callable[[Values], torch.Tensor],
    to_values: Callable[[tuple], Values],
) -> torch.Tensor:
    """The exact table of plate leaf ``j``: its terms with every coordinate at each of its
    ``S`` values (``S`` model evaluations, each over all coordinates at once), completed by
    the log density ``f`` at ``leaves``.

    Parameters
    ----------
    f : scalar tensor, the log density at ``leaves``
    leaves : internal leaves; leaf ``j`` of shape (n...)
    j : the plate leaf's index
    domain : its domain (``S`` values)
    terms : ``values -> g``, shape (n...) (:func:`pyro_ext._plates.element_terms_fn`)
    to_values : the sites' user-facing values from internal leaves

    Returns
    -------
    tensor, shape (n..., S)
    """
    x = leaves[j]
    by_value = []
    domain = as_finite(domain)
    for value in range(domain.low, domain.low + domain.num_values):  # S: small
        every = torch.full_like(x, value)
        by_value.append(terms(to_values(leaves[:j] + (every,) + leaves[j + 1 :])))
    stacked = torch.stack(by_value, dim=-1).to(f.dtype)  # (n..., S)
    return table_from_element_terms(f.detach(), stacked, x, domain)


def prior_values(model_trace: Any, leaves: tuple[LeafSpec, ...]) -> dict:
    """The leaves' values in ``model_trace``, detached."""
    return {s.name: model_trace.nodes[s.name]["value"].detach() for s in leaves}


def draw_prior_values(
    model: Callable, args: tuple, kwargs: dict, leaves: tuple[LeafSpec, ...]
) -> dict:
    """A fresh prior draw of the leaves' sites, the user's random stream left as it was."""
    with fork_rng():
        return prior_values(trace_model(model, args, kwargs), leaves)
