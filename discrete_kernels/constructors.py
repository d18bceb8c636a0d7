"""The kernels' constructors, written once for both adapters.

Each class here takes a sampler's public options, checks them (through the spec factories of
:mod:`discrete_kernels.samplers`) and hands the spec to the adapter's driver through
``_init_driver``. An adapter's kernel is then the constructor plus its driver::

    class DMALA(DMALAConstructor, numpyro_ext.DiscreteKernel):
        '''docstring'''

so the signatures, defaults and option checks cannot drift between NumPyro and Pyro.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

from . import ab as _ab
from . import acs as _acs
from .leaves import exact_sites_option
from .options import check_kernel_options
from .samplers import (
    ESHSpec,
    SamplerSpec,
    ab_spec,
    acs_spec,
    dlp_spec,
    esh_spec,
    gibbs_spec,
    gwg_spec,
)

__all__ = [
    "ABConstructor",
    "ACSConstructor",
    "DMALAConstructor",
    "DULAConstructor",
    "DiscreteGibbsConstructor",
    "ESHConstructor",
    "GWGConstructor",
    "KernelConstructor",
]


class KernelConstructor:
    """The options every discrete kernel keeps, checked and stored once; a driver
    (:class:`numpyro_ext.base.DiscreteKernel`, :class:`pyro_ext.base.DiscreteKernel`) adds its
    PPL's own fields in :meth:`_init_ppl` and says how a pytree of domains is written there
    (``_domain_hint``, for messages)."""

    _name = "kernel"
    _spec: SamplerSpec
    _domain_hint = "a pytree of them"

    def _init_driver(
        self,
        model: Callable | None,
        *,
        potential_fn: Callable | None,
        domain: Any,
        spec: SamplerSpec,
        exact_sites: Sequence[str] | str = "auto",
        preconditioner: Any = None,
    ) -> None:
        check_kernel_options(self._name, model, potential_fn, domain, self._domain_hint)
        self._model = model
        self._potential_fn = potential_fn
        self._domain = domain
        self._spec = spec
        self._preconditioner = preconditioner
        self._auto_exact, self._exact_sites = exact_sites_option(self._name, exact_sites)
        self._init_ppl()

    def _init_ppl(self) -> None:
        """The driver's own fields (resolved at setup)."""
        raise NotImplementedError

    def _as_array(self, value: Any) -> Any:
        """``value`` as a float array of the driver's backend."""
        raise NotImplementedError


class DMALAConstructor(KernelConstructor):
    _name = "DMALA"
    _metropolis = True
    _adapt_default = True

    def __init__(
        self,
        model: Callable | None = None,
        *,
        potential_fn: Callable | None = None,
        domain: Any = None,
        step_size: float = 0.5,
        adapt_step_size: bool | None = None,
        target_accept_prob: float = 0.574,
        preconditioner: Any = None,
        exact_sites: Sequence[str] | str = "auto",
    ) -> None:
        spec = dlp_spec(
            self._name,
            step_size,
            adapt_step_size,
            target_accept_prob,
            metropolis=self._metropolis,
            adapt_default=self._adapt_default,
        )
        self._init_driver(
            model,
            potential_fn=potential_fn,
            domain=domain,
            spec=spec,
            exact_sites=exact_sites,
            preconditioner=preconditioner,
        )


class DULAConstructor(DMALAConstructor):
    _name = "DULA"
    _metropolis = False
    _adapt_default = False


class GWGConstructor(KernelConstructor):
    _name = "GWG"

    def __init__(
        self,
        model: Callable | None = None,
        *,
        potential_fn: Callable | None = None,
        domain: Any = None,
        step_size: float | None = None,
        exact_sites: Sequence[str] | str = "auto",
    ) -> None:
        spec = gwg_spec(step_size, self._name)
        self._init_driver(
            model, potential_fn=potential_fn, domain=domain, spec=spec, exact_sites=exact_sites
        )


class ACSConstructor(KernelConstructor):
    _name = "ACS"

    def __init__(
        self,
        model: Callable | None = None,
        *,
        potential_fn: Callable | None = None,
        domain: Any = None,
        steps_per_cycle: int = 8,
        beta_max: float = 0.95,
        target_accept_prob: float = 0.5,
        alpha_floor: float = 0.05,
        alpha_ceil: float = 5.0,
        alpha_max: float | None = None,
        alpha_min: float | None = None,
        beta_schedule: Sequence[float] | None = None,
        tuning: dict | None = None,
        exact_sites: Sequence[str] | str = "auto",
    ) -> None:
        spec = acs_spec(
            steps_per_cycle,
            beta_max,
            target_accept_prob,
            alpha_floor,
            alpha_ceil,
            alpha_max,
            alpha_min,
            beta_schedule,
            tuning,
        )
        self._init_driver(
            model, potential_fn=potential_fn, domain=domain, spec=spec, exact_sites=exact_sites
        )

    @property
    def config(self) -> _acs.ACSConfig:
        """The validated options."""
        return self._spec.config  # type: ignore[attr-defined]


class ABConstructor(KernelConstructor):
    _name = "AB"

    def __init__(
        self,
        model: Callable | None = None,
        *,
        potential_fn: Callable | None = None,
        domain: Any = None,
        variant: str = "1st",
        step_size: float = 0.1,
        balance: float = 0.5,
        adapt: bool = True,
        rate: float = 0.2,
        decay: float = 0.9,
        block_size: int | None = None,
        burn_in: int | None = None,
        max_doublings: int = 3,
        initial_steps: int | None = None,
        coupling: Any = None,
        exact_sites: Sequence[str] | str = "auto",
        alpha: float | None = None,
    ) -> None:
        if alpha is not None:
            warnings.warn(
                f"{self._name}: `alpha` is now called `balance` (the exponent of "
                "(pi(y) / pi(x))^balance); `alpha` will be removed.",
                FutureWarning,
                stacklevel=2,
            )
            balance = alpha
        spec = ab_spec(
            variant,
            step_size,
            balance,
            adapt,
            rate,
            decay,
            block_size,
            burn_in,
            max_doublings,
            None if coupling is None else self._as_array(coupling),
            self._name,
            initial_steps,
        )
        # AB-1st takes exact differences like DMALA; quadratic proposals need every gradient
        self._supports_auto_exact = not spec.quadratic
        self._init_driver(
            model, potential_fn=potential_fn, domain=domain, spec=spec, exact_sites=exact_sites
        )

    @property
    def config(self) -> _ab.ABConfig:
        """The validated options."""
        return self._spec.config  # type: ignore[attr-defined]


class DiscreteGibbsConstructor(KernelConstructor):
    _name = "DiscreteGibbs"
    _supports_auto_exact = False  # exact conditionals already, no local differences

    def __init__(
        self,
        model: Callable | None = None,
        *,
        potential_fn: Callable | None = None,
        domain: Any = None,
        random_walk: bool = False,
        modified: bool = False,
    ) -> None:
        spec = gibbs_spec(random_walk, modified)
        self._init_driver(
            model, potential_fn=potential_fn, domain=domain, spec=spec, exact_sites=()
        )


class ESHConstructor:
    """ESH's options, checked once (:func:`discrete_kernels.samplers.esh_spec`); the adapter's
    ``_init_driver`` keeps the model or potential and the spec."""

    _name = "ESH"
    _spec: ESHSpec

    def __init__(
        self,
        model: Callable | None = None,
        *,
        potential_fn: Callable | None = None,
        step_size: float | None = None,
        num_steps: int | None = None,
        exact: bool = True,
    ) -> None:
        if (model is None) == (potential_fn is None):
            raise ValueError(f"{self._name}: give exactly one of `model` or `potential_fn`.")
        spec = esh_spec(step_size, num_steps, exact)
        self._init_driver(model, potential_fn=potential_fn, spec=spec)

    @property
    def adaptation(self):
        """The warmup adaptation's settings (:class:`discrete_kernels.esh.ESHAdaptation`)."""
        return self._spec.adaptation

    _init_driver: Callable[..., None]  # the adapter's: keeps the model or potential and spec
