"""``jit_compile=True``: the log density through ``torch.jit.trace``, as Pyro's ``HMC`` and
``NUTS`` do with the same option.

One trace records the torch operations of one evaluation of the model (or potential) and
replays them without Python: no Pyro messengers, distribution constructors or validation
checks per evaluation. On the 20x20 dense Ising model a DMALA step costs 60% of what it costs
through Pyro's trace (``docs/benchmarks.md``, "Small models"). A trace is only right for a
model whose operations do not depend on the values (no Python ``if`` on a site's value, no new
minibatch per evaluation): the setup compares the traced and the eager log density at the
start and at a prior draw and refuses the option where they differ (a ``potential_fn`` has no
prior, so there nothing is compared). Torch marks
``torch.jit.trace`` as deprecated (its warning is silenced here; Pyro's own ``jit_compile``
uses the same call).

``torch_compile=True`` on a model traces the same function with ``torch.fx``'s ``make_fx``
instead (``tracer="fx"``): an FX graph of torch operations, which ``torch.compile`` compiles
into the step's program, where it cannot trace Pyro's messengers themselves. Pyro's
validation reads values on the host, which such a trace cannot record: it runs once eagerly
(the setup's own evaluations) and is off while tracing, as a ``torch.jit.trace`` keeps its
outcome as a constant.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import pyro
import torch
from pyro.util import ignore_jit_warnings

from ._target import as_tensor

__all__ = ["TRACER_OPTIONS", "TracedFunction", "traced_of_model"]


#: the option that asks for each tracer (named in the errors)
TRACER_OPTIONS = {"jit": "jit_compile", "fx": "torch_compile"}


class TracedFunction:
    """``values -> fn(values)`` replayed from ``torch.jit.trace`` (``tracer="jit"``) or
    ``torch.fx``'s ``make_fx`` (``tracer="fx"``): one trace per signature of
    its inputs (site names, shapes, dtypes, devices), made at the first call with it and then
    compared with ``fn`` at each of ``points`` (``(label, values)``, cast to the signature's
    dtypes): a ``ValueError`` names the first point where the two differ.

    ``conditioning() -> {site: value}`` gives the values of sites that ``fn`` reads besides
    ``values`` and that change between calls (the other blocks' sites inside
    :class:`pyro_ext.Gibbs`): they are inputs of the trace too (``fn`` receives them among its
    values), so a new conditioning needs no new trace."""

    def __init__(
        self,
        owner: str,
        fn: Callable[[dict], torch.Tensor],
        points: Sequence[tuple[str, dict]] = (),
        conditioning: Callable[[], dict] | None = None,
        source: str = "the model",
        tracer: str = "jit",
    ) -> None:
        if tracer not in TRACER_OPTIONS:
            raise ValueError(f"tracer must be one of {sorted(TRACER_OPTIONS)}, got {tracer!r}")
        self.owner = owner
        self.tracer = tracer
        self.source = source
        self.fn = fn
        self.points = tuple(points)
        self._conditioning = conditioning
        self._traces: dict = {}

    def __call__(self, values: dict) -> torch.Tensor:
        others = self._conditioning() if self._conditioning is not None else {}
        names, other_names = tuple(values), tuple(sorted(others))
        inputs = tuple(as_tensor(values[n]) for n in names)
        inputs += tuple(as_tensor(others[n]) for n in other_names)
        key = (names, other_names, tuple((x.shape, x.dtype, x.device) for x in inputs))
        traced = self._traces.get(key)
        if traced is None:
            traced = self._trace(names, other_names, inputs)
            self._check(traced, values, others)
            self._traces[key] = traced
        return traced(*inputs)

    def _trace(self, names: tuple, other_names: tuple, inputs: tuple) -> Callable:
        own = len(names)

        def flat(*xs: torch.Tensor) -> torch.Tensor:
            values = dict(zip(names, xs[:own]))
            values.update(zip(other_names, xs[own:]))
            return self.fn(values)

        if self.tracer == "fx":
            from torch.fx.experimental.proxy_tensor import make_fx

            with pyro.validation_enabled(False):
                try:
                    return make_fx(flat)(*inputs)
                except RuntimeError as error:  # a value read in Python, as in an `if`
                    first = str(error).strip().splitlines()[0][:200] if str(error) else ""
                    raise ValueError(
                        f"{self.owner}: torch_compile=True: {self.source} cannot be traced "
                        f"({first}); a trace records the torch operations of one evaluation, "
                        f"so {self.source} must run the same operations at every value (no "
                        "Python `if` on a site's value). Pass torch_compile=False."
                    ) from error
        with warnings.catch_warnings():
            # Pyro's checks read values in Python: the tracer warns that it records them as
            # constants (ignore_jit_warnings, as Pyro's jit_compile); and the deprecation
            warnings.filterwarnings("ignore", ".*torch.jit.trace.*deprecated", DeprecationWarning)
            return torch.jit.trace(ignore_jit_warnings()(flat), inputs, check_trace=False)

    def _check(self, traced: Callable, like: dict, others: dict) -> None:
        option = TRACER_OPTIONS[self.tracer]
        for label, point in self.points:
            values = {
                n: torch.as_tensor(point[n]).to(dtype=like[n].dtype, device=like[n].device)
                for n in like
            }
            if any(values[n].shape != as_tensor(like[n]).shape for n in like):
                continue
            with torch.no_grad():
                eager = as_tensor(self.fn({**values, **others}))
                replayed = traced(*values.values(), *(others[n] for n in sorted(others)))
            if eager.shape != replayed.shape:
                found = f"shape {tuple(replayed.shape)} where {self.source} gives shape "
                found += str(tuple(eager.shape))
            elif not bool(_elementwise_close(eager, replayed).all()):
                where = torch.argmax((~_elementwise_close(eager, replayed)).to(torch.uint8))
                found = f"{float(replayed.reshape(-1)[where]):.6g} where {self.source} gives "
                found += f"{float(eager.reshape(-1)[where]):.6g}"
            else:
                continue
            raise ValueError(
                f"{self.owner}: {option}=True: at {label} the trace gives {found}; a trace "
                f"records the torch operations of one evaluation, so {self.source} must run "
                f"the same operations at every value (no Python `if` on a site's value). Pass "
                f"{option}=False."
            )


def _elementwise_close(eager: torch.Tensor, replayed: torch.Tensor) -> torch.Tensor:
    """Equal up to float32 rounding, elementwise (NaN with NaN and an infinity with the same
    infinity count as equal)."""
    replayed = replayed.to(eager.dtype)
    return torch.isclose(replayed, eager, rtol=1e-5, atol=1e-5, equal_nan=True)


def traced_of_model(
    owner: str,
    model: Callable,
    of_model: Callable[[Callable], Callable[[dict], torch.Tensor]],
    points: list[tuple[str, dict]],
    tracer: str = "jit",
) -> TracedFunction:
    """``jit_compile=True``: ``of_model(model)`` (a function of the sites' values: the log
    density, a leaf's per-coordinate terms) through ``torch.jit.trace``, checked at
    ``points``; inside :class:`pyro_ext.Gibbs` it is made of the unconditioned model and the
    other blocks' values are inputs of the trace. ``tracer``: as :class:`TracedFunction`."""
    from .gibbs import _ConditionedModel

    if isinstance(model, _ConditionedModel):
        return TracedFunction(
            owner, of_model(model.model), points, model.conditioning, tracer=tracer
        )
    return TracedFunction(owner, of_model(model), points, tracer=tracer)
