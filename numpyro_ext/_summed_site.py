"""What :class:`~numpyro_ext.MarginalNUTS` sums out and how it checks the split: the summed
site's plan (its shape, plates and values), its groups where it does not split by coordinate,
the handler that masks its plate terms (what remains is the constant ``C``), and the
comparison of a table against the model's own log density at setup."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from numpyro import handlers
from numpyro.primitives import Messenger

from discrete_kernels.groups import GroupLayout
from discrete_kernels.tables import plate_table_mismatch

from ._plates import in_plates

__all__ = [
    "DropPlateTerms",
    "SummedGroups",
    "SummedPlan",
    "first_mismatch",
    "latent_values",
    "seeded",
]


@dataclass(frozen=True)
class SummedPlan:
    """What the kernel sums out: the site, its shape, dtype, plates and values."""

    name: str
    shape: tuple[int, ...]
    dtype: Any
    leaf_dims: tuple[tuple[str, int], ...]
    domain: Any
    split_reason: str | None
    #: the plates among the site's axes where some axis is not one (groups), else None
    group_dims: tuple[tuple[str, int], ...] | None
    #: the model's sample sites (the terms the summed model masks are among them)
    site_names: frozenset

    @property
    def low(self) -> int:
        return int(self.domain.low)

    @property
    def num_values(self) -> int:
        return int(self.domain.num_values)

    @property
    def dims(self) -> dict:
        return dict(self.leaf_dims)


@dataclass(frozen=True, eq=False)
class SummedGroups:
    """How a site that does not split by coordinate is summed: per element of its plates
    ``dims`` over each group's joint values, or (no ``dims``) as one group over the site's."""

    dims: dict
    layout: GroupLayout
    #: every joint value of a group, shape (M, *layout.value_shape)
    values: jax.Array

    @property
    def count(self) -> int:
        return int(self.values.shape[0])

    def decode(self, codes: jax.Array) -> jax.Array:
        """The site's value where group ``g`` takes joint value ``codes[g]``; ``codes`` of
        shape ``layout.group_shape``, the result of the site's shape."""
        flat = jnp.reshape(self.values, (self.count, -1))
        inner = jnp.asarray(self.layout.inner_index())
        return flat[jnp.broadcast_to(codes, self.layout.shape), inner]


class DropPlateTerms(Messenger):
    """Masks every term of the model's own sites ``names`` indexed by the leaf's plates (those
    :func:`element_terms_fn` sums): what remains is ``C``. The change-of-variables factors
    NUTS's potential adds inside the model (``_x_log_det``) are not the model's sites: they
    stay."""

    def __init__(self, fn: Callable | None, leaf_dims: dict, names: frozenset) -> None:
        self.leaf_dims = leaf_dims
        self.names = names
        super().__init__(fn)

    def process_message(self, msg: dict) -> None:
        if (
            msg["type"] == "sample"
            and msg["name"] in self.names
            and in_plates({f.name: f.dim for f in msg["cond_indep_stack"]}, self.leaf_dims)
        ):
            msg["fn"] = msg["fn"].mask(False)


def first_mismatch(table_fn: Callable, compare: Callable, states: jax.Array) -> str | None:
    """The first reason :func:`plate_table_mismatch` gives at the checked ``states`` (stacked),
    or None: ``compare(table, state) -> (predicted rows, exact rows, log density at state)``
    with ``table = table_fn()``, all in one compiled program."""

    @jax.jit
    def check() -> tuple:
        table = table_fn()
        return jax.lax.map(lambda state: compare(table, state), states)

    rows, exact, at_states = (np.asarray(a, np.float64) for a in check())
    for k in range(len(states)):
        reason = plate_table_mismatch(rows[k], exact[k], float(at_states[k]))
        if reason is not None:
            return reason
    return None


def seeded(model: Callable) -> Callable:
    """``model`` under a fresh seed at each call. A ``scan`` in the model asks for a key, and
    NumPyro's ``block`` (around the terms inside the summed model) fetches one from the seed
    outside it: inside a compiled function that stores the function's tracer in the outer
    seed, which then leaks. The key is unused: every site inside has its value."""

    def run(*args: Any, **kwargs: Any) -> Any:
        return handlers.seed(model, rng_seed=0)(*args, **kwargs)

    return run


def latent_values(model_trace: dict, skip: str) -> dict:
    """The values of the latent sample sites of ``model_trace`` but ``skip``."""
    return {
        name: site["value"]
        for name, site in model_trace.items()
        if site["type"] == "sample" and not site["is_observed"] and name != skip
    }
