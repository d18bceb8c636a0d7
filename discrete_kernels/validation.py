"""Checks of user input, written once for both adapters: options, start values, supports.

Every check raises ``ValueError`` (``TypeError`` for a value of the wrong kind) with a message
that names the option or site the user wrote, the value found and what is allowed. The
adapters call these at setup, outside any compiled code, so a bad input never reaches a chain.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import numpy as np
from array_api_compat import device as _device

from ._xp import Array, array_namespace
from .domains import MAX_NUM_VALUES, Binary, Categorical, Domain, Integer

__all__ = [
    "MAX_NUM_VALUES",
    "check_bool",
    "check_bound",
    "check_kernel_options",
    "check_initial_log_density",
    "check_int",
    "check_noise",
    "check_number",
    "check_positive_array",
    "check_resumed_shapes",
    "check_start_value",
    "check_step_arguments",
    "check_step_size",
    "check_symmetric_matrix",
    "format_bytes",
]

# ------------------------------------------------------------------------------------------
# options


def format_bytes(n: float) -> str:
    """``n`` bytes in the largest binary unit that keeps a number >= 1 (``4.0 GB``)."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024:
            return f"{n:.0f} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def _as_scalar(value: Any) -> Any:
    """A 0-d array (numpy, JAX, torch) of a real dtype as the Python number it holds, so that
    ``step_size=jnp.array(0.5)`` is a number like ``0.5``; anything else unchanged (a 0-d
    boolean array stays an array and is refused as a number)."""
    shape = getattr(value, "shape", None)
    if shape is None or tuple(shape) != () or isinstance(value, numbers.Number):
        return value
    dtype = str(getattr(value, "dtype", ""))
    if "bool" in dtype or "complex" in dtype:
        return value
    try:
        item = value.item()
    except (AttributeError, TypeError, ValueError, RuntimeError):
        return value  # a traced value has no number yet: refused below as it is
    return item if isinstance(item, (int, float)) else value


def check_number(
    owner: str,
    option: str,
    value: Any,
    *,
    low: float = 0.0,
    high: float = math.inf,
    low_inclusive: bool = False,
    high_inclusive: bool = False,
) -> float:
    """A real number (Python or numpy scalar, not a bool) inside an interval; returned as float.

    The default interval is ``(0, inf)``: a positive finite number.
    """
    value = _as_scalar(value)
    is_real = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if is_real:
        number = float(value)
        above = number >= low if low_inclusive else number > low
        below = number <= high if high_inclusive else number < high
        if above and below and math.isfinite(number):
            return number
    left, right = "[" if low_inclusive else "(", "]" if high_inclusive else ")"
    what = "a positive finite number" if (low, high) == (0.0, math.inf) else "a finite number"
    raise ValueError(
        f"{owner}: {option} must be {what} in {left}{low:g}, {high:g}{right}, got {value!r}."
    )


def check_int(owner: str, option: str, value: Any, *, minimum: int = 0) -> int:
    """An integer (Python or numpy, or an integral float; not a bool) ``>= minimum``."""
    value = _as_scalar(value)
    ok = False
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        ok = True
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        number = float(value)
        ok = math.isfinite(number) and number == int(number)
    if not ok or int(value) < minimum:
        raise ValueError(f"{owner}: {option} must be an integer >= {minimum}, got {value!r}.")
    return int(value)


def check_bool(owner: str, option: str, value: Any) -> bool:
    """``True`` or ``False`` (numpy's bool too), nothing else."""
    if value is True or value is False or type(value).__name__ == "bool_":
        return bool(value)
    raise ValueError(f"{owner}: {option} must be True or False, got {value!r}.")


def check_positive_array(owner: str, option: str, value: Array) -> Array:
    """Every entry finite and positive (e.g. a preconditioner)."""
    xp = array_namespace(value)
    if not bool(xp.all(xp.isfinite(value) & (value > 0))):
        raise ValueError(f"{owner}: {option} must be finite and positive everywhere.")
    return value


def check_symmetric_matrix(owner: str, option: str, value: Array, size: int) -> Array:
    """A finite symmetric ``(size, size)`` matrix (e.g. AB's ``coupling``)."""
    xp = array_namespace(value)
    if tuple(value.shape) != (size, size):
        raise ValueError(
            f"{owner}: {option} must have shape ({size}, {size}) (all discrete coordinates, "
            f"flattened), got {tuple(value.shape)}."
        )
    if not bool(xp.all(xp.isfinite(value))):
        raise ValueError(f"{owner}: {option} has NaN or infinite entries.")
    scale = float(xp.max(xp.abs(value))) if size else 0.0
    if float(xp.max(xp.abs(value - value.T))) > 1e-6 * max(scale, 1.0):
        raise ValueError(f"{owner}: {option} must be symmetric (W = W^T).")
    return value


def check_site_names(what: str, names: Any, sites: Sequence[str]) -> None:
    """Raise ``ValueError`` if ``names`` (given in option ``what``) are not all in ``sites``,
    listing the unknown ones and the sites there are."""
    unknown = sorted(set(names) - set(sites))
    if unknown:
        raise ValueError(
            f"{what}: {unknown} are not discrete latent sites of the model; the discrete "
            f"latent sites are {list(sites)}."
        )


def check_bound(name: str, model: Any, potential_fn: Any) -> None:
    """A kernel built with neither a model nor a potential (a sampler for the EBM trainers)
    cannot run in ``MCMC``: say so when it is asked to."""
    if model is None and potential_fn is None:
        raise ValueError(
            f"{name}: give exactly one of `model` or `potential_fn` to run it in MCMC (a "
            "kernel built without either only serves as the sampler of an EBM trainer)."
        )


def check_kernel_options(
    name: str,
    model: Any,
    potential_fn: Any,
    domain: Any,
    domain_hint: str,
) -> None:
    """Raise ``ValueError`` naming the argument and what is allowed.

    Parameters
    ----------
    name : str
        The kernel's name, for the messages.
    model, potential_fn, domain
        The constructor's arguments.
    domain_hint : str
        How a pytree of domains is given in this adapter.
    """
    if model is not None and potential_fn is not None:
        raise ValueError(f"{name}: give exactly one of `model` or `potential_fn`.")
    if potential_fn is not None and domain is None:  # (neither: an EBM sampler, see check_bound)
        raise ValueError(
            f"{name}: `potential_fn` needs `domain=` (Binary(), Ordinal(S), Categorical(K), "
            f"or {domain_hint})."
        )
    if model is not None and domain is not None:
        raise ValueError(
            f"{name}: `domain` is for potential mode; a model's site domains come from its "
            "distributions."
        )


# ------------------------------------------------------------------------------------------
# start values


def _few(values: Array) -> str:
    """A short listing of some entries of a 1-d array, for messages."""
    shown = [v.item() if hasattr(v, "item") else v for v in list(values[:5])]
    more = ", ..." if values.shape[0] > 5 else ""
    return ", ".join(repr(v) for v in shown) + more


def check_start_value(
    site: Any,
    domain: Domain,
    value: Array,
    event_shape: Sequence[int],
    *,
    one_hot: bool = False,
    batch_shape: Sequence[int] = (),
) -> None:
    """Refuse a start value that is not a point of the site's support.

    Parameters
    ----------
    site : str or int
        The site's name (or the leaf's index in potential mode), for the message.
    domain : Domain
    value : array
        As the user gave it: shape ``batch_shape + event_shape`` (``+ (K,)`` when one-hot).
    event_shape : shape of the site
    one_hot : bool
        The value is a one-hot encoding of a ``Categorical`` site (last axis ``K``).
    batch_shape : leading axes allowed before ``event_shape`` (one per chain when chains are
        batched by the PPL).

    Raises
    ------
    ValueError
        Naming the site, what was found and what is expected: wrong shape (broadcastable
        shapes are refused too), non-numeric or complex dtype, NaN or infinite entries,
        non-integral floats, values outside the support, or a one-hot value that is not one.
    """
    xp = array_namespace(value)
    label = f"start value of site {site!r}"
    expected = tuple(batch_shape) + tuple(event_shape)
    if one_hot:
        expected = expected + (domain.num_values,)
    if tuple(value.shape) != expected:
        hint = f" (one-hot over {domain.num_values} categories)" if one_hot else ""
        raise ValueError(
            f"The {label} has shape {tuple(value.shape)}; expected {expected}{hint}. "
            "Shapes that merely broadcast are refused."
        )
    if xp.isdtype(value.dtype, "bool"):
        if isinstance(domain, Binary) or one_hot:
            return
        raise ValueError(f"The {label} is boolean, but the site's values are {_support(domain)}.")
    if not xp.isdtype(value.dtype, ("integral", "real floating")):
        raise ValueError(f"The {label} has dtype {value.dtype}; expected integers (or bools).")
    flat = xp.reshape(value, (-1,))
    if xp.isdtype(value.dtype, "real floating"):
        bad = ~xp.isfinite(flat)
        if bool(xp.any(bad)):
            raise ValueError(f"The {label} has NaN or infinite entries: {_few(flat[bad])}.")
        bad = flat != xp.round(flat)
        if bool(xp.any(bad)):
            raise ValueError(f"The {label} has non-integral entries: {_few(flat[bad])}.")
    if one_hot:
        zero_one = bool(xp.all((value == 0) | (value == 1)))
        if not (zero_one and bool(xp.all(xp.sum(value, axis=-1) == 1))):
            raise ValueError(
                f"The {label} is not one-hot: every row along its last axis "
                f"({domain.num_values} categories) must hold a single 1 and 0 elsewhere."
            )
        return
    lower, upper = _bounds(domain, value, tuple(event_shape), len(tuple(batch_shape)))
    bad = xp.reshape((value < lower) | (value > upper), (-1,))
    if bool(xp.any(bad)):
        raise ValueError(
            f"The {label} has entries outside the site's support ({_support(domain)}): "
            f"{_few(flat[bad])}."
        )


def _support(domain: Domain) -> str:
    if isinstance(domain, Binary):
        return "0 or 1"
    if isinstance(domain, Integer):
        if domain.high is None:
            return "integers" if domain.low is None else f"integers >= {domain.low}"
        return (
            f"integers <= {domain.high}"
            if domain.low is None
            else (f"integers {domain.low} .. {domain.high}")
        )
    if isinstance(domain, Categorical):
        return f"categories 0 .. {domain.num_values - 1}"
    if domain.lower is not None or domain.upper is not None:
        return f"integers in per-coordinate bounds within [{domain.low}, {domain.high}]"
    return f"integers {domain.low} .. {domain.high}"


def _bounds(domain: Domain, like: Array, event_shape: tuple, batch_ndim: int):
    """Per-coordinate inclusive bounds, broadcastable to ``batch + event`` shapes."""
    xp = array_namespace(like)
    if isinstance(domain, Binary):
        return 0, 1
    if isinstance(domain, Categorical):
        return 0, domain.num_values - 1
    if isinstance(domain, Integer):
        return (
            -math.inf if domain.low is None else domain.low,
            math.inf if domain.high is None else domain.high,
        )
    lower = domain.low if domain.lower is None else domain.lower
    upper = domain.high if domain.upper is None else domain.upper
    device = _device(like)
    lower = xp.broadcast_to(xp.asarray(lower, device=device), event_shape) if event_shape else lower
    upper = xp.broadcast_to(xp.asarray(upper, device=device), event_shape) if event_shape else upper
    return lower, upper


def check_noise(owner: str, what: str, noise: Any, expected: Sequence[int], like: Array) -> None:
    """One noise array of a core step, checked at trace time (its shape and array library,
    never its values): shape ``expected`` and the array library of ``like`` (a leaf of the
    state). A Python number passes where a scalar is expected.

    Raises
    ------
    ValueError
        Naming ``what`` (e.g. ``"the move uniform"``), the shape found and the one expected.
    TypeError
        Noise from another array library than the state's.
    """
    expected = tuple(expected)
    if isinstance(noise, numbers.Real) and not hasattr(noise, "shape"):
        if expected == ():
            return
        raise ValueError(
            f"{owner}: {what} is a number; expected an array of shape {expected} (noise_shapes)."
        )
    shape = getattr(noise, "shape", None)
    if shape is None or tuple(shape) != expected:
        found = "no shape" if shape is None else f"shape {tuple(shape)}"
        raise ValueError(f"{owner}: {what} has {found}; expected {expected} (noise_shapes).")
    # a numpy scalar (np.float64(0.3)) is a number, whatever the state's array library
    if not isinstance(noise, np.generic) and array_namespace(noise) is not array_namespace(like):
        raise TypeError(
            f"{owner}: {what} is {type(noise).__name__} but the state is "
            f"{type(like).__name__}; draw the noise with the state's array library."
        )


def check_step_size(owner: str, option: str, value: Any) -> None:
    """A core step's step size, read only when it is a Python or numpy number (reading an
    array's value would wait for its device): positive and finite."""
    # concrete types first: an ABC's isinstance of a tensor walks its registry every step
    is_number = isinstance(value, (float, int, np.integer, np.floating)) or (
        not hasattr(value, "shape") and isinstance(value, numbers.Real)
    )
    if is_number and not (math.isfinite(float(value)) and float(value) > 0):
        raise ValueError(f"{owner}: {option} must be a positive finite number, got {value!r}.")


def check_step_arguments(
    owner: str,
    leaves: Sequence[Array],
    uniforms: Sequence[Array],
    step_size: Any,
    *,
    step_option: str = "step_size",
) -> None:
    """A core step's own arguments, checked where it costs nothing (shapes and types at trace
    time; the step size only when it is a Python or numpy number): one uniform array per leaf of the
    leaf's shape, from the leaves' array library, and a positive finite step size (named
    ``step_option`` in the message; None is no step size)."""
    if len(uniforms) != len(leaves):
        raise ValueError(
            f"{owner}: got {len(uniforms)} arrays of proposal uniforms for {len(leaves)} leaves; "
            "give one per leaf (the shapes of the sampler's noise_shapes)."
        )
    for index, (x, u) in enumerate(zip(leaves, uniforms)):
        if u.shape != x.shape:  # tuples, or torch.Size (a tuple)
            raise ValueError(
                f"{owner}: the proposal uniforms of leaf {index} have shape {tuple(u.shape)}; "
                f"expected {tuple(x.shape)}, one per coordinate (noise_shapes)."
            )
        if type(u) is not type(x) and array_namespace(u) is not array_namespace(x):
            raise TypeError(
                f"{owner}: the proposal uniforms of leaf {index} are {type(u).__name__} but the "
                f"state is {type(x).__name__}; draw the noise with the state's array library."
            )
    check_step_size(owner, step_option, step_size)


def check_initial_log_density(
    owner: str,
    log_density: Any,
    sites: Sequence[Any],
    values: Any = None,
    *,
    drawn: Collection[Any] = (),
    terms: Sequence[str] | Callable[[], Sequence[str]] = (),
) -> None:
    """Refuse a start of zero (or NaN) probability: from there no proposal can be judged.

    Parameters
    ----------
    owner : str
        The kernel's name.
    log_density : float or 0-d array
        ``f`` at the start.
    sites : sequence
        The sites' names.
    values : sequence or mapping, optional
        The start values of ``sites`` (in the same order, or by name), shown in the message.
    drawn : collection, optional
        The sites whose start values the kernel drew from the prior (none given by the user):
        the message then says that the model's density is not finite at a value its own prior
        drew, rather than blaming start values the user did not give.
    terms : sequence of str, or a callable returning one, optional
        Sentences from the adapter naming the model's terms that are not finite there (and
        why, where it knows); a callable is called only when the start is refused.
    """
    value = float(log_density)
    if math.isfinite(value):
        return
    shown = list(sites)
    if values is not None:
        if isinstance(values, Mapping):
            values = [values[name] for name in sites]
        shown = [f"{name!r} = {_short(v)}" for name, v in zip(sites, values)]
    drawn_sites = [name for name in sites if name in set(drawn)]
    found = list(terms() if callable(terms) else terms)
    message = f"{owner}: the log density at the start values of {shown} is {value}"
    if drawn_sites:
        given = [name for name in sites if name not in set(drawn)]
        also = f" (those of {given} were given)" if given else ""
        message += (
            f". The start values of {drawn_sites} were drawn from the model's prior by the "
            f"kernel, not given in init_params / initial_params{also}: the model's log density "
            "is not finite at a value drawn from its own prior."
        )
        if found:
            message += " " + " ".join(found)
        else:
            message += (
                " Check the model's terms there (a factor that is -inf, a distribution whose "
                "parameters give NaN), or pass start values of positive probability."
            )
        raise ValueError(message)
    message += "; start from values of positive probability"
    message += (
        " (check init_params / initial_params and that the observed data are possible under "
        "the model)."
    )
    if found:
        message += " " + " ".join(found)
    raise ValueError(
        message + " In a Gibbs block the log density also depends on the other blocks' sites "
        "at their start values (a continuous site drawn from its prior can start where a "
        "factor is -inf): give them start values of positive density too."
    )


def check_resumed_shapes(
    owner: str, state_shapes: Mapping[Any, Sequence[int]], model_shapes: Mapping[Any, Sequence[int]]
) -> None:
    """Refuse to resume a state whose sites' shapes are not those of the model now.

    ``state_shapes``: each site's shape in the state a run starts from (NumPyro's
    ``mcmc.post_warmup_state``, one chain); ``model_shapes``: its shape in the model traced with
    this run's arguments. A state holds its sites' values, cached gradients or tables and the
    adaptation its warmup made for those shapes; data of another size give sites of another
    shape, which no step can continue from.
    """
    for name, shape in state_shapes.items():
        new = model_shapes.get(name)
        if new is None or tuple(new) == tuple(shape):
            continue
        raise ValueError(
            f"{owner}: site {name!r} has shape {tuple(shape)} in the state this run starts from "
            f"(mcmc.post_warmup_state, from the run that warmed the kernel up) but shape "
            f"{tuple(new)} in the model traced with this run's arguments (data of another "
            "size?). A resumed state keeps its sites' shapes and its warmup's adaptation: run a "
            "new warmup for the new data (set mcmc.post_warmup_state = None, then mcmc.run), or "
            "resume with data of the size the warmup saw."
        )


def _short(value: Any) -> str:
    """A start value for a message: a number, or a short array."""
    try:
        array = np.asarray(value.detach().cpu() if hasattr(value, "detach") else value)
    except (TypeError, ValueError, RuntimeError):
        return repr(value)
    if array.ndim == 0:
        return f"{array.item():g}" if array.dtype.kind in "fiu" else str(array.item())
    return np.array2string(array, threshold=8, precision=4)
