"""Small models, where a step costs the library's own work more than the gradient.

Run ``python benchmarks/small_models.py`` (``--quick``: small sizes, nothing written). Three
tables, each ratio taken within one run:

1. **NumPyro, ``MCMC(nx.DMALA(model))`` against a plain ``lax.scan``** of the same DMALA
   update (binary sites, the gradient carried, one ``value_and_grad`` per step, one key per
   chain split each step, every 10th draw kept on both sides), on Ising models written as a
   NumPyro model (one ``Bernoulli`` site, one ``factor``) at d = 100 to 10^4 and 1, 4 and 16
   vectorised chains, fixed step size 0.2. Whole run (compilation included: what a user
   waits for), and the steady state per step (the scan: a second call; ``MCMC``: the
   difference of runs of n and 3n draws, which cancels setup and compilation), beside one
   batched ``value_and_grad`` of the model (the floor).
2. **Against NumPyro's ``DiscreteGibbs`` at equal wall time**: 4 chains each, a budget of
   seconds per sampler (compilation included), ESS of the energy.
3. **Pyro, one chain**: ``px.DMALA(model)`` on the 20x20 dense Ising model, ``kernel.sample``
   in a loop and ``pyro.infer.MCMC``, against a plain torch loop of the same update.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC, DiscreteGibbs

import numpyro_ext as nx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    CRITICAL_COUPLING,
    dense_ising_log_density,
    ess,
    ising_coupling_matrix,
    ising_log_density,
    ratio_under_rule,
    write_section,
)
from _torch_operations import aten_operations_per_step  # noqa: E402
from scaling import floor_step_seconds  # noqa: E402

STEP_SIZE = 0.2

#: every 10th draw kept by every loop (memory: 3 x 20,000 draws of 16 chains); NumPyro's
#: ``MCMC`` still fills its collection at every draw
THINNING = 10

#: (label, side, dense coupling matrix): d = side^2
CASES = [
    ("Ising 10x10, dense matrix", 10, True),
    ("Ising 20x20, dense matrix", 20, True),
    ("Ising 32x32, dense matrix", 32, True),
    ("Ising 100x100, shifted lattices", 100, False),
]


def target(side: int, dense: bool) -> Callable:
    """The Ising log density of ``x`` (shape (side^2,)) as the model's factor."""
    if dense:
        return dense_ising_log_density(jnp.asarray(ising_coupling_matrix(side)))
    return lambda x: ising_log_density(x, CRITICAL_COUPLING)


def ising_model(side: int, log_density: Callable) -> Callable:
    """The model a user writes: uniform Bernoulli sites and one ``factor``."""

    def model() -> None:
        x = numpyro.sample("x", dist.Bernoulli(0.5).expand([side * side]))
        numpyro.factor("ising", log_density(x))

    return model


def model_log_density(log_density: Callable) -> Callable:
    """The model's log density in ``x``: the factor and the Bernoulli(0.5) prior."""
    prior = dist.Bernoulli(0.5)

    def full(x: Any) -> Any:
        return log_density(x) + jnp.sum(prior.log_prob(x))

    return full


# ------------------------------------------------------------------------------ NumPyro


def hand_step(log_density: Callable, d: int) -> Callable:
    """DMALA on binary ``x`` written by hand, vmapped over chains: ``(x, f, g, keys) -> (x, f,
    g, keys)`` with the gradient carried, one ``value_and_grad`` per step and each chain's key
    split once per step (all uniforms of a step from one draw of an even count, as the driver
    does)."""
    value_and_grad = jax.value_and_grad(log_density)
    term = 1.0 / (2.0 * STEP_SIZE)

    def one(x, f, g, key):
        key, draw = jax.random.split(key)
        # an even count, as the driver draws (numpyro_ext._noise: XLA's threefry is 2-3x
        # slower for odd counts above about 2,000)
        u = jax.random.uniform(draw, (d + 1 + (d + 1) % 2,))
        logit = 0.5 * g * (1.0 - 2.0 * x) - term
        flip = u[:d] < jax.nn.sigmoid(logit)
        y = jnp.where(flip, 1.0 - x, x)
        log_forward = jnp.sum(
            jnp.where(flip, jax.nn.log_sigmoid(logit), jax.nn.log_sigmoid(-logit))
        )
        f_y, g_y = value_and_grad(y)
        logit_y = 0.5 * g_y * (1.0 - 2.0 * y) - term
        log_reverse = jnp.sum(
            jnp.where(flip, jax.nn.log_sigmoid(logit_y), jax.nn.log_sigmoid(-logit_y))
        )
        accept = jnp.log(u[d]) < f_y - f + log_reverse - log_forward
        x = jnp.where(accept, y, x)
        return x, jnp.where(accept, f_y, f), jnp.where(accept, g_y, g), key

    return jax.vmap(one)


def hand_start(log_density: Callable, d: int, chains: int, key: Any) -> tuple:
    """The plain loop's start ``(x, f, g, keys)``: x from Bernoulli(1/2)."""
    key_start, key_chains = jax.random.split(key)
    x = jax.random.bernoulli(key_start, 0.5, (chains, d)).astype(jnp.float32)
    f, g = jax.vmap(jax.value_and_grad(log_density))(x)
    return x, f, g, jax.random.split(key_chains, chains)


def hand_scan(log_density: Callable, d: int, chains: int, num_steps: int) -> Callable:
    """``key -> draws``: :func:`hand_step` in one ``lax.scan`` of ``num_steps`` steps over
    ``chains`` chains, every ``THINNING``-th draw kept (what a user writes without the
    library)."""
    step = hand_step(log_density, d)

    def body(carry, _):
        carry = jax.lax.fori_loop(0, THINNING, lambda i, c: step(*c), carry)
        return carry, carry[0]

    @jax.jit
    def run(key):
        carry = hand_start(log_density, d, chains, key)
        return jax.lax.scan(body, carry, None, length=num_steps // THINNING)[1]

    return run


def timed_call(fn: Callable, *args: Any) -> tuple[float, float]:
    """``(wall, cpu)`` seconds of ``fn(*args)`` (CPU: this process's, all threads; the
    steadier of the two on a loaded machine)."""
    wall, cpu = time.perf_counter(), time.process_time()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - wall, time.process_time() - cpu


def mcmc_seconds(
    model: Callable, chains: int, num_steps: int, seed: int = 0
) -> tuple[float, float]:
    """``(wall, cpu)`` of ``MCMC(nx.DMALA(model))`` for ``num_steps`` draws of ``chains``
    vectorised chains at the fixed step size, everything included (setup, compilation)."""
    kernel = nx.DMALA(model, step_size=STEP_SIZE, adapt_step_size=False)
    mcmc = MCMC(
        kernel,
        num_warmup=0,
        num_samples=num_steps,
        num_chains=chains,
        chain_method="vectorized",
        progress_bar=False,
        thinning=THINNING,
    )
    return timed_call(lambda: (mcmc.run(jax.random.key(seed)), mcmc.get_samples())[1])


def driver_loop(model: Callable, chains: int, num_steps: int) -> tuple[Callable, Any]:
    """``nx.DMALA(model).sample`` in a compiled loop of ``num_steps`` (no ``MCMC``, nothing
    collected): the driver's own step; ``(loop, start state)``."""
    kernel = nx.DMALA(model, step_size=STEP_SIZE, adapt_step_size=False)
    keys = jax.random.split(jax.random.key(0), chains) if chains > 1 else jax.random.key(0)
    state = kernel.init(keys, 0, None, (), {})
    loop = jax.jit(
        lambda s: jax.lax.fori_loop(0, num_steps, lambda i, c: kernel.sample(c, (), {}), s)
    )
    return loop, state


def driver_rows(
    quick: bool, repeats: int, sides: list[int] | None = None, chain_counts: list[int] | None = None
) -> list[dict]:
    """Table 1: per case and chain count, whole-run and steady-state times (medians over
    interleaved repeats); ``sides`` and ``chain_counts`` select rows."""
    cases = CASES[:2] if quick else CASES
    cases = [c for c in cases if sides is None or c[1] in sides]
    rows = []
    for label, side, dense in cases:
        d = side * side
        log_density = target(side, dense)
        model = ising_model(side, log_density)
        full = model_log_density(log_density)
        for chains in chain_counts or ((1, 4) if quick else (1, 4, 16)):
            floor = floor_step_seconds(full, d, chains, 0.05 if quick else 0.5)
            # 20,000 steps up to about 2 s of value_and_grad (the protocol)
            num_steps = int(min(20_000, max(500, (0.2 if quick else 2.0) / floor)))
            loop, state = driver_loop(model, chains, num_steps)
            jax.block_until_ready(loop(state))  # compiled once, timed at later calls
            timings: dict[str, list[float]] = {}

            def add(name: str, value: float, timings: dict = timings) -> None:
                timings.setdefault(name, []).append(value)

            for repeat in range(repeats):  # interleaved; each run compiles anew
                hand = hand_scan(full, d, chains, num_steps)
                key = jax.random.key(repeat)
                wall, cpu = timed_call(hand, key)
                add("hand", wall)
                add("hand_cpu", cpu)
                add("hand_s", timed_call(hand, key)[0] / num_steps)
                add("loop_s", timed_call(loop, state)[0] / num_steps)
                wall, cpu = mcmc_seconds(model, chains, num_steps, repeat)
                add("mcmc", wall)
                add("mcmc_cpu", cpu)
                wall3, cpu3 = mcmc_seconds(model, chains, 3 * num_steps, repeat)
                add("mcmc_s", max(wall3 - wall, 1e-9) / (2 * num_steps))
                add("mcmc_s_cpu", max(cpu3 - cpu, 1e-9) / (2 * num_steps))
            row = {k: float(np.median(v)) for k, v in timings.items()}
            row.update(case=label, d=d, chains=chains, steps=num_steps, floor=floor)
            rows.append(row)
            print(
                f"{label} chains={chains} steps={num_steps}: whole run MCMC/scan "
                f"{row['mcmc'] / row['hand']:.2f} (cpu {row['mcmc_cpu'] / row['hand_cpu']:.2f}); "
                f"steady MCMC {1e6 * row['mcmc_s']:.1f} us (cpu {1e6 * row['mcmc_s_cpu']:.1f}), "
                f"driver loop {1e6 * row['loop_s']:.1f}, scan {1e6 * row['hand_s']:.1f} us, "
                f"value_and_grad {1e6 * floor:.1f} us",
                flush=True,
            )
    return rows


def energy_ess(x: Any, full: Callable) -> float:
    """ESS of the energy of draws ``x`` of shape (chains, draws, d)."""
    energy = -jax.vmap(jax.vmap(full))(jnp.asarray(x, jnp.float32))
    return ess(np.asarray(energy))


def gibbs_run(name: str, model: Callable, num_samples: int, seed: int) -> tuple[Any, float]:
    """Draws of x grouped by chain and the wall time (compilation included) of 4 chains of
    DMALA (vectorised, defaults: step size adapted) or DiscreteGibbs (sequential, the method
    it supports); warmup a quarter of the sampling."""
    if name == "DMALA":
        kernel, method = nx.DMALA(model), "vectorized"
    else:
        kernel, method = DiscreteGibbs(model), "sequential"
    mcmc = MCMC(
        kernel,
        num_warmup=max(1, num_samples // 4),
        num_samples=num_samples,
        num_chains=4,
        chain_method=method,
        progress_bar=False,
    )
    start = time.perf_counter()
    mcmc.run(jax.random.key(seed))
    x = jax.block_until_ready(mcmc.get_samples(group_by_chain=True)["x"])
    return x, time.perf_counter() - start


#: most draws per chain of an equal-time run
MAX_EQUAL_TIME_DRAWS = 20_000


def equal_time_rows(quick: bool, budget: float, sides: list[int] | None = None) -> list[dict]:
    """Table 2: each sampler given ``budget`` seconds (draws from probes of ``n`` and ``4n``
    draws: fixed cost and cost per draw), ESS of the energy."""
    cases = CASES[:1] if quick else CASES
    rows = []
    for label, side, dense in cases:
        if sides is not None and side not in sides:
            continue
        log_density = target(side, dense)
        model = ising_model(side, log_density)
        full = model_log_density(log_density)
        for name in ("DMALA", "DiscreteGibbs"):
            # probes of n and 4n draws, n growing 4-fold until their difference stands out of
            # the compilation's noise (two probes of 2 and 6 draws once put DiscreteGibbs's
            # cost per draw near 0 and its "5 s" run at 544 s)
            probe = 20 if name == "DMALA" else 2
            t1 = gibbs_run(name, model, probe, 0)[1]
            while True:
                t2 = gibbs_run(name, model, 4 * probe, 0)[1]
                if t2 - t1 >= max(0.5, 0.25 * t1) or 16 * probe > MAX_EQUAL_TIME_DRAWS:
                    break
                probe, t1 = 4 * probe, t2
            per_draw = max(t2 - t1, 1e-6) / (3 * probe * 1.25)
            fixed = max(t1 - 1.25 * probe * per_draw, 0.0)
            # capped: two short probes can differ by less than their timing noise, and a
            # per-draw cost near zero asked for millions of draws (out of memory)
            num = int(min(max(8, (budget - fixed) / (1.25 * per_draw)), MAX_EQUAL_TIME_DRAWS))
            x, seconds = gibbs_run(name, model, num, 1)
            value = energy_ess(x, full)
            rows.append(
                dict(
                    case=label,
                    d=side * side,
                    sampler=name,
                    draws=num,
                    seconds=seconds,
                    ess=value,
                    ess_per_second=value / seconds,
                )
            )
            print(rows[-1], flush=True)
    return rows


# ------------------------------------------------------------------------------ Pyro


def pyro_rows(quick: bool, repeats: int) -> list[dict]:
    """Table 3: one chain of the 20x20 dense model in Pyro: ``px.DMALA`` (``kernel.sample``
    in a loop, and ``pyro.infer.MCMC``) against a plain torch loop of the same update,
    interleaved; seconds per step."""
    import pyro
    import pyro.distributions as pdist
    import torch
    from pyro.infer import MCMC as PyroMCMC

    import pyro_ext as px

    torch.set_num_threads(1)
    side = 20
    d = side * side
    a = torch.as_tensor(ising_coupling_matrix(side))

    def log_density(x: torch.Tensor) -> torch.Tensor:
        s = 2.0 * x - 1.0
        return 0.5 * s @ a @ s

    def model() -> None:
        x = pyro.sample("x", pdist.Bernoulli(torch.full((d,), 0.5)).to_event(1))
        pyro.factor("ising", log_density(x))

    prior = pdist.Bernoulli(torch.full((d,), 0.5))
    # the compiled loops' prior: torch.distributions' support check reads a value in Python,
    # which splits a compiled program in two (a traced model runs with validation off)
    unvalidated_prior = pdist.Bernoulli(torch.full((d,), 0.5), validate_args=False)

    def full(x: torch.Tensor) -> torch.Tensor:
        return log_density(x) + prior.log_prob(x).sum()

    def value_and_grad(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = x.detach().requires_grad_()
        f = full(x)
        (g,) = torch.autograd.grad(f, x)
        return f.detach(), g

    term = 1.0 / (2.0 * STEP_SIZE)

    log_sigmoid = torch.nn.functional.logsigmoid

    def dmala_step(value_and_grad: Callable) -> Callable[[tuple], tuple]:
        """The hand-written DMALA update ``(x, f, g) -> (x, f, g)``, its log density and
        gradient at the proposal from ``value_and_grad(y) -> (f, g)``."""

        def step(carry: tuple) -> tuple:
            x, f, g = carry
            u = torch.rand(d + 1)
            logit = 0.5 * g * (1.0 - 2.0 * x) - term
            flip = u[:d] < torch.sigmoid(logit)
            y = torch.where(flip, 1.0 - x, x)
            log_forward = torch.where(flip, log_sigmoid(logit), log_sigmoid(-logit)).sum()
            f_y, g_y = value_and_grad(y)
            logit_y = 0.5 * g_y * (1.0 - 2.0 * y) - term
            log_reverse = torch.where(flip, log_sigmoid(logit_y), log_sigmoid(-logit_y)).sum()
            accept = torch.log(u[d]) < f_y - f + log_reverse - log_forward
            return (
                torch.where(accept, y, x),
                torch.where(accept, f_y, f),
                torch.where(accept, g_y, g),
            )

        return step

    torch_step = dmala_step(value_and_grad)

    def full_unvalidated(x: torch.Tensor) -> torch.Tensor:
        return log_density(x) + unvalidated_prior.log_prob(x).sum()

    def func_value_and_grad(y: torch.Tensor) -> tuple:
        # torch.autograd.grad would split a compiled program in two: torch.func for
        # torch.compile
        g_y, f_y = torch.func.grad_and_value(full_unvalidated)(y)
        return f_y, g_y

    compilable_step = dmala_step(func_value_and_grad)

    def torch_start() -> tuple:
        torch.manual_seed(0)
        x = (torch.rand(d) < 0.5).float()
        return (x, *value_and_grad(x))

    def potential(values: dict) -> torch.Tensor:
        return -full(values["x"])

    def potential_unvalidated(values: dict) -> torch.Tensor:
        return -full_unvalidated(values["x"])

    def kernel(mode: str) -> tuple[Any, dict]:
        """A set-up ``px.DMALA`` and its start, on the model or its potential."""
        pyro.set_rng_seed(0)
        compiled = mode.endswith("_compiled")
        if mode.startswith("model"):
            k = px.DMALA(
                model,
                step_size=STEP_SIZE,
                adapt_step_size=False,
                jit_compile=mode == "model_jit",
                torch_compile=compiled,
            )
        else:
            k = px.DMALA(
                potential_fn=potential_unvalidated if compiled else potential,
                domain=px.Binary(),
                step_size=STEP_SIZE,
                adapt_step_size=False,
                torch_compile=compiled,
            )
            k.initial_params = {"x": (torch.rand(d) < 0.5).float()}
        with pyro.validation_enabled(mode != "model_unvalidated"):
            k.setup(0)
        return k, dict(k.initial_params)

    def pyro_mcmc(num_steps: int) -> float:
        pyro.set_rng_seed(0)
        k = px.DMALA(model, step_size=STEP_SIZE, adapt_step_size=False)
        mcmc = PyroMCMC(k, num_samples=num_steps, warmup_steps=0, disable_progbar=True)
        start = time.perf_counter()
        mcmc.run()
        return (time.perf_counter() - start) / num_steps

    # the loops advance in turn, a block of steps each, so that drifts of the machine's speed
    # fall on all of them alike; per loop the median of its blocks
    modes = (
        "potential",
        "model",
        "model_unvalidated",
        "model_jit",
        "potential_compiled",
        "model_compiled",
    )
    loops: dict[str, tuple[Callable, Any]] = {
        "torch": (torch_step, torch_start()),
        "torch_compiled": (torch.compile(compilable_step, dynamic=False), torch_start()),
    }
    for mode in modes:
        k, params = kernel(mode)
        loops[mode] = (k.sample, params)
    block = 30 if quick else 200
    rounds = max(3, repeats * (10 if quick else 15))
    blocks: dict[str, list[float]] = {name: [] for name in loops}
    states = {name: state for name, (_, state) in loops.items()}
    for round_index in range(rounds + 1):
        for name, (advance, _) in loops.items():
            with pyro.validation_enabled(name != "model_unvalidated"):
                state = states[name]
                start = time.perf_counter()
                for _ in range(block):
                    state = advance(state)
                seconds = (time.perf_counter() - start) / block
            states[name] = state
            if round_index:  # the first round warms up
                blocks[name].append(seconds)
    row: dict[str, Any] = {name: float(np.median(v)) for name, v in blocks.items()}
    row["ratio_spread"] = {
        name: (
            float(np.percentile(np.divide(blocks[name], blocks["torch"]), 25)),
            float(np.percentile(np.divide(blocks[name], blocks["torch"]), 75)),
        )
        for name in (*modes, "torch_compiled")
    }
    row["compiled_spread"] = {
        name: (
            float(np.percentile(np.divide(blocks[name], blocks["torch_compiled"]), 25)),
            float(np.percentile(np.divide(blocks[name], blocks["torch_compiled"]), 75)),
        )
        for name in ("potential_compiled", "model_compiled")
    }
    num_steps = 300 if quick else 3000
    row["mcmc"] = float(np.median([pyro_mcmc(num_steps) for _ in range(repeats)]))
    row["ops_torch"] = aten_operations_per_step(torch_step, torch_start())
    for mode in modes[:4]:  # a compiled program's kernels are not torch operations
        k, params = kernel(mode)
        with pyro.validation_enabled(mode != "model_unvalidated"):
            row[f"ops_{mode}"] = aten_operations_per_step(k.sample, params)
    row.update(d=d, steps=block * rounds, block=block)
    print(row, flush=True)
    return [row]


# ------------------------------------------------------------------------------ profile


def entry_fusions(compiled: Any) -> int:
    """Kernels XLA launches per call of a compiled program: fusions and other operations of
    its entry computation (parameters, constants, tuples, views and copies not counted: a
    loop passes its carry through without the copies a lone call makes)."""
    text = compiled.as_text()
    entry = text[text.index("\nENTRY") :].split("\n}", 1)[0]
    skip = ("parameter(", "constant(", "tuple(", "get-tuple-element(", "bitcast(", "copy(")
    lines = [line for line in entry.splitlines()[1:] if " = " in line]
    return sum(1 for line in lines if not any(k in line for k in skip))


def compile_seconds(fn: Callable, *args: Any, **options: Any) -> tuple[float, Any]:
    lowered = jax.jit(fn).lower(*args)
    start = time.perf_counter()
    compiled = lowered.compile(compiler_options=options or None)
    return time.perf_counter() - start, compiled


def profile_rows(quick: bool) -> dict:
    """Where a whole run's time goes, 20x20 dense model, 4 chains: kernels per step of the
    compiled driver step and of the hand-written one, and the seconds of each part of a run
    that the plain scan does not have (the setup with its probes, the start's compilation at
    the default and at the run-once options, the loop's compilation)."""
    from numpyro_ext._once import ONCE_OPTIONS
    from numpyro_ext._setup import initial_values

    side, chains = (10, 4) if quick else (20, 4)
    d = side * side
    log_density = target(side, True)
    model = ising_model(side, log_density)
    full = model_log_density(log_density)
    kernel = nx.DMALA(model, step_size=STEP_SIZE, adapt_step_size=False)
    keys = jax.random.split(jax.random.key(0), chains)
    start = time.perf_counter()
    state = kernel.init(keys, 0, None, (), {})
    init_seconds = time.perf_counter() - start
    setup = kernel._setup

    def init_one(key):
        key, key_values = jax.random.split(key)
        z = initial_values(setup, model, key_values, None, (), {})
        return kernel._initial_state(key, z, (), {})

    start_default, _ = compile_seconds(jax.vmap(init_one), keys)
    start_once, _ = compile_seconds(jax.vmap(init_one), keys, **ONCE_OPTIONS)
    step_seconds, step = compile_seconds(lambda s: kernel.sample(s, (), {}), state)
    carry = hand_start(full, d, chains, jax.random.key(0))
    hand_seconds, hand_compiled = compile_seconds(lambda c: hand_step(full, d)(*c), carry)
    return dict(
        side=side,
        chains=chains,
        driver_kernels=entry_fusions(step),
        hand_kernels=entry_fusions(hand_compiled),
        init_seconds=init_seconds,
        start_default=start_default,
        start_once=start_once,
        step_seconds=step_seconds,
        hand_seconds=hand_seconds,
    )


# ------------------------------------------------------------------------------ report


def report(
    driver: list[dict], equal: list[dict], pyro: list[dict], profile: dict, args: Any
) -> str:
    lines = [
        "## Small models: the library's own cost per step",
        "",
        "Fixed step size 0.2, binary sites, the model written as NumPyro / Pyro users write "
        "it (one `Bernoulli` site, one `factor`). The plain loops are DMALA written by hand "
        "(gradient carried, one `value_and_grad` per step, every 10th draw kept, as "
        "`MCMC(..., thinning=10)` here). Medians over "
        f"{args.repeats} interleaved repeats; ratios within this run.",
        "",
        "### NumPyro: `MCMC(nx.DMALA(model))` against a plain `lax.scan`",
        "",
        "Whole run: wall time of n draws, setup and compilation included (the scan: its first "
        "call; ratio also in CPU time, steadier on a loaded machine). Steady state: µs per step "
        "(the scan and the driver loop, `nx.DMALA(model).sample` in a compiled `fori_loop` "
        "without `MCMC`: a second call; `MCMC`: the difference of runs of n and 3n draws, "
        "rough where n is small). Floor: one batched `value_and_grad` of the model.",
        "",
        "| model | d | chains | n | whole run MCMC (s) | scan (s) | ratio | ratio, CPU time "
        "| steady MCMC (µs) | driver loop (µs) | scan (µs) | MCMC / scan | driver / scan "
        "| floor (µs) | MCMC / floor |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
        "| --- |",
    ]
    for r in driver:
        lines.append(
            f"| {r['case']} | {r['d']} | {r['chains']} | {r['steps']} | {r['mcmc']:.2f} "
            f"| {r['hand']:.2f} | {r['mcmc'] / r['hand']:.2f}x "
            f"| {r['mcmc_cpu'] / r['hand_cpu']:.2f}x | {1e6 * r['mcmc_s']:.1f} "
            f"| {1e6 * r['loop_s']:.1f} | {1e6 * r['hand_s']:.1f} "
            f"| {r['mcmc_s'] / r['hand_s']:.2f}x | {r['loop_s'] / r['hand_s']:.2f}x "
            f"| {1e6 * r['floor']:.1f} | {r['mcmc_s'] / r['floor']:.2f}x |"
        )
    lines += [
        "",
        f"### Against NumPyro's `DiscreteGibbs` at equal wall time ({args.budget:g} s each)",
        "",
        "4 chains each (DMALA vectorised with its defaults, step size adapted; DiscreteGibbs "
        "sequential, each draw a sweep), warmup a quarter of the draws, compilation included. "
        "Draws come from probes of n and 4n draws (n grown 4-fold until the two runs' times "
        "differ by more than their compilation's noise) and are capped at 20,000 per chain; a "
        "sampler whose probes underestimate its cost runs over the budget (its seconds say "
        "so); ratios under the rule of `benchmarks/_common.py` (a number only where both ESS "
        "reach 400).",
        "",
        "| model | d | sampler | draws per chain | seconds | ESS energy | ESS/s | ratio |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in equal:
        gibbs = next(g for g in equal if g["case"] == r["case"] and g["sampler"] == "DiscreteGibbs")
        # the ratio rule of benchmarks/_common.py: a number only where both ESS reach 400
        ratio = "1 (reference)" if r is gibbs else ratio_under_rule([r], [gibbs])["text"]
        lines.append(
            f"| {r['case']} | {r['d']} | {r['sampler']} | {r['draws']} | {r['seconds']:.1f} "
            f"| {r['ess']:.0f} | {r['ess_per_second']:.1f} | {ratio} |"
        )
    lines += [
        "",
        "### Pyro: one chain of the 20x20 dense model",
        "",
        "µs per step, steady state, torch with one thread: the loops advance in turn, a block "
        "of steps each, and each loop's µs/step is the median over its blocks; the ratio is "
        "that of the medians, with the quartiles of the block-by-block ratios in brackets "
        "(`pyro.infer.MCMC`: the median of whole runs). Operations: torch operations "
        "dispatched per step (forward and backward), a count that load does not disturb. "
        "The plain loop evaluates the log density directly; `potential_fn` mode gives the "
        "driver the same function (the potential, its negative), model mode evaluates it "
        "through Pyro's trace, with Pyro's validation on (its default: argument, support and "
        "NaN checks at every evaluation, each a read of a tensor on the host) or off, or "
        "replays one `torch.jit.trace` of it (`jit_compile=True`, as Pyro's `NUTS`). "
        "Compiled rows (`torch_compile=True`: each step one `torch.compile` program; on a "
        "model, of a `make_fx` trace of its log density) are also set against the same plain "
        "loop compiled with `torch.compile` (its gradient by `torch.func`), the second ratio; "
        "a compiled program dispatches no torch operations one by one, so none are counted. "
        "Both compiled loops on the potential use a prior built with `validate_args=False`: "
        "torch.distributions' support check reads a value in Python, which splits a compiled "
        "program in two (measured: 670 µs a step for the plain loop compiled with it).",
        "",
        "| loop | µs/step | ratio to the plain torch loop | ratio to the plain loop compiled "
        "| operations per step |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in pyro:
        for label, key, ops in (
            ("plain torch loop of the same update", "torch", "ops_torch"),
            ("`px.DMALA(potential_fn=...).sample` in a loop", "potential", "ops_potential"),
            ("`px.DMALA(model).sample` in a loop", "model", "ops_model"),
            (
                "`px.DMALA(model).sample` in a loop, `pyro.enable_validation(False)`",
                "model_unvalidated",
                "ops_model_unvalidated",
            ),
            ("`px.DMALA(model, jit_compile=True).sample` in a loop", "model_jit", "ops_model_jit"),
            ("`pyro.infer.MCMC(px.DMALA(model))`", "mcmc", "ops_model"),
            ("plain torch loop, `torch.compile`d", "torch_compiled", None),
            (
                "`px.DMALA(potential_fn=..., torch_compile=True).sample` in a loop",
                "potential_compiled",
                None,
            ),
            ("`px.DMALA(model, torch_compile=True).sample` in a loop", "model_compiled", None),
        ):
            spread = r["ratio_spread"].get(key)
            quartiles = "" if spread is None else f" ({spread[0]:.2f}-{spread[1]:.2f})"
            second = "-"
            if key in r["compiled_spread"] or key == "torch_compiled":
                low, high = r["compiled_spread"].get(key, (1.0, 1.0))
                second = f"{r[key] / r['torch_compiled']:.2f}x"
                second += "" if key == "torch_compiled" else f" ({low:.2f}-{high:.2f})"
            count = "-" if ops is None else f"{r[ops]:.0f}"
            lines.append(
                f"| {label} | {1e6 * r[key]:.1f} | {r[key] / r['torch']:.2f}x{quartiles} "
                f"| {second} | {count} |"
            )
    if profile:
        p = profile
        lines += [
            "",
            f"### Where a whole run's time goes ({p['side']}x{p['side']} dense, "
            f"{p['chains']} chains)",
            "",
            f"Kernels XLA launches per step (entry computation of the compiled step): the "
            f"driver's `sample` {p['driver_kernels']}, the hand-written step "
            f"{p['hand_kernels']}. What `MCMC` compiles that the plain scan does not: "
            f"`kernel.init` (setup with its `exact_sites='auto'` probe, and the start) "
            f"{p['init_seconds']:.2f} s, of which the start's compilation is "
            f"{p['start_once']:.2f} s at the run-once options (`numpyro_ext._once`; "
            f"{p['start_default']:.2f} s at XLA's defaults); then NumPyro compiles its own loop "
            f"around the step (the step alone: {p['step_seconds']:.2f} s; the hand-written "
            f"step: {p['hand_seconds']:.2f} s).",
        ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, nothing written")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget", type=float, default=10.0, help="seconds per sampler (2)")
    parser.add_argument("--only", choices=("numpyro", "gibbs", "pyro", "profile"), default=None)
    parser.add_argument("--sides", default=None, help="lattice sides of table 1, e.g. 20,32")
    parser.add_argument("--chains", default=None, help="chain counts of table 1, e.g. 1,4,16")
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.budget = 1, 1.0
    sides = [int(v) for v in args.sides.split(",")] if args.sides else None
    counts = [int(v) for v in args.chains.split(",")] if args.chains else None
    run_driver = args.only in (None, "numpyro")
    driver = driver_rows(args.quick, args.repeats, sides, counts) if run_driver else []
    equal = equal_time_rows(args.quick, args.budget, sides) if args.only in (None, "gibbs") else []
    pyro = pyro_rows(args.quick, args.repeats) if args.only in (None, "pyro") else []
    profile = profile_rows(args.quick) if args.only in (None, "profile") else {}
    text = report(driver, equal, pyro, profile, args)
    print(text)
    if not args.quick:  # the block names the command, with any selection of rows
        write_section("small_models", text)


if __name__ == "__main__":
    main()
