"""The user-model suite (``benchmarks/user_models.py``, issue 31) against its exact answers.

- The exact answers themselves: each quadrature's density and conditional means equal a brute
  force sum over the discrete latents of the model's own log density (NumPyro's
  ``log_density``) at random parameter values; the all-discrete models' answers equal a brute
  force enumeration of the model at a tiny size; a finer grid changes nothing.
- Every model at its reduced size with its recommended kernel: chain-pooled means of the
  reported statistics within 4 ESS-based standard errors of the exact answer
  (``assert_mc_close``; a stored reference's own MC error is added in quadrature).
- Every other kernel of the library that applies, and NumPyro's built-ins (``-m slow``).
- Power: the same check fails for a PlateGibbs whose draws use a tempered table.

Findings are marked ``xfail(strict=True)`` with the finding as the reason.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer.util import log_density

import numpyro_ext as nx
from benchmarks import user_models as um
from discrete_kernels.samplers import plate_gibbs

from .mc import assert_mc_close

WARMUP, SAMPLES, CHAINS = 300, 1000, 2


@pytest.fixture(autouse=True)
def _drop_compiled_programs():
    """Each run compiles programs of its own. A worker that kept every one of the slow
    suite's crashed in LLVM while compiling (a segmentation fault, twice in one run of
    ``-m slow``: the process's memory maps run out, as ``benchmarks/user_suite.py`` found);
    both tests pass alone. Dropping them after each test keeps the worker alive."""
    yield
    jax.clear_caches()
    gc.collect()


def check(
    name: str,
    kernel: str | um.KernelFactory,
    warmup: int = WARMUP,
    samples: int = SAMPLES,
    chains: int = CHAINS,
    seed: int = 0,
    **changes: Any,
) -> np.ndarray:
    """Run ``kernel`` on the model at its reduced size; assert |z| < 4 on every statistic.
    ``changes``: fields of the model's entry replaced (``init=None``: NumPyro's start)."""
    entry = dataclasses.replace(um.MODELS[name], **changes)
    data = entry.data(entry.sizes[0])
    answer = entry.exact(data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # setup notes (exact differences switched on, ...)
        draws = um.run(
            entry,
            kernel,
            data,
            num_warmup=warmup,
            num_samples=samples,
            num_chains=chains,
            seed=seed,
        )
    assert draws.shape[-1] == len(answer.names) == len(answer.mean)
    return assert_mc_close(draws, answer.mean, num_se=4.0, expected_se=answer.se)


# ------------------------------------------------------------------------------------------
# the exact answers


def _enumerate_discrete(entry: um.UserModel, data: tuple, fixed: dict) -> tuple:
    """Every configuration of the model's discrete latents (at most 2^16) with the
    continuous sites at ``fixed``: their log joint densities by NumPyro, and the reported
    statistics, each of shape (configurations, ...)."""
    from numpyro.handlers import seed, substitute, trace

    with trace() as tr, seed(rng_seed=0), substitute(data=fixed):
        entry.model(*data)
    discrete = {
        name: site
        for name, site in tr.items()
        if site["type"] == "sample" and not site["is_observed"] and site["fn"].has_enumerate_support
    }
    shapes = {name: np.shape(site["value"]) for name, site in discrete.items()}
    supports = {
        name: np.asarray(site["fn"].enumerate_support(expand=False)).ravel()
        for name, site in discrete.items()
    }
    sizes = [int(np.prod(shape)) for shape in shapes.values()]
    grids = [
        np.array(list(itertools.product(supports[name], repeat=size)))
        for name, size in zip(discrete, sizes)
    ]
    configs = list(itertools.product(*[range(len(g)) for g in grids]))
    assert len(configs) <= 2**16, len(configs)
    values = {
        name: np.stack([g[c[j]] for c in configs]).reshape(-1, *shapes[name])
        for j, (name, g) in enumerate(zip(discrete, grids))
    }

    def joint(config: dict) -> jax.Array:
        return log_density(entry.model, data, {}, {**fixed, **config})[0]

    logp = np.asarray(jax.vmap(joint)({k: jnp.asarray(v) for k, v in values.items()}))
    count = logp.shape[0]
    samples = {k: v[None] for k, v in values.items()}
    samples.update(
        {k: np.broadcast_to(np.asarray(v), (1, count, *np.shape(v))) for k, v in fixed.items()}
    )
    return logp, entry.statistics(samples, data)[0]


QUADRATURE_SIZES = {"zip": 8, "gmm": 6, "occupancy": 7, "population": 8, "cjs": 3}


@pytest.mark.parametrize("name", list(QUADRATURE_SIZES))
def test_quadrature_densities_are_the_models_own_with_the_latents_summed_out(name):
    """At random parameter values, the quadrature's log density (less its Jacobian) differs
    from the brute-force log marginal of the model by one constant, and its conditional means
    equal the brute-force ones."""
    entry = um.MODELS[name]
    assert entry.quadrature is not None
    data = entry.data(QUADRATURE_SIZES[name])
    quadrature = entry.quadrature(data)
    rng = np.random.default_rng(0)
    points = np.asarray(quadrature.start) + 0.3 * rng.standard_normal((3, len(quadrature.start)))
    log_post, conditional = quadrature.evaluate(points)
    offsets = []
    for t, density, expected in zip(
        points, log_post - quadrature.log_jacobian(points), conditional
    ):
        fixed = {k: jnp.asarray(v, jnp.float32) for k, v in quadrature.sites(t).items()}
        logp, stats = _enumerate_discrete(entry, data, fixed)
        weights = np.exp(logp - logp.max())
        weights /= weights.sum()
        np.testing.assert_allclose(weights @ stats, expected, rtol=2e-4, atol=2e-4)
        offsets.append(density - (np.log(np.exp(logp - logp.max()).sum()) + logp.max()))
    np.testing.assert_allclose(offsets, offsets[0], atol=2e-3)


@pytest.mark.parametrize(
    "name, size",
    [("hmm", 6), ("hmm_terms", 6), ("hmm_scan", 6), ("ising", 3), ("ising_terms", 3), ("bnn", 2)],
)
def test_all_discrete_answers_equal_brute_force_enumeration(name, size):
    entry = um.MODELS[name]
    data = entry.data(size)
    logp, stats = _enumerate_discrete(entry, data, {})
    weights = np.exp(logp - logp.max())
    np.testing.assert_allclose(
        weights @ stats / weights.sum(), entry.exact(data).mean, rtol=1e-4, atol=1e-5
    )


def test_change_point_answer_equals_quadrature_over_the_rates():
    """Enumeration with the rates integrated by conjugacy, against numerical integrals over
    each rate on a fine grid of the model's own densities (given the switch day, the two
    rates are independent), the switch day summed."""
    from scipy.special import logsumexp
    from scipy.stats import expon, poisson

    entry = um.MODELS["changepoint_uniform"]
    data = entry.data(12)
    y = np.asarray(data[0])
    rates = np.linspace(1e-6, 300.0, 30001)  # the prior's mass beyond: exp(-15)
    cum = np.cumsum(poisson.logpmf(y[None], rates[:, None]), 1)  # (R, T)
    early = np.concatenate([np.zeros((rates.size, 1)), cum[:, :-1]], 1)  # days before tau
    late = cum[:, -1:] - early  # days from tau on
    prior = expon.logpdf(rates, scale=1 / um.CHANGEPOINT_ALPHA)[:, None]
    log_early, log_late = logsumexp(prior + early, 0), logsumexp(prior + late, 0)  # (T,)
    w = np.exp(log_early + log_late - (log_early + log_late).max())
    w /= w.sum()
    mean_early = np.exp(logsumexp(prior + early, 0, b=rates[:, None]) - log_early)
    mean_late = np.exp(logsumexp(prior + late, 0, b=rates[:, None]) - log_late)
    tau = np.arange(y.shape[0])
    got = [w @ tau, w @ tau**2, w @ mean_early, w @ mean_late]
    np.testing.assert_allclose(got, entry.exact(data).mean, rtol=1e-4)  # Riemann sums


@pytest.mark.parametrize("name, spike_scale", [("spike_slab", 0.0), ("ssvs", um.SSVS_SPIKE_SCALE)])
def test_spike_and_slab_answers_equal_integrals_of_the_models_own_density(name, spike_scale):
    """Given ``sigma`` the model's log density (NumPyro's) is a constant plus one term per
    (indicator, coefficient) pair on the orthogonal design: each pair summed over its
    indicator and integrated over its coefficient on a fine grid gives ``log p(y, sigma)``
    and the conditional statistics, against :func:`slab_posterior`'s closed forms."""
    entry = um.MODELS[name]
    data = entry.data(4)
    log_post, conditional = um.slab_posterior(data, spike_scale)
    grid = np.linspace(-6.0, 6.0, 24001)  # 20 points per standard deviation of the spike
    step = grid[1] - grid[0]
    predictors = data[0].shape[1]

    @jax.jit
    def log_joint(gamma, beta, sigma):
        values = {"gamma": gamma, "beta": beta, "sigma": sigma}
        return jax.vmap(
            lambda v: log_density(entry.model, data, {}, v)[0],
            ({"gamma": 0, "beta": 0, "sigma": None},),
        )(values)

    sigmas = np.array([0.6, 1.0, 1.5])
    log_marginal, statistics = [], []
    for sigma in sigmas:
        zero = np.zeros((1, predictors))
        base = float(log_joint(zero.astype(np.int32), zero, jnp.float32(sigma))[0])
        total, p_on, mean = base, [], 0.0
        for j in range(predictors):
            gamma = np.zeros((2 * grid.size, predictors), np.int32)
            gamma[grid.size :, j] = 1
            beta = np.zeros((2 * grid.size, predictors))
            beta[:, j] = np.tile(grid, 2)
            weights = np.exp(
                np.asarray(log_joint(gamma, beta, jnp.float32(sigma)), np.float64) - base
            )
            weights = weights.reshape(2, grid.size) * step
            total += np.log(weights.sum())
            p_on.append(weights[1].sum() / weights.sum())
            if j == 0:  # the first coefficient's mean (times its indicator for a zero spike)
                on_only = spike_scale == 0.0
                mean = ((weights[1] if on_only else weights.sum(0)) @ grid) / weights.sum()
        log_marginal.append(total)
        statistics.append([*p_on[:4], sum(p_on), sigma, mean])
    t = np.log(sigmas)[:, None]
    offsets = np.asarray(log_marginal) + t[:, 0] - log_post(t)  # log_post has the Jacobian
    np.testing.assert_allclose(offsets - offsets[0], 0.0, atol=1e-3)
    np.testing.assert_allclose(np.asarray(statistics), conditional(t), rtol=1e-3, atol=1e-4)


@pytest.mark.slow
def test_a_finer_grid_changes_nothing():
    entry = um.MODELS["occupancy"]
    quadrature = entry.quadrature(entry.data(entry.sizes[0]))  # type: ignore[misc]
    coarse = quadrature.means()
    fine = um.grid_expectations(quadrature.evaluate, quadrature.start, 61, quadrature.chunk)
    np.testing.assert_allclose(coarse, fine, rtol=1e-7)


@pytest.mark.parametrize("name", [n for n, e in um.MODELS.items() if e.init is not None])
def test_the_suites_starts_have_a_finite_log_density(name):
    """The starts the suite gives every sampler (discrete sites as values, continuous ones
    unconstrained, as NUTS takes them; the rest from a prior draw) are possible states."""
    from numpyro import handlers
    from numpyro.distributions import biject_to

    entry = um.MODELS[name]
    data = entry.data(entry.sizes[0])
    start = entry.init(data)  # type: ignore[misc]
    with handlers.seed(rng_seed=0):
        prior = handlers.trace(entry.model).get_trace(*data)
    values = {}
    for site_name, site in prior.items():
        if site["type"] != "sample" or site["is_observed"]:
            continue
        support = site["fn"].support
        given = start.get(site_name)
        if given is None:
            values[site_name] = site["value"]
        else:
            values[site_name] = given if support.is_discrete else biject_to(support)(given)
    assert set(start) <= set(values)
    # one compiled program: run op by op, the larger models took up to 6 s here
    density = jax.jit(lambda v: log_density(entry.model, data, {}, v)[0])
    assert np.isfinite(float(density(values)))


def test_every_model_has_its_parts():
    assert len(um.MODELS) >= 12
    for entry in um.MODELS.values():
        assert entry.recommended in entry.kernels, entry.name
        assert entry.model.__doc__ and entry.data(entry.sizes[0])
        assert entry.sizes[0] <= entry.sizes[1]


# ------------------------------------------------------------------------------------------
# the recommended kernel on every model


#: the recommended kernel's runs behind ``-m slow`` (default suite time): the slowest at the
#: reduced sizes, and twins whose kernel path another model covers (hmm_terms: the plate
#: colouring of hmm_scan; ising_terms: the same lattice as ising; occupancy: MarginalNUTS,
#: as population)
SLOW_RECOMMENDED = {
    "occupancy",  # MarginalNUTS, as population's
    "dawid_skene",
    "cjs",
    "spike_slab",
    "variable_selection",
    "hmm_terms",
    "changepoint_categorical",  # the same kernel as changepoint_uniform
    "ising_terms",
}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.slow) if name in SLOW_RECOMMENDED else name
        for name in um.MODELS
    ],
)
def test_recommended_kernel_matches_the_exact_answer(name):
    check(name, um.MODELS[name].recommended)


# ------------------------------------------------------------------------------------------
# every other kernel, and NumPyro's built-ins

#: (warmup, draws) of the slow runs; variable selection's rare inclusions need long runs:
#: at 300 warmup steps and 1,000 draws DMALA, AB and ACS miss by 4.4 to 9.5 standard errors
#: (too few excursions for an honest ESS), at 1,000 and 6,000 they pass on two seeds. On the
#: scan HMM, ACS visits the last state's rarer value (posterior 0.105) in long excursions: at
#: 500 and 2,000 it gave 0.059 in the test's 2 chains (z 4.55); in 4 chains 0.071 (seed 0,
#: ESS 667, z 3.5: the ESS an overestimate) and 0.099 (seed 1); at 2,000 and 10,000 0.104
#: (z 0.1, 4 chains), and the test passes
SLOW_RUNS = {"variable_selection": (1000, 6000), "hmm_scan": (2000, 10000)}

#: findings (tests below): kernels of the suite that are wrong on a model at the test's size
FINDINGS = {
    ("cjs", "GWG"),
    ("ssvs", "DMALA"),
    ("ssvs", "AB"),
    ("ssvs", "MixedHMC"),
    ("ssvs", "MarginalNUTS"),
}

OTHERS = [
    (name, kernel)
    for name, entry in um.MODELS.items()
    for kernel in [*entry.kernels, *entry.builtins]
    if kernel != entry.recommended and (name, kernel) not in FINDINGS
]


@pytest.mark.slow
@pytest.mark.parametrize("name, kernel", OTHERS, ids=[f"{n}-{k}" for n, k in OTHERS])
def test_other_kernels_match_the_exact_answer(name, kernel):
    warmup, samples = SLOW_RUNS.get(name, (500, 2000))
    check(name, kernel, warmup=warmup, samples=samples)


@pytest.mark.slow
@pytest.mark.xfail(
    reason="GWG as a Gibbs block next to NUTS on the CJS scan model: some chains settle on "
    "wrong values and stay (phi 0.47 against 0.599, alive animal-occasions 17 against 27.8 "
    "over 4,000 draws; with phi and rho fixed and a dummy continuous site, 23.0 against "
    "27.35); GWG alone and DMALA in the same Gibbs are right",
    strict=True,
)
def test_gwg_beside_nuts_on_the_capture_recapture_scan_model():
    check("cjs", "GWG", warmup=500, samples=4000, chains=1)


@pytest.mark.slow
@pytest.mark.xfail(
    reason="SSVS (beta_j ~ Normal(0, 0.01) when excluded): NumPyro's MixedHMC keeps gamma_1 "
    "at 1 in all 4 x 2,000 draws (exact 0.936; |z| 15-64), AB as a Gibbs block next to NUTS "
    "near 1 in 2 of its 4 chains (chain means 0.96, 1.0, 0.25, 1.0 on 2026-12-02; DMALA: the test "
    "below). Drawing gamma given beta, an indicator switches off only while NUTS holds "
    "its beta within a few spike widths of 0: the exact PlateGibbs block keeps gamma_1 at 1 "
    "in 3 of its 4 chains too (and passes only because 0.936 is near 1). The blocks warn at "
    "setup and name the paired moves; DiscreteHMCGibbs and the paired kernels are right "
    "(found 2026-11-29; MarginalNUTS depends on the seed: the test below)",
    strict=True,
)
@pytest.mark.parametrize("kernel", ["AB", "MixedHMC"])
def test_some_kernels_never_switch_an_ssvs_indicator_off(kernel):
    check("ssvs", kernel, warmup=500, samples=2000)


@pytest.mark.slow
def test_dmala_beside_nuts_on_ssvs_leaves_its_chains_apart():
    """DMALA as a Gibbs block next to NUTS on ``ssvs`` (it warns at setup that the gradient's
    local differences are far from the exact ones) now switches indicators off in some
    chains, but its chains disagree:
    ``gamma_1``'s chain means 0.87, 1.0, 0.89, 0.53 (exact 0.936), split R-hat 1.19, which
    passes the |z| < 4 check only by its wide standard errors (2026-12-02; until then it was
    in the strict xfail above, every draw at 1). ``PairedNUTS`` with the same model, sizes and
    seed (a script of 2026-12-02) had split R-hat at most 1.002 on every statistic, so this
    assertion fails with it in DMALA's place."""
    from numpyro.diagnostics import split_gelman_rubin

    entry = um.MODELS["ssvs"]
    data = entry.data(entry.sizes[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        draws = um.run(entry, "DMALA", data, num_warmup=500, num_samples=2000, num_chains=4)
    r_hat = split_gelman_rubin(np.asarray(draws, float))
    assert np.max(r_hat) > 1.1, r_hat


@pytest.mark.slow
def test_marginal_nuts_on_ssvs_misses_on_most_seeds():
    """The finding behind ``ssvs``'s recommendation (PairedNUTS, not MarginalNUTS): with the
    indicators summed out each coefficient's marginal has a spike at 0 (scale 0.01) beside
    the likelihood's bump, and NUTS, its step adapted to the bump, enters the spike rarely.
    At the test size, seeds 0-3 gave gamma_0 0.90, 0.99, 0.98, 0.69 and model size 2.75,
    3.19, 2.63, 2.00 with the tests' XLA flags (exact 0.870 and 2.464), gamma_0 0.87, 0.78,
    0.74, 0.57 with XLA's fusion emitters on (other rounding); PairedNUTS was right on all
    four (2026-12-02). Should MarginalNUTS become right here, this fails: revisit the
    recommendation."""
    misses = 0
    for seed in range(4):
        try:
            check("ssvs", "MarginalNUTS", seed=seed)
        except AssertionError:
            misses += 1
    assert misses >= 2, f"MarginalNUTS missed on {misses} of 4 seeds"


@pytest.mark.slow
@pytest.mark.xfail(
    reason="DMALA with exact_sites=['drink'] (the plate table) next to NUTS on the "
    "zero-inflated model stays at its start: every proposal rejected, the step size adapted "
    "to 0.001 (the table holds -inf for a drinking day with a count); with the default "
    "exact_sites='auto' the site keeps its gradient, which the likelihood's jnp.where hides, "
    "and DMALA moves 0.8 coordinates a step (ESS 18 in 4 x 64,000 draws at 1,000 rows)",
    strict=True,
)
def test_dmala_with_the_plate_table_moves_on_the_zero_inflated_model():
    check("zip", um.beside_nuts(nx.DMALA, exact_sites=["drink"]))


@pytest.mark.slow
def test_the_mixture_from_numpyros_default_start():
    """NUTS's default start (uniform in (-2, 2)) may place the means in a relabelled mode;
    at the reduced size PlateGibbs next to NUTS still ends right. The suite itself starts the
    means at data quantiles."""
    check("gmm", "PlateGibbs", init=None)


@pytest.mark.parametrize("name", ["hmm", "ising"])
def test_plate_gibbs_colours_a_site_coupled_through_one_summed_factor_from_its_tables(name):
    """A factor summed over the coordinates hides from the terms which of them interact; the
    site's single-site tables show it: PlateGibbs colours the site even/odd (hmm) or as a
    checkerboard (ising), at the test size and at the benchmark size, and draws the hmm's
    chain whole from its pair table (the lattice colour by colour from its single-site
    tables). (That it matches the exact answer is the recommended kernel's test above.)"""
    entry = um.MODELS[name]
    for size in entry.sizes:
        kernel = nx.PlateGibbs(entry.model)
        setup = kernel._site_setup(jax.random.key(0), None, entry.data(size), {})
        (leaf,) = setup.leaves
        assert leaf.mode == ("chain" if name == "hmm" else "exact")
        np.testing.assert_array_equal(leaf.colours, np.indices(leaf.colours.shape).sum(0) % 2)


def test_plate_gibbs_refuses_a_dense_summed_factor_with_the_reason():
    """A factor that couples every pair of more than 16 coordinates (a quadratic form with a
    full matrix) is still refused, with the reason (fewer are swept one at a time)."""
    weights = jnp.asarray(np.random.default_rng(1).normal(size=(20, 20)))

    def model() -> None:
        with numpyro.plate("items", 20):
            z = numpyro.sample("z", dist.Bernoulli(0.5))
        numpyro.factor("quadratic", z @ (weights + weights.T) @ z)

    with pytest.raises(ValueError, match="'z' is not conditionally independent") as error:
        nx.PlateGibbs(model)._site_setup(jax.random.key(0), None, (), {})
    assert "every coordinate interacts with every other" in str(error.value)


# ------------------------------------------------------------------------------------------
# power


def test_the_check_fails_for_a_plate_gibbs_with_a_tempered_table(monkeypatch):
    """PlateGibbs drawing from its table at temperature 2 (a wrong conditional) fails the
    same check that the right kernel passes (the recommended kernel's test above, on the
    Ising model; at 4 chains of a 5x5 lattice the cheapest of PlateGibbs's models)."""
    original = plate_gibbs.categorical_from_uniform
    monkeypatch.setattr(
        plate_gibbs,
        "categorical_from_uniform",
        lambda table, u: original(0.5 * table, u),
    )
    with pytest.raises(AssertionError):
        check("ising", "PlateGibbs")


# ------------------------------------------------------------------------------------------
# stored references


@pytest.mark.slow
@pytest.mark.parametrize("name", list(um.REFERENCE_MODELS))
def test_stored_references_are_reproduced_by_a_fresh_run(name):
    entry = um.MODELS[name]
    size = entry.sizes[0]
    stored = entry.exact(entry.data(size))
    fresh = um.reference_run(name, size, draws=5000, chains=2)
    z = np.abs(stored.mean - fresh.mean) / np.hypot(stored.se, fresh.se)
    assert np.all(z < 4), z
