"""NUTS on a model with its plate discrete site summed out exactly, the site drawn from its exact
conditional after each step.

In the models users write, a discrete site in a plate (a class per item, an indicator per row)
often has conditionally independent coordinates given the continuous sites: every term of the
log density that depends on it is indexed by its plate, ``f(x) = C + sum_i g_i(x_i)``. Then
the sum over its ``S^N`` values is ``C + sum_i log sum_v exp g_i(v)``
(:func:`discrete_kernels.tables.summed_out_log_density`): ``S`` evaluations of the model. NUTS
samples the continuous sites from that marginal (no Gibbs between the discrete and the
continuous sites, whose coupling makes such a chain slow), and each draw of the discrete site
is drawn from ``softmax(g_i)`` given them: together a draw of the joint posterior. This is
what enumeration does (NumPyro's ``infer={"enumerate": "parallel"}`` with ``infer_discrete``),
with the structure read from the plates, no rewrite of the model and no ``funsor``.

A site in plates with an axis that is not one (the occasions of a ``scan``: a chain of alive
states per animal) splits by group instead, one per plate element, each summed over its own
joint values (``S^m`` for ``m`` coordinates a group: the same formula with the groups as
coordinates, :class:`discrete_kernels.groups.GroupLayout`). A site that splits neither way
(indicators inside one linear predictor) but that has few joint values is summed over all of
them: one group (:func:`discrete_kernels.tables.joint_values`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
from numpyro import handlers
from numpyro.infer.gibbs import conditioned, discrete_latent_sites
from numpyro.infer.hmc import HMCState, hmc
from numpyro.infer.mcmc import MCMCKernel
from numpyro.infer.util import constrain_fn, initialize_model, log_density, potential_energy
from numpyro.util import is_prng_key

from discrete_kernels._xp import categorical_from_uniform
from discrete_kernels.domains import as_finite
from discrete_kernels.groups import GroupLayout, group_joint_values
from discrete_kernels.tables import (
    PLATE_CHECKED_COORDINATES,
    joint_values,
    plate_check_draws,
    substitutions_at,
    summed_out_log_density,
    table_from_element_terms,
)
from discrete_kernels.validation import check_int

from ._nuts import nuts_progress_text, nuts_settings, start_nuts
from ._plates import element_terms_fn, plate_dims, plate_groups
from ._prior_trace import prior_trace
from ._summed_site import (
    DropPlateTerms,
    SummedGroups,
    SummedPlan,
    first_mismatch,
    latent_values,
    seeded,
)
from ._target import domain_of_site

__all__ = ["MarginalNUTS", "MarginalNUTSState"]


class MarginalNUTSState(NamedTuple):
    """State of :class:`MarginalNUTS`.

    Attributes
    ----------
    z : dict
        The continuous sites' unconstrained values and the summed site's draw.
    diverging : bool
        Whether the NUTS step diverged.
    hmc_state : HMCState
        NUTS's state on the marginal model.
    rng_key : the key of the next discrete draw
    """

    z: dict
    diverging: Any
    hmc_state: HMCState
    rng_key: Any


class MarginalNUTS(MCMCKernel):
    """NUTS on ``model`` with its discrete site summed out exactly; after each step the site
    is drawn from its exact conditional given the continuous sites.

    For a model with one discrete latent site whose coordinates are conditionally independent
    given the continuous sites (every term that depends on it is indexed by its plates: a
    class per item, an indicator per row). A step costs one NUTS trajectory on the marginal
    model, each of whose gradients costs ``S`` evaluations of the model's plate terms (``S``
    values), and one draw of every coordinate. The factorisation is checked at setup against
    single-site changes of the model's log density (at the prior draw and two other states of
    the site). A site that does not factorise (indicators inside one regression's linear
    predictor) is summed over all of its joint values instead when there are at most
    ``max_joint_values`` of them (``2^P`` for ``P`` inclusions): each gradient then costs that
    many evaluations of the whole model, vmapped, and the site is drawn jointly; with more it
    is refused with the reason. Chains: ``chain_method="vectorized"`` (the setup checks the model
    once, at one prior draw, for all the chains) or ``"sequential"``, both tested;
    ``"parallel"`` (pmap over several devices) checks at a fixed prior draw and is untested.
    NUTS is NumPyro's (its functional ``hmc``), started for every chain by one compiled
    program; deterministic sites are computed at the drawn value of the site.

    A site in plates with an axis that is not a plate (the occasions of a ``scan``, a chain
    of states per animal) is summed per plate element over that element's joint values when
    the terms split so (checked at setup the same way) and there are at most
    ``max_joint_values`` of them: each gradient costs that many evaluations of the plate terms.

    Parameters
    ----------
    model : the NumPyro model
    site : str, optional
        The discrete site to sum out; by default the model's only discrete latent site.
    max_joint_values : int
        The most joint values of a site that does not factorise that are summed over.
    **nuts_options
        :class:`numpyro.infer.NUTS`'s options, with its defaults (``target_accept_prob``,
        ``max_tree_depth``, ``dense_mass``, ``init_strategy``...); another name is an error.
    """

    def __init__(
        self,
        model: Callable,
        site: str | None = None,
        *,
        max_joint_values: int = 4096,
        **nuts_options: Any,
    ) -> None:
        self._model = model
        self._site = site
        self._max_joint_values = check_int(
            "MarginalNUTS", "max_joint_values", max_joint_values, minimum=1
        )
        self._plan: SummedPlan | None = None
        #: the groups summed jointly, where the site does not split by coordinate
        self._groups: SummedGroups | None = None
        #: (the data's leaves, the conditional logits compiled for them)
        self._compiled_logits: tuple[list, Callable] | None = None
        self._nuts_settings = nuts_settings("MarginalNUTS", nuts_options)
        #: NUTS's transition on the summed model (batched over vectorised chains), after init
        self._nuts_sample: Callable | None = None

    # --- the marginal model

    def _plan_for(self, trace: dict) -> SummedPlan:
        """The plan for the model whose prior draw is ``trace``."""
        discrete = list(discrete_latent_sites(trace))
        name = self._site
        if name is None:
            if len(discrete) != 1:
                raise ValueError(
                    f"MarginalNUTS: the model has discrete latent sites {discrete}; it sums "
                    "out one (name it with site=), the others would need their own kernel."
                )
            name = discrete[0]
        elif name not in discrete:
            raise ValueError(f"MarginalNUTS: site {name!r} is not one of {discrete}.")
        if len(discrete) > 1:
            raise ValueError(
                f"MarginalNUTS: the model has discrete latent sites {discrete}; summing out "
                f"{name!r} alone needs the others fixed. Use nx.PlateGibbs in a Gibbs block."
            )
        site = trace[name]
        leaf_dims, reason = plate_dims(site)
        domain = as_finite(domain_of_site(name, site))
        value = jnp.asarray(site["value"])
        dims = tuple(sorted(leaf_dims.items()))
        groups = plate_groups(site) if reason is not None else None
        group_dims = None if groups is None else tuple(sorted(groups.items()))
        names = frozenset(n for n, s in trace.items() if s["type"] == "sample")
        return SummedPlan(
            name,
            tuple(value.shape),
            jnp.result_type(value),
            dims,
            domain,
            reason,
            group_dims,
            names,
        )

    def _summed_model(self, *args: Any, **kwargs: Any) -> None:
        """The model with the plan's site summed out: the model with the site's plate terms
        masked (``C``, the site held at its lowest value) and a factor of
        ``sum_i log sum_v exp g_i(v)``; summed by group, ``g_i`` of each group over its joint
        values (summed jointly, one group: every term of the model's own sites masked)."""
        plan = self._plan
        assert plan is not None, "init first"
        fill = jnp.full(plan.shape, plan.low, plan.dtype)
        dims = plan.dims if self._groups is None else self._groups.dims
        with handlers.trace() as model_trace:
            DropPlateTerms(
                handlers.condition(self._model, {plan.name: fill}), dims, plan.site_names
            )(*args, **kwargs)
        values = latent_values(model_trace, plan.name)
        with handlers.block():
            terms = self._logits_fn(args, kwargs)(values)
        numpyro.factor(f"_{plan.name}_summed_out", summed_out_log_density(jnp.zeros(()), terms))

    def _logits_fn(self, args: tuple, kwargs: dict) -> Callable[[dict], jax.Array]:
        """:meth:`conditional_logits` at the data ``args, kwargs``, compiled once per data
        outside a compiled program: NUTS's setup evaluates the summed model op by op (under
        vmap and grad), and one compiled function costs far less than an XLA compilation per
        operation (about 2 s of a 10 s run on 1,000 zero-inflated rows)."""
        leaves = jax.tree.leaves((args, kwargs))
        if any(isinstance(x, jax.core.Tracer) for x in leaves):  # inside jit: inlined anyway
            return lambda values: self.conditional_logits(values, args, kwargs)
        cached = self._compiled_logits
        if cached is not None and len(cached[0]) == len(leaves):
            if all(a is b for a, b in zip(cached[0], leaves, strict=True)):
                return cached[1]
        fn = jax.jit(lambda values: self.conditional_logits(values, args, kwargs))
        self._compiled_logits = (leaves, fn)
        return fn

    def prepare(
        self, rng_key: jax.Array, model_args: tuple, model_kwargs: dict | None = None
    ) -> Callable:
        """Find the site to sum out (tracing the model at a prior draw from ``rng_key``) and
        check that the model splits in it; returns the model with the site summed out (the
        model NUTS samples). :meth:`init` calls it."""
        kwargs = {} if model_kwargs is None else model_kwargs
        trace = prior_trace(self._model, rng_key, model_args, kwargs)
        plan = self._plan_for(trace)
        if plan != self._plan:  # a new model or new data shapes (not every chain of a run)
            self._plan, self._groups = plan, None
            reason = plan.split_reason or self._split_mismatch(trace, model_args, kwargs)
            if reason is not None:
                try:
                    self._groups = self._grouping(reason, trace, model_args, kwargs)
                except ValueError:
                    self._plan = None
                    raise
        return self._summed_model

    def _grouping(self, reason: str, trace: dict, args: tuple, kwargs: dict) -> SummedGroups:
        """How to sum out the plan's site, which does not split by coordinate (``reason``):
        by plate element over each one's joint values where its terms split so, else over
        the site's joint values; a ValueError with the reasons where neither is possible."""
        plan = self._plan
        assert plan is not None
        limit = self._max_joint_values
        if plan.group_dims is not None:
            dims = dict(plan.group_dims)
            axes = {len(plan.shape) + d for d in dims.values()}
            layout = GroupLayout(
                plan.shape, tuple(a for a in range(len(plan.shape)) if a not in axes)
            )
            values = group_joint_values(plan.domain, layout, limit)
            plates = ", ".join(repr(p) for p in dims)
            if values is None:
                reason += (
                    f"; nor summed per element of plate(s) {plates}: more than "
                    f"max_joint_values={limit} joint values each"
                )
            else:
                self._groups = SummedGroups(dims, layout, jnp.asarray(values, plan.dtype))
                mismatch = self._group_split_mismatch(trace, args, kwargs)
                if mismatch is None:
                    return self._groups
                self._groups = None
                reason += f"; nor summed per element of plate(s) {plates}: {mismatch}"
        joint = joint_values(plan.domain, plan.shape, limit)
        if joint is None:
            raise ValueError(
                f"MarginalNUTS: site {plan.name!r} cannot be summed out: {reason}; nor summed "
                f"over its joint values: more than max_joint_values={limit}."
            )
        whole = GroupLayout(plan.shape, tuple(range(len(plan.shape))))
        return SummedGroups({}, whole, jnp.asarray(joint, plan.dtype))

    @property
    def joint_values(self) -> jax.Array | None:
        """Every joint value of the summed site, shape (M, *shape), where it is summed
        jointly (it splits neither by coordinate nor by plate element); else None."""
        groups = self._groups
        return groups.values if groups is not None and not groups.dims else None

    def conditional_logits(self, values: dict, model_args: tuple, model_kwargs: dict) -> jax.Array:
        """The summed site's exact conditional given the continuous sites' constrained
        ``values``, up to a constant (``-inf`` at impossible values); after :meth:`prepare`:
        ``g_i(v)`` per coordinate, shape (n..., S); summed by group, ``g_i`` of each group at
        each of its joint values, shape (*group_shape, M) (the site's shape with the axes that
        are not plates of size 1; summed jointly, one group)."""
        terms = self._terms(values, model_args, model_kwargs)
        return jnp.where(jnp.isnan(terms), -jnp.inf, terms)

    def _terms_fn(self, names: list, args: tuple, kwargs: dict) -> Callable:
        """``(leaves, v) -> g``: the plate terms of the site (or of its groups) with every
        coordinate (group) set to ``v``."""
        plan, groups = self._plan, self._groups
        assert plan is not None
        dims, shape = (plan.dims, plan.shape) if groups is None else (
            groups.dims, groups.layout.group_shape)  # fmt: skip
        model = seeded(conditioned(self._model))
        return element_terms_fn(model, names, 0, dims, shape, args, kwargs)

    def _terms(self, values: dict, args: tuple, kwargs: dict) -> jax.Array:
        """``g_i(v)`` at the continuous ``values``: shape (n..., S), or (*group_shape, M)."""
        plan, groups = self._plan, self._groups
        assert plan is not None
        terms = self._terms_fn([plan.name, *values], args, kwargs)
        leaves = (jnp.zeros(plan.shape, plan.dtype), *values.values())
        candidates = jnp.arange(plan.num_values) + plan.low if groups is None else groups.values
        # vmapped over the values: one copy of the model in the program, not S
        return jnp.moveaxis(jax.vmap(lambda v: terms(leaves, v))(candidates), 0, -1)

    def _draw(self, z: dict, rng_key: jax.Array, args: tuple, kwargs: dict) -> jax.Array:
        """The site drawn from its exact conditional given the continuous sites ``z``
        (unconstrained, as NUTS holds them)."""
        plan = self._plan
        assert plan is not None
        # the continuous sites' constrained values do not depend on the site: the model at
        # any value of it (not the summed model, whose factor costs S evaluations) gives them
        fill = jnp.full(plan.shape, plan.low, plan.dtype)
        at_fill = handlers.condition(self._model, {plan.name: fill})
        constrained = constrain_fn(at_fill, args, kwargs, z)
        terms = self.conditional_logits(constrained, args, kwargs)
        groups = self._groups
        if groups is not None:
            uniform = jax.random.uniform(rng_key, groups.layout.group_shape)
            return groups.decode(categorical_from_uniform(terms, uniform))
        uniform = jax.random.uniform(rng_key, plan.shape)
        return (categorical_from_uniform(terms, uniform) + plan.low).astype(plan.dtype)

    def _split_mismatch(self, trace: dict, args: tuple, kwargs: dict) -> str | None:
        """Why the model's log density does not split as ``C + sum_i g_i(x_i)`` in the site,
        or None where it does: single-site changes of the log density against the split, at
        the prior draw ``trace`` of the continuous sites and three states of the site (setup
        only; one compiled program for the three)."""
        plan = self._plan
        assert plan is not None
        values = latent_values(trace, plan.name)
        masked = DropPlateTerms(self._model, plan.dims, plan.site_names)
        chosen, others = plate_check_draws(plan.domain, plan.shape, seed=0)
        start = jnp.asarray(trace[plan.name]["value"], plan.dtype)
        states = jnp.stack([start, *(jnp.asarray(o, plan.dtype) for o in others)])

        def full(x: jax.Array) -> jax.Array:
            return log_density(self._model, args, kwargs, {**values, plan.name: x})[0]

        def other_terms(x: jax.Array) -> jax.Array:
            return log_density(masked, args, kwargs, {**values, plan.name: x})[0]

        def compare(terms: jax.Array, state: jax.Array) -> tuple:
            """The split's table rows at the chosen coordinates, the model's log density at
            their single-site changes, and at ``state``."""
            flat_terms = jnp.where(jnp.isnan(terms), -jnp.inf, terms).reshape(-1, plan.num_values)
            index = (state.reshape(-1, 1) - plan.low).astype(jnp.int32)
            split = other_terms(state) + jnp.sum(jnp.take_along_axis(flat_terms, index, -1))
            table = table_from_element_terms(split, terms, state, plan.domain)
            rows = table.reshape(-1, plan.num_values)[jnp.asarray(chosen)]
            changes = substitutions_at(plan.domain, state, chosen)
            exact = jax.vmap(full)(changes).reshape(len(chosen), -1)
            return rows, exact, full(state)

        return first_mismatch(lambda: self._terms(values, args, kwargs), compare, states)

    def _group_split_mismatch(self, trace: dict, args: tuple, kwargs: dict) -> str | None:
        """Why the model's log density does not split as ``C + sum_i g_i(x_i)`` over the
        site's groups ``x_i``, or None where it does: at the prior draw ``trace`` of the
        continuous sites and three states of the site, a few groups each set to a few of
        their joint values, the model's log density against ``C`` plus the other groups'
        terms plus the group's table entry (setup only; one compiled program)."""
        plan, groups = self._plan, self._groups
        assert plan is not None and groups is not None
        values = latent_values(trace, plan.name)
        masked = DropPlateTerms(self._model, groups.dims, plan.site_names)
        layout = groups.layout
        num_groups = int(np.prod(layout.group_shape))
        rng = np.random.default_rng(0)
        chosen = jnp.asarray(
            np.sort(
                rng.choice(num_groups, min(num_groups, PLATE_CHECKED_COORDINATES), replace=False)
            )
        )
        picked = jnp.asarray(
            np.sort(rng.choice(groups.count, min(groups.count, 16), replace=False))
        )
        _, others = plate_check_draws(plan.domain, plan.shape, seed=0)
        start = jnp.asarray(trace[plan.name]["value"], plan.dtype)
        states = jnp.stack([start, *(jnp.asarray(o, plan.dtype) for o in others)])
        group_of = jnp.asarray(layout.group_index())
        terms_fn = self._terms_fn([plan.name, *values], args, kwargs)
        rest = tuple(values.values())

        def full(x: jax.Array) -> jax.Array:
            return log_density(self._model, args, kwargs, {**values, plan.name: x})[0]

        def other_terms(x: jax.Array) -> jax.Array:
            return log_density(masked, args, kwargs, {**values, plan.name: x})[0]

        def compare(table: jax.Array, state: jax.Array) -> tuple:
            own = terms_fn((state, *rest), state).reshape(-1)  # g_i(x_i) at the state
            own = jnp.where(jnp.isnan(own), -jnp.inf, own)
            flat_table = table.reshape(num_groups, groups.count)
            constant = other_terms(state)

            def one(g: jax.Array) -> tuple:
                # the other groups' terms summed without g's (a -inf there is not subtracted)
                others_sum = jnp.sum(jnp.where(jnp.arange(num_groups) == g, 0.0, own))
                predicted = constant + others_sum + flat_table[g, picked]
                changed = jax.vmap(
                    lambda v: jnp.where(group_of == g, jnp.broadcast_to(v, plan.shape), state)
                )(groups.values[picked])
                return predicted, jax.vmap(full)(changed)

            predicted, exact = jax.vmap(one)(chosen)
            return predicted, exact, full(state)

        table = partial(self.conditional_logits, values, args, kwargs)
        return first_mismatch(table, compare, states)

    # --- MCMCKernel

    @property
    def model(self) -> Callable:
        return self._model

    @property
    def sample_field(self) -> str:
        return "z"

    @property
    def default_fields(self) -> tuple[str, ...]:
        return ("z", "diverging")

    @property
    def _sample_fn(self) -> Any:
        # MCMC initialises the kernel while this is None
        return self._nuts_sample

    def get_diagnostics_str(self, state: MarginalNUTSState) -> str:
        return nuts_progress_text(state.hmc_state)

    def _potential_gen(self, *args: Any, **kwargs: Any) -> Callable:
        """The summed model's potential energy at the data ``args, kwargs`` (NUTS's
        ``potential_fn_gen``: the data are passed at each step, as NUTS on a model does)."""
        return partial(potential_energy, self._summed_model, args, kwargs)

    def init(
        self,
        rng_key: jax.Array,
        num_warmup: int,
        init_params: dict | None,
        model_args: tuple,
        model_kwargs: dict | None,
    ) -> MarginalNUTSState:
        kwargs = {} if model_kwargs is None else model_kwargs
        chains = not is_prng_key(rng_key)  # vectorised chains: one key per chain
        keys = jax.vmap(jax.random.split, (0, None))(rng_key, 5) if chains else None
        split = jax.random.split(rng_key, 5) if keys is None else jnp.swapaxes(keys, 0, 1)
        key_plan, key_start, key_nuts, key_draw, key_next = split
        if chains:
            # the setup traces and checks the model with concrete values, once for all chains
            key_plan = key_plan[0]
        elif isinstance(key_plan, jax.core.Tracer):  # chains mapped by pmap
            key_plan = jax.random.key(0)
        self.prepare(key_plan, model_args, kwargs)
        plan = self._plan
        assert plan is not None
        if init_params is not None:
            # the continuous sites' start (unconstrained, as NUTS takes it); none given: NUTS's
            # init_strategy's
            init_params = {k: v for k, v in init_params.items() if k != plan.name} or None
        settings = dict(self._nuts_settings)
        init_strategy = settings.pop("init_strategy")
        nuts_init, nuts_sample = hmc(
            potential_fn_gen=self._potential_gen, kinetic_fn=settings.pop("kinetic_fn"), algo="NUTS"
        )

        def start(key_start: Any, key_nuts: Any, key_draw: Any, params: Any) -> tuple:
            if params is None:
                params = initialize_model(
                    key_start,
                    self._summed_model,
                    init_strategy=init_strategy,
                    model_args=model_args,
                    model_kwargs=kwargs,
                ).param_info.z
            hmc_state = start_nuts(
                nuts_init, settings, params, num_warmup, model_args, kwargs, key_nuts
            )
            return hmc_state, self._draw(hmc_state.z, key_draw, model_args, kwargs)

        # one compiled program for the start of every chain: NUTS's setup run op by op costs
        # an XLA compilation per operation (about 3 s of an 8 s run on 1,000 mixture points).
        # The data are constants of the program: nothing it leaves in NUTS's closures is traced
        hmc_state, site = jax.jit(jax.vmap(start) if chains else start)(
            key_start, key_nuts, key_draw, init_params
        )
        energy = np.asarray(hmc_state.potential_energy)
        if not np.all(np.isfinite(energy)):
            raise RuntimeError(
                f"MarginalNUTS: the model with {plan.name!r} summed out has no finite log "
                f"density at the start (potential energy {energy.tolist()}): give init_params "
                "or another init_strategy."
            )
        self._nuts_sample = jax.vmap(nuts_sample, (0, None, None)) if chains else nuts_sample
        return MarginalNUTSState(
            {**hmc_state.z, plan.name: site}, hmc_state.diverging, hmc_state, key_next
        )

    def sample(
        self, state: MarginalNUTSState, model_args: tuple, model_kwargs: dict | None
    ) -> MarginalNUTSState:
        kwargs = {} if model_kwargs is None else model_kwargs
        plan = self._plan
        assert plan is not None and self._nuts_sample is not None, "init first"
        hmc_state = self._nuts_sample(state.hmc_state, model_args, kwargs)  # batched or not

        def draw(z: dict, key: jax.Array) -> tuple[jax.Array, jax.Array]:
            key_draw, key_next = jax.random.split(key)
            return self._draw(z, key_draw, model_args, kwargs), key_next

        chains = not is_prng_key(state.rng_key)  # vectorised chains: one key per chain
        site, key_next = (jax.vmap(draw) if chains else draw)(hmc_state.z, state.rng_key)
        return MarginalNUTSState(
            {**hmc_state.z, plan.name: site}, hmc_state.diverging, hmc_state, key_next
        )

    def postprocess_fn(self, model_args: tuple, model_kwargs: dict | None) -> Callable:
        plan = self._plan
        assert plan is not None, "init first"
        kwargs = {} if model_kwargs is None else model_kwargs

        def fn(z: dict) -> dict:
            # the model at the drawn site: its deterministic sites see the draw
            continuous = {k: v for k, v in z.items() if k != plan.name}
            at_draw = handlers.condition(self._model, {plan.name: z[plan.name]})
            out = constrain_fn(at_draw, model_args, kwargs, continuous, return_deterministic=True)
            return {**out, plan.name: z[plan.name]}

        return fn
