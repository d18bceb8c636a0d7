"""Bad inputs, both adapters: each row gives a clear error naming the site or option, or the
correct result (issue 12's cases and the ones found while fixing them)."""

from __future__ import annotations

import warnings
from fractions import Fraction

import numpy as np
import pytest

jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")

import jax.numpy as jnp  # noqa: E402
import numpyro  # noqa: E402
import numpyro.distributions as ndist  # noqa: E402
import pyro  # noqa: E402
import pyro.distributions as pdist  # noqa: E402
from numpyro.infer import MCMC as NMCMC  # noqa: E402
from pyro.infer import MCMC as PMCMC  # noqa: E402

import numpyro_ext as nx  # noqa: E402
import pyro_ext as px  # noqa: E402
from discrete_kernels import Ordinal  # noqa: E402
from tests.numpyro_ext.helpers import assert_mc_close  # noqa: E402

# ------------------------------------------------------------------------------ models


def n_binomial_dependent():
    n = numpyro.sample("n", ndist.Binomial(10, 0.5))
    numpyro.sample("k", ndist.Binomial(n, 0.5))


def p_binomial_dependent():
    n = pyro.sample("n", pdist.Binomial(10, 0.5))
    pyro.sample("k", pdist.Binomial(n, 0.5))


def n_bits():
    numpyro.sample("z", ndist.Bernoulli(0.3).expand([4]))
    numpyro.sample("k", ndist.Binomial(3, 0.4))


def p_bits():
    pyro.sample("z", pdist.Bernoulli(0.3).expand([4]).to_event(1))
    pyro.sample("k", pdist.Binomial(3, 0.4))


def n_empty():
    numpyro.sample("z", ndist.Bernoulli(0.3).expand([0]))


def n_huge_uniform():
    numpyro.sample("x", ndist.DiscreteUniform(-(2**31), 2**31 - 1))


def n_large_offset():
    numpyro.sample("x", ndist.DiscreteUniform(100_000_000, 100_000_004).expand([2]))


def p_subsampled():
    with pyro.plate("data", 10, subsample_size=3):
        pyro.sample("z", pdist.Bernoulli(0.5))


def p_enumerated():
    pyro.sample("z", pdist.Bernoulli(0.5).expand([3]).to_event(1))
    pyro.sample("w", pdist.Bernoulli(0.5), infer={"enumerate": "parallel"})


def _n_run(kernel, warmup=10, samples=10, **run_kwargs):
    mcmc = NMCMC(kernel, num_warmup=warmup, num_samples=samples, progress_bar=False)
    mcmc.run(jax.random.key(0), **run_kwargs)
    return mcmc


def _p_run(kernel, warmup=10, samples=10, **kwargs):
    pyro.set_rng_seed(0)
    mcmc = PMCMC(kernel, num_samples=samples, warmup_steps=warmup, disable_progbar=True, **kwargs)
    mcmc.run()
    return mcmc


def _bits_potential_n(z):
    return -jnp.sum(z) * 0.1


def _bits_potential_p(z):
    return -z["z"].sum() * 0.1


# ------------------------------------------------------------------------------ error rows

ERRORS = {
    # 1. a support that depends on another latent
    "numpyro dependent support": (
        lambda: _n_run(nx.DMALA(n_binomial_dependent)),
        "support of site 'k' depends on the value of site 'n'",
    ),
    "pyro dependent support": (
        lambda: _p_run(px.DMALA(p_binomial_dependent)),
        "support of site 'k' depends on the value of site 'n'",
    ),
    # 2. subsampling plates
    "pyro subsample plate": (
        lambda: _p_run(px.DMALA(p_subsampled)),
        "plate 'data' subsamples 3 of 10",
    ),
    # 3. start values outside the support
    "numpyro start 2 for Bernoulli": (
        lambda: _n_run(nx.DMALA(n_bits), init_params={"z": jnp.full(4, 2)}),
        "start value of site 'z' has entries outside the site's support \\(0 or 1\\): 2",
    ),
    "numpyro potential start 2": (
        lambda: _n_run(
            nx.DULA(potential_fn=_bits_potential_n, domain=nx.Binary()),
            init_params=jnp.full(4, 2.0),
        ),
        "start value of site 0 has entries outside",
    ),
    "pyro start 2 for Bernoulli": (
        lambda: _p_run(px.DMALA(p_bits), initial_params={"z": torch.full((4,), 2.0)}),
        "start value of site 'z' has entries outside",
    ),
    # 4. starts that used to freeze the chain
    "numpyro start 0.5": (
        lambda: _n_run(nx.DMALA(n_bits), init_params={"z": jnp.full(4, 0.5)}),
        "site 'z' has non-integral entries: 0.5",
    ),
    "numpyro start -1 for Binomial(3)": (
        lambda: _n_run(nx.GWG(n_bits), init_params={"k": jnp.asarray(-1)}),
        "site 'k' has entries outside the site's support \\(integers 0 .. 3\\): -1",
    ),
    "numpyro NaN start": (
        lambda: _n_run(nx.DMALA(n_bits), init_params={"z": jnp.full(4, jnp.nan)}),
        "site 'z' has NaN or infinite entries",
    ),
    "pyro NaN start DMALA": (
        lambda: _p_run(px.DMALA(p_bits), initial_params={"z": torch.full((4,), float("nan"))}),
        "site 'z' has NaN or infinite entries",
    ),
    "pyro NaN start GWG": (
        lambda: _p_run(px.GWG(p_bits), initial_params={"z": torch.full((4,), float("nan"))}),
        "site 'z' has NaN or infinite entries",
    ),
    "pyro NaN start DiscreteGibbs": (
        lambda: _p_run(
            px.DiscreteGibbs(p_bits), initial_params={"z": torch.full((4,), float("nan"))}
        ),
        "site 'z' has NaN or infinite entries",
    ),
    # 5. broadcastable but wrong shapes
    "numpyro (2, 4) start for a (4,) site": (
        lambda: _n_run(nx.DMALA(n_bits), init_params={"z": jnp.zeros((2, 4))}),
        "site 'z' has shape \\(2, 4\\); expected \\(4,\\)",
    ),
    "pyro (2, 4) start for a (4,) site": (
        lambda: _p_run(px.DMALA(p_bits), initial_params={"z": torch.zeros(2, 4)}),
        "site 'z' has shape \\(2, 4\\); expected \\(4,\\)",
    ),
    # 8. numeric options that froze the chain or were accepted silently
    "ACS tuning learning_rate nan": (
        lambda: nx.ACS(n_bits, tuning={"learning_rate": float("nan")}),
        "tuning\\['learning_rate'\\] must be a positive finite number",
    ),
    "ACS tuning num_candidates 0": (
        lambda: px.ACS(p_bits, tuning={"num_candidates": 0}),
        "tuning\\['num_candidates'\\] must be an integer >= 1",
    ),
    "ACS tuning negative burn-in": (
        lambda: nx.ACS(n_bits, tuning={"burnin_steps": -5}),
        "tuning\\['burnin_steps'\\] must be an integer >= 0",
    ),
    "ACS tuning unknown key": (
        lambda: nx.ACS(n_bits, tuning={"learning_rat": 0.1}),
        "unknown tuning option 'learning_rat'",
    ),
    "ACS alpha_max inf": (
        lambda: nx.ACS(n_bits, alpha_max=float("inf"), alpha_min=0.1, beta_schedule=[0.5] * 8),
        "alpha_max must be a positive finite number",
    ),
    "ACS steps_per_cycle nan": (
        lambda: px.ACS(p_bits, steps_per_cycle=float("nan")),
        "steps_per_cycle must be an integer >= 2",
    ),
    "AB coupling with NaN": (
        lambda: _n_run(nx.AB(n_bits, variant="trace", coupling=np.full((5, 5), np.nan))),
        "coupling has NaN or infinite entries",
    ),
    "AB coupling not symmetric (pyro)": (
        lambda: _p_run(px.AB(p_bits, variant="shift", coupling=np.triu(np.ones((5, 5))))),
        "coupling must be symmetric",
    ),
    "AB burn_in longer than warmup (numpyro)": (
        lambda: _n_run(nx.AB(n_bits, variant="trace", burn_in=50), warmup=20),
        "burn_in=50 is longer than the warmup \\(20 steps\\)",
    ),
    "AB burn_in longer than warmup (pyro)": (
        lambda: _p_run(px.AB(p_bits, variant="trace", burn_in=50), warmup=20),
        "burn_in=50 is longer than the warmup \\(20 steps\\)",
    ),
    "AB block_size True": (
        lambda: nx.AB(n_bits, block_size=True),
        "block_size must be an integer >= 1, got True",
    ),
    "DiscreteGibbs random_walk 'yes'": (
        lambda: px.DiscreteGibbs(p_bits, random_walk="yes"),
        "random_walk must be True or False, got 'yes'",
    ),
    "Ordinal lower above upper": (
        lambda: Ordinal(5, 0, lower=np.array([3, 0]), upper=np.array([1, 4])),
        "per-coordinate bounds must satisfy low <= lower <= upper",
    ),
    "Categorical start not one-hot": (
        lambda: _n_run(
            nx.DMALA(potential_fn=lambda x: -x[..., 0].sum(), domain=nx.Categorical(3)),
            init_params=jnp.asarray([[1.0, 1.0, 0.0], [0.0, 0.0, 1.0]]),
        ),
        "start value of site 0 is not one-hot",
    ),
    # 9. ordinary mistakes that gave obscure errors
    "empty site under GWG": (lambda: _n_run(nx.GWG(n_empty)), "Site 'z' has shape \\(0,\\)"),
    "Categorical start with the wrong K": (
        lambda: _n_run(
            nx.DMALA(potential_fn=lambda x: -x[..., 0].sum(), domain=nx.Categorical(3)),
            init_params=jnp.eye(4)[:2],
        ),
        "start value of site 0 has shape \\(2, 4\\); expected \\(2, 3\\)",
    ),
    "DiscreteUniform over int32": (
        lambda: _n_run(nx.DMALA(n_huge_uniform)),
        "tracing the model with start values drawn from its prior failed \\(OverflowError",
    ),
    "pyro to_arviz before run": (
        lambda: px.to_arviz(PMCMC(px.DMALA(p_bits), num_samples=5)),
        "no draws yet; call mcmc.run",
    ),
    "init_params names an unknown site": (
        lambda: _n_run(nx.DMALA(n_bits), init_params={"zz": jnp.zeros(4)}),
        "init_params: \\['zz'\\] are not discrete latent sites",
    ),
    # 10. misleading messages
    "numpyro potential returns a vector": (
        lambda: _n_run(
            nx.DMALA(potential_fn=lambda z: jnp.stack([z.sum(), z.sum()]), domain=nx.Binary()),
            init_params=jnp.zeros(3),
        ),
        "potential_fn must return a scalar .* shape \\(2,\\)",
    ),
    "pyro potential returns a vector": (
        lambda: _p_run(
            px.DMALA(potential_fn=lambda z: z["x"] * 1.0, domain=px.Binary()),
            initial_params={"x": torch.zeros(3)},
        ),
        "potential_fn must return a scalar .* shape \\(3,\\)",
    ),
    # 11. enumerated sites in Pyro
    "pyro enumerated site": (
        lambda: _p_run(px.DMALA(p_enumerated)),
        "site 'w' is marked infer=\\{'enumerate': 'parallel'\\}",
    ),
    # a start of probability zero
    "start of zero probability": (
        lambda: _n_run(
            nx.DMALA(
                potential_fn=lambda z: jnp.where(z.sum() == 0, jnp.inf, 0.0), domain=nx.Binary()
            ),
            init_params=jnp.zeros(3),
        ),
        "log density at the start values .* is -inf",
    ),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_bad_input_gives_a_clear_error(case):
    action, message = ERRORS[case]
    with pytest.raises(ValueError, match=message):
        action()


# ------------------------------------------------------------------------------ correct rows


def test_numpy_scalar_options_are_accepted():
    kernel = nx.DMALA(n_bits, step_size=np.float32(0.5), target_accept_prob=np.float64(0.6))
    assert kernel.spec.step_size == np.float32(0.5)
    acs = px.ACS(p_bits, steps_per_cycle=np.int64(5))
    assert acs.spec.config.steps_per_cycle == 5


@pytest.mark.parametrize("kernel_cls", [nx.DMALA, nx.GWG])
def test_bool_start_is_converted(kernel_cls):
    mcmc = _n_run(kernel_cls(n_bits), warmup=5, init_params={"z": jnp.ones(4, dtype=bool)})
    z = mcmc.get_samples()["z"]
    assert z.dtype == jnp.int32 and set(np.unique(z)) <= {0, 1}


def test_pyro_site_missing_from_initial_params_starts_from_the_prior():
    mcmc = _p_run(px.DMALA(p_bits), initial_params={"z": torch.ones(4)})
    k = mcmc.get_samples()["k"]
    assert k.shape == (10,) and bool(((k >= 0) & (k <= 3)).all())


def test_gwg_with_an_infinite_gradient_moves_and_reports_honestly():
    # U = -3 sqrt(sum z) has an infinite gradient at all zeros; GWG used to freeze there
    # while reporting acceptance 1 and `accepted` on every draw
    def potential(z):
        return -3.0 * jnp.sqrt(jnp.sum(z))

    mcmc = NMCMC(
        nx.GWG(potential_fn=potential, domain=nx.Binary()),
        num_warmup=0,
        num_samples=3000,
        progress_bar=False,
    )
    mcmc.run(jax.random.key(1), init_params=jnp.zeros(5), extra_fields=("accepted",))
    z = np.asarray(mcmc.get_samples())
    accepted = np.asarray(mcmc.get_extra_fields()["accepted"])
    moved = np.any(np.diff(np.concatenate([np.zeros((1, 5)), z]), axis=0) != 0, axis=1)
    assert moved.sum() > 300
    np.testing.assert_array_equal(accepted, moved)  # `accepted` is a real move, nothing else
    # exact marginal of each bit under exp(3 sqrt(sum z)), by enumeration
    states = np.array(np.meshgrid(*[[0, 1]] * 5, indexing="ij")).reshape(5, -1).T
    weights = np.exp(3.0 * np.sqrt(states.sum(1)))
    exact = (weights @ states) / weights.sum()
    assert_mc_close(z[None], exact)


def test_pyro_gwg_with_an_infinite_gradient_moves_and_reports_honestly():
    def potential(values):
        return -3.0 * torch.sqrt(values["z"].sum())

    kernel = px.GWG(potential_fn=potential, domain=px.Binary())
    mcmc = _p_run(kernel, 0, 300, initial_params={"z": torch.zeros(5)})
    z = mcmc.get_samples()["z"].numpy()
    accepted = px.to_arviz(mcmc).sample_stats["accepted"].values[0]
    moved = np.any(np.diff(np.concatenate([np.zeros((1, 5)), z]), axis=0) != 0, axis=1)
    assert moved.sum() > 30
    np.testing.assert_array_equal(accepted, moved)


def test_gwg_on_large_offset_ordinal_values_in_float32():
    # DiscreteUniform(1e8, 1e8 + 4): candidate values collapse in float32 unless distances
    # are taken between offsets from the lower bound
    mcmc = _n_run(nx.GWG(n_large_offset), warmup=20, samples=1000)
    x = np.asarray(mcmc.get_samples()["x"]).astype(np.int64) - 100_000_000
    counts = np.bincount(x.ravel(), minlength=5)
    assert counts.shape == (5,) and counts.min() > 250  # uniform: 400 expected each


@pytest.mark.parametrize("ppl", ["numpyro", "pyro"])
def test_copies_of_the_state_are_not_counted_as_moves(ppl):
    # at a tiny fixed step almost every proposal equals the current state
    if ppl == "numpyro":
        mcmc = NMCMC(
            nx.DMALA(n_bits, step_size=1e-3, adapt_step_size=False),
            num_warmup=0,
            num_samples=50,
            progress_bar=False,
        )
        mcmc.run(jax.random.key(0), extra_fields=("accepted", "hamming_distance"))
        stats = mcmc.get_extra_fields()
        accepted, distance = np.asarray(stats["accepted"]), np.asarray(stats["hamming_distance"])
    else:
        mcmc = _p_run(px.DMALA(p_bits, step_size=1e-3, adapt_step_size=False), 0, 50)
        stats = px.to_arviz(mcmc).sample_stats
        accepted = stats["accepted"].values[0]
        distance = stats["hamming_distance"].values[0]
    assert not np.any(accepted[distance == 0])


@pytest.mark.parametrize("ppl", ["numpyro", "pyro"])
def test_a_chain_that_never_moves_in_warmup_is_warned_about(ppl):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if ppl == "numpyro":
            _n_run(nx.DMALA(n_bits, step_size=1e-4, adapt_step_size=False), warmup=30)
        else:
            _p_run(px.DMALA(p_bits, step_size=1e-4, adapt_step_size=False), warmup=30)
    messages = [str(w.message) for w in caught if "made no move" in str(w.message)]
    assert messages, [str(w.message) for w in caught]
    assert "['z', 'k']" in messages[0] and "30 warmup steps" in messages[0]


@pytest.mark.parametrize("ppl", ["numpyro", "pyro"])
def test_a_chain_that_stops_moving_in_warmup_is_warned_about(ppl):
    # log density 1000 * x0 * x1: from (0, 0) a chain moves until it reaches (1, 1) and then
    # never leaves (every move costs 1000 nats); a check of the whole warmup would miss it
    options = dict(step_size=1e3, adapt_step_size=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if ppl == "numpyro":
            kernel = nx.DMALA(
                potential_fn=lambda x: -1000.0 * x[0] * x[1], domain=nx.Binary(), **options
            )
            mcmc = NMCMC(kernel, num_warmup=40, num_samples=5, progress_bar=False)
            mcmc.run(jax.random.key(0), init_params=jnp.zeros(2, jnp.int32))
            final = np.asarray(mcmc.get_samples())[-1]
        else:
            kernel = px.DMALA(
                potential_fn=lambda z: -1000.0 * z["x"][0] * z["x"][1],
                domain=px.Binary(),
                **options,
            )
            mcmc = PMCMC(
                kernel,
                num_samples=5,
                warmup_steps=40,
                initial_params={"x": torch.zeros(2)},
                disable_progbar=True,
            )
            mcmc.run()
            final = mcmc.get_samples()["x"].numpy()[-1]
    np.testing.assert_array_equal(final, [1, 1])  # it moved (the start is (0, 0)) and stopped
    messages = [str(w.message) for w in caught if "made no move" in str(w.message)]
    assert messages and "the last 20 of its 40 warmup steps" in messages[0], messages


def test_a_chain_that_moves_is_not_warned_about():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _n_run(nx.DMALA(n_bits), warmup=30)
    assert not [w for w in caught if "made no move" in str(w.message)]


# ------------------------------------------------------------------------------ property


@pytest.mark.parametrize("ppl", ["numpyro", "pyro"])
def test_no_draw_leaves_the_support_for_any_start(ppl):
    """Random starts, most of them bad: each is refused at setup, or every draw of every
    kernel lies in the support (z in {0, 1}, k in 0..3) and none is NaN."""
    rng = np.random.default_rng(12)
    bad_entries = [-1.0, 2.0, 0.5, np.nan, 7.0, np.inf]
    kernels = (
        [nx.DMALA, nx.DULA, nx.GWG, nx.ACS, nx.AB]
        if ppl == "numpyro"
        else [px.DMALA, px.DULA, px.GWG, px.ACS, px.AB, px.DiscreteGibbs]
    )
    refused = ran = 0
    for trial in range(2 * len(kernels)):
        z = rng.integers(0, 2, size=4).astype(float)
        k = float(rng.integers(0, 4))
        if trial % 2:  # corrupt one entry of z or k
            position = rng.integers(0, 5)
            value = bad_entries[rng.integers(0, len(bad_entries))]
            if position < 4:
                z[position] = value
            else:
                k = value if value != 2.0 else -3.0  # 2 lies inside k's support
        kernel_cls = kernels[(trial // 2) % len(kernels)]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if ppl == "numpyro":
                    mcmc = _n_run(
                        kernel_cls(n_bits),
                        warmup=5,
                        init_params={"z": jnp.asarray(z), "k": jnp.asarray(k)},
                    )
                else:
                    mcmc = _p_run(
                        kernel_cls(p_bits),
                        warmup=5,
                        initial_params={"z": torch.as_tensor(z), "k": torch.as_tensor(k)},
                    )
        except ValueError as error:
            assert "start value of site" in str(error)
            refused += 1
            continue
        ran += 1
        samples = mcmc.get_samples()
        zs, ks = np.asarray(samples["z"], float), np.asarray(samples["k"], float)
        assert np.all(np.isin(zs, [0.0, 1.0])), (z, k, kernel_cls)
        assert np.all(np.isin(ks, [0.0, 1.0, 2.0, 3.0])), (z, k, kernel_cls)
    assert refused == ran == len(kernels)


# ------------------------------------------------------------------------------ round 3 (issue 33)

WALL_Y = 1.0


def n_walled():
    x = numpyro.sample("x", ndist.HalfNormal(1.0))
    numpyro.factor("c", jnp.where(x > 1.5, -jnp.inf, 0.0))
    numpyro.sample("y", ndist.Normal(x, 1.0), obs=WALL_Y)


def p_walled():
    x = pyro.sample("x", pdist.HalfNormal(1.0))
    pyro.factor("c", torch.where(x > 1.5, -float("inf"), 0.0))
    pyro.sample("y", pdist.Normal(x, 1.0), obs=torch.tensor(WALL_Y))


def _walled_exact_mean():
    grid = np.linspace(0.0, 1.5, 200_001)
    weight = np.exp(-(grid**2) / 2 - (WALL_Y - grid) ** 2 / 2)
    return float(grid @ weight / weight.sum())  # 0.670


@pytest.mark.parametrize("exact", [True, False])
def test_numpyro_esh_next_to_a_zero_density_region(exact):
    """Froze at x = 0.176 for 2,000 draws (exact); with exact=False 1,731 of 2,000 draws lay
    where the density is zero."""
    mcmc = NMCMC(
        nx.ESH(n_walled, exact=exact),
        num_warmup=1000,
        num_samples=2000,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(0))
    x = np.asarray(mcmc.get_samples(group_by_chain=True)["x"], np.float64)
    energy = np.asarray(mcmc.get_extra_fields()["potential_energy"])
    assert np.all(np.isfinite(energy)) and np.all(x <= 1.5)
    assert len(np.unique(x)) > 1000
    if exact:  # the paper's reservoir is biased by design (docs/kernels/esh.md)
        assert_mc_close(x[..., None], [_walled_exact_mean()])


def test_pyro_esh_next_to_a_zero_density_region():
    mcmc = _p_run(px.ESH(p_walled, num_steps=10), warmup=100, samples=400)
    x = mcmc.get_samples(group_by_chain=True)["x"].numpy().astype(np.float64)
    assert np.all(x <= 1.5) and len(np.unique(x)) > 250  # 338 measured; frozen, 1
    assert_mc_close(x[..., None], [_walled_exact_mean()])


def test_esh_adaptation_stays_finite_where_the_potential_is_nan():
    """A potential that is NaN beyond x0 > 1 adapted step_size and num_steps to inf."""

    def potential(z):
        return 0.5 * jnp.sum(z**2) + jnp.where(z[0] > 1.0, jnp.nan, 0.0)

    mcmc = NMCMC(
        nx.ESH(potential_fn=potential), num_warmup=1000, num_samples=2000, progress_bar=False
    )
    mcmc.run(jax.random.key(1), init_params=jnp.zeros(2))
    adapt = mcmc.last_state.adapt_state
    assert np.isfinite(float(adapt.step_size)) and float(adapt.step_size) < 10
    assert int(adapt.num_steps) <= nx.ESH(potential_fn=potential).adaptation.max_num_steps
    x = np.asarray(mcmc.get_samples(), np.float64)
    assert np.all(x[:, 0] <= 1.0)
    # x0 ~ N(0, 1) truncated to x0 <= 1: mean -phi(1) / Phi(1) = -0.2876
    assert_mc_close(x[None, :, :1], [-0.2876])


@pytest.mark.parametrize("ppl", ["numpyro", "pyro"])
def test_an_esh_chain_that_never_moves_is_warned_about(ppl):
    with pytest.warns(UserWarning, match="ESH: The chain made no move .* step_size"):
        if ppl == "numpyro":
            _n_run(
                nx.ESH(potential_fn=lambda z: 0.5 * jnp.sum(z**2), step_size=1e3),
                warmup=40,
                samples=5,
                init_params=jnp.zeros(2),
            )
        else:
            _p_run(
                px.ESH(
                    potential_fn=lambda z: 0.5 * (z["x"] ** 2).sum(), step_size=1e3, num_steps=4
                ),
                warmup=40,
                samples=5,
                initial_params={"x": torch.zeros(2)},
            )


def n_walled_mixture():
    z = numpyro.sample("z", ndist.Bernoulli(0.5).expand([3]))
    x = numpyro.sample("x", ndist.Normal(3.0, 0.5))  # the prior start lies beyond the wall
    numpyro.factor("wall", jnp.where(x > 1.5, -jnp.inf, 0.0))
    numpyro.sample("y", ndist.Normal(x + z.sum(), 1.0), obs=1.0)


def p_walled_mixture():
    z = pyro.sample("z", pdist.Bernoulli(0.5).expand([3]).to_event(1))
    x = pyro.sample("x", pdist.Normal(3.0, 0.5))
    pyro.factor("wall", torch.where(x > 1.5, -float("inf"), 0.0))
    pyro.sample("y", pdist.Normal(x + z.sum(), 1.0), obs=torch.tensor(1.0))


def _n_gibbs(blocks):
    from numpyro.infer import Gibbs

    return _n_run(Gibbs(blocks))


ROUND3_ERRORS = {
    "numpyro Gibbs(DMALA, ESH) from a zero-density start": (
        lambda: _n_gibbs(
            [
                (nx.DMALA(n_walled_mixture), ["z"]),
                (nx.ESH(n_walled_mixture), None),
            ]
        ),
        "DMALA: the log density at the start values of \\[\"'z' = .*\"\\] is -inf.*Gibbs block",
    ),
    "numpyro Gibbs(ESH, DMALA) from a zero-density start": (
        lambda: _n_gibbs(
            [
                (nx.ESH(n_walled_mixture), ["x"]),
                (nx.DMALA(n_walled_mixture), None),
            ]
        ),
        "ESH: the log density at the start values of \\[\"'x' = 3.2.*\"\\] is -inf",
    ),
    "pyro Gibbs(DMALA, ESH) from a zero-density start": (
        lambda: _p_run(
            px.Gibbs(
                [(px.DMALA(p_walled_mixture), px.discrete_sites), (px.ESH(p_walled_mixture), None)]
            )
        ),
        "DMALA: the log density at the start values of \\[\"'z' = .*\"\\] is -inf",
    ),
    "pyro ESH from a zero-density start": (
        lambda: _p_run(px.ESH(p_walled), initial_params={"x": torch.tensor(2.0).log()}),
        "ESH: the log density at the start values of \\[\"'x' = 2\"\\] is -inf",
    ),
    "numpyro ESH from a zero-density start": (
        lambda: _n_run(nx.ESH(n_walled), init_params={"x": jnp.log(2.0)}),
        "ESH: the log density at the start values of \\[\"'x' = 2\"\\] is -inf",
    ),
    "ESH num_steps 10**9": (
        lambda: nx.ESH(n_walled, num_steps=10**9),
        "num_steps=1000000000 needs 1000000000 uniforms .*3.7 GB.* at most 1048576",
    ),
    "Ordinal(nan)": (lambda: Ordinal(float("nan")), "Ordinal\\(num_values=nan\\): num_values must"),
    "potential mode names the dict key": (
        lambda: _n_run(
            nx.DMALA(potential_fn=lambda z: -jnp.sum(z["bits"]) * 0.1, domain=nx.Binary()),
            init_params={"bits": jnp.full(4, 2.0)},
        ),
        "start value of site 'bits' has entries outside",
    ),
    "dlp_step with 3 uniforms for 4 coordinates": (
        lambda: _core_dlp_step(np.full(3, 0.5), 0.5),
        "dlp_step: the proposal uniforms of leaf 0 have shape \\(3,\\); expected \\(4,\\)",
    ),
    "dlp_step with step_size -1": (
        lambda: _core_dlp_step(np.full(4, 0.5), -1.0),
        "dlp_step: step_size must be a positive finite number, got -1.0",
    ),
    "dlp_step with step_size nan": (
        lambda: _core_dlp_step(np.full(4, 0.5), float("nan")),
        "dlp_step: step_size must be a positive finite number, got nan",
    ),
    "dlp_step with step_size np.float32(-1)": (
        lambda: _core_dlp_step(np.full(4, 0.5), np.float32(-1.0)),
        "dlp_step: step_size must be a positive finite number, got np.float32\\(-1.0\\)",
    ),
    "dlp_step with step_size 0 (an int)": (
        lambda: _core_dlp_step(np.full(4, 0.5), 0),
        "dlp_step: step_size must be a positive finite number, got 0",
    ),
    "dlp_step with step_size Fraction(-1, 2)": (
        lambda: _core_dlp_step(np.full(4, 0.5), Fraction(-1, 2)),
        "dlp_step: step_size must be a positive finite number, got Fraction\\(-1, 2\\)",
    ),
}


def _core_dlp_step(uniforms, step_size, state_lib=np):
    from discrete_kernels import Binary
    from discrete_kernels.kernel import ChainState
    from discrete_kernels.samplers import dlp

    def local_fn(leaves):
        return -(leaves[0] ** 2).sum() * 0.1, (-0.2 * leaves[0],)

    x = (state_lib.zeros(4),)
    state = ChainState(x, *local_fn(x))
    return dlp.dlp_step(
        state,
        (uniforms,),
        0.3,
        local_fn=local_fn,
        domains=[Binary()],
        is_table=[False],
        step_size=step_size,
    )


def test_core_step_refuses_noise_from_another_array_library():
    with pytest.raises(TypeError, match="uniforms of leaf 0 are ndarray but the state is Tensor"):
        _core_dlp_step(np.full(4, 0.5), 0.5, state_lib=torch)


@pytest.mark.parametrize("case", list(ROUND3_ERRORS))
def test_round3_bad_input_gives_a_clear_error(case):
    action, message = ROUND3_ERRORS[case]
    with pytest.raises(ValueError, match=message):
        action()


@pytest.mark.parametrize(
    "build",
    [
        lambda: nx.DMALA(n_bits, step_size=jnp.array(0.5)),
        lambda: px.DMALA(p_bits, step_size=torch.tensor(0.5)),
        lambda: nx.ESH(n_walled, step_size=np.array(0.5), num_steps=jnp.array(5)),
        lambda: nx.AB(n_bits, step_size=jnp.asarray(0.5, jnp.float32)),
    ],
)
def test_zero_dimensional_arrays_are_numbers(build):
    """step_size=jnp.array(0.5) was refused as "not a positive number"."""
    kernel = build()
    assert float(kernel.spec.step_size) == 0.5 if hasattr(kernel, "spec") else True


# ------------------------------------------------------------------------------ round 4
# (issue 33's last cases: kernel-drawn starts, resumed states, memory, core step arguments)


def p_infinite_logits():
    logits = torch.tensor([float("inf"), -float("inf"), 0.3])
    pyro.sample("z", pdist.Bernoulli(logits=logits).to_event(1))


def n_sized(y):
    z = numpyro.sample("z", ndist.Bernoulli(0.5).expand([y.shape[0]]))
    numpyro.sample("y", ndist.Normal(z, 1.0), obs=y)


def _n_resume(new_size, num_chains=1):
    """Warm up on 4 data points, then resume from ``post_warmup_state`` on ``new_size``."""
    method = "vectorized" if num_chains > 1 else "sequential"
    mcmc = NMCMC(
        nx.DMALA(n_sized),
        num_warmup=5,
        num_samples=5,
        num_chains=num_chains,
        chain_method=method,
        progress_bar=False,
    )
    mcmc.run(jax.random.key(0), jnp.ones(4))
    mcmc.post_warmup_state = mcmc.last_state
    mcmc.run(jax.random.key(1), jnp.ones(new_size))
    return mcmc


def _n_coupled(n):
    """``n`` binary coordinates coupled by one factor: not a plate."""

    def model():
        z = numpyro.sample("z", ndist.Bernoulli(0.5).expand([n]))
        numpyro.factor("f", -1e-3 * (z.sum() - 5.0) ** 2)

    return model


def _p_coupled(n):
    def model():
        z = pyro.sample("z", pdist.Bernoulli(0.5).expand([n]).to_event(1))
        pyro.factor("f", -1e-3 * (z.sum() - 5.0) ** 2)

    return model


def _core_state(lib=np, size=4):
    from discrete_kernels.kernel import ChainState

    def local_fn(leaves):
        return -(leaves[0] ** 2).sum() * 0.1, (-0.2 * leaves[0],)

    x = (lib.zeros(size),)
    return ChainState(x, *local_fn(x)), local_fn


def _core_gwg(move_uniform, step_size=None, lib=np):
    from discrete_kernels import Binary
    from discrete_kernels.samplers import gwg

    state, local_fn = _core_state(lib)
    return gwg.gwg_step(
        state,
        move_uniform,
        0.3,
        local_fn=local_fn,
        domains=[Binary()],
        is_table=[False],
        step_size=step_size,
    )


def _core_ab(uniforms, sigma=0.5, normals=None, quadratic=False):
    from discrete_kernels import Binary
    from discrete_kernels.samplers import ab, ab_linalg

    state, local_fn = _core_state()
    w = ab_linalg.quadratic_from_coupling(np.eye(4) * 0.1, "trace") if quadratic else None
    return ab.ab_step(
        state,
        (uniforms,),
        normals,
        0.3,
        local_fn=local_fn,
        domains=[Binary()],
        is_table=[False],
        sigma=sigma,
        balance=0.5,
        quadratic=w,
    )


def _core_acs(uniforms):
    """ACS's step is the DLP step at the cycle's parameters: its checks are dlp_step's."""
    from discrete_kernels import Binary, NoiseShapes, Sites, StepNoise
    from discrete_kernels.samplers import acs

    spec = acs.ACS()
    state, local_fn = _core_state()
    sites = Sites(("z",), (Binary(),), (False,))
    assert spec.noise_shapes(sites, [(4,)]) == NoiseShapes(((4,),))
    adapt = spec.adapt_init(np.ones(()), 10, sites, 4, _python_control())
    params = spec.parameters(adapt)
    return spec.step(state, StepNoise((uniforms,), 0.3), params, adapt, sites, local_fn)


def _python_control():
    from discrete_kernels import PYTHON_CONTROL

    return PYTHON_CONTROL


def _core_gibbs(propose, accept=None, order=None):
    from discrete_kernels import Binary
    from discrete_kernels.samplers import gibbs

    state, local_fn = _core_state()
    return gibbs.gibbs_sweep(
        state,
        list(range(4)) if order is None else order,
        propose,
        np.full(4, 0.5) if accept is None else accept,
        lambda leaves: local_fn(leaves)[0],
        [Binary()],
    )


def _core_site_proposal(uniform):
    from discrete_kernels.samplers import gibbs

    return gibbs.gibbs_site_proposal(np.zeros((3, 2)), np.zeros(3, np.int64), uniform)


def _core_plate_gibbs(uniforms):
    from discrete_kernels import Binary
    from discrete_kernels.samplers import plate_gibbs

    state, _ = _core_state()
    return plate_gibbs.plate_gibbs_step(
        state, (uniforms,), local_fn=lambda leaves: (0.0, ()), domains=[Binary()]
    )


ROUND4_ERRORS = {
    # a start the kernel drew, NaN from torch's log_prob at infinite logits
    "pyro Bernoulli(logits=[inf, -inf, .3]), start drawn by the kernel": (
        lambda: _p_run(px.DMALA(p_infinite_logits)),
        "DMALA: the log density at the start values of .* is nan\\. The start values of "
        "\\['z'\\] were drawn from the model's prior by the kernel, not given in init_params "
        "/ initial_params.*Site 'z' \\(Bernoulli\\) has log_prob nan: its logits are "
        "infinite, and torch's log_prob is NaN at infinite logits.*Use finite logits",
    ),
    "pyro infinite logits under DiscreteGibbs": (
        lambda: _p_run(px.DiscreteGibbs(p_infinite_logits)),
        "DiscreteGibbs: .* were drawn from the model's prior by the kernel.*infinite logits",
    ),
    # post_warmup_state resumed with data of another size
    "numpyro post_warmup_state with data of another size": (
        lambda: _n_resume(6),
        "DMALA: site 'z' has shape \\(4,\\) in the state this run starts from "
        "\\(mcmc.post_warmup_state.*but shape \\(6,\\) in the model traced with this run's "
        "arguments.*run a new warmup for the new data",
    ),
    "numpyro post_warmup_state with data of another size, vectorized chains": (
        lambda: _n_resume(3, num_chains=2),
        "DMALA: site 'z' has shape \\(4,\\) in the state .* but shape \\(3,\\)",
    ),
    # allocations that cannot fit
    "numpyro AB(variant='trace') on 10**6 coordinates": (
        lambda: _n_run(nx.AB(_n_coupled(10**6), variant="trace"), warmup=0, samples=1),
        "AB: variant='trace' keeps 3 matrices of d x d for the d = 1000000 coordinates of "
        "sites \\['z'\\] .*at least 10.9 TB per chain; at most 8.0 GB \\(MAX_QUADRATIC_BYTES.*"
        "Use variant='1st'",
    ),
    "pyro AB(variant='trace') on 10**6 coordinates": (
        lambda: _p_run(px.AB(_p_coupled(10**6), variant="trace"), warmup=0, samples=1),
        "AB: variant='trace' keeps 3 matrices of d x d for the d = 1000000 .*10.9 TB",
    ),
    "numpyro exact_sites on 10**5 coordinates that are not a plate": (
        lambda: _n_run(nx.DMALA(_n_coupled(10**5), exact_sites=["z"]), warmup=0, samples=1),
        "DMALA: the exact table of site 'z' \\(100000 coordinates x 2 values\\) is not from "
        "plates.*at least 37.3 GB per chain \\(N x \\(S - 1\\) x N values\\); at most 8.0 GB "
        "\\(MAX_EXACT_TABLE_BYTES\\)\\. Leave 'z' out of exact_sites",
    ),
    "pyro exact_sites on 10**5 coordinates that are not a plate": (
        lambda: _p_run(px.GWG(_p_coupled(10**5), exact_sites=["z"]), warmup=0, samples=1),
        "GWG: the exact table of site 'z' \\(100000 coordinates x 2 values\\) .*37.3 GB",
    ),
    # core steps check their own arguments (trace time)
    "gwg_step with a move uniform per coordinate": (
        lambda: _core_gwg(np.full(4, 0.5)),
        "gwg_step: the move uniform has shape \\(4,\\); expected \\(\\)",
    ),
    "gwg_step with step_size -1": (
        lambda: _core_gwg(0.5, step_size=-1.0),
        "gwg_step: step_size must be a positive finite number, got -1.0",
    ),
    "ab_step with 3 uniforms for 4 coordinates": (
        lambda: _core_ab(np.full(3, 0.5)),
        "ab_step: the proposal uniforms of leaf 0 have shape \\(3,\\); expected \\(4,\\)",
    ),
    "ab_step with sigma nan": (
        lambda: _core_ab(np.full(4, 0.5), sigma=float("nan")),
        "ab_step: sigma must be a positive finite number, got nan",
    ),
    "ab_step quadratic with 3 normals for 4 coordinates": (
        lambda: _core_ab(np.full(4, 0.5), normals=np.zeros(3), quadratic=True),
        "ab_step: the normals has shape \\(3,\\); expected \\(4,\\)",
    ),
    "ab_step quadratic without normals": (
        lambda: _core_ab(np.full(4, 0.5), quadratic=True),
        "ab_step: the normals has no shape; expected \\(4,\\)",
    ),
    "ACS step with 3 uniforms for 4 coordinates": (
        lambda: _core_acs(np.full(3, 0.5)),
        "dlp_step: the proposal uniforms of leaf 0 have shape \\(3,\\); expected \\(4,\\)",
    ),
    "gibbs_sweep with 3 proposal uniforms for 4 coordinates": (
        lambda: _core_gibbs(np.full(3, 0.5)),
        "gibbs_sweep: the proposal uniforms has shape \\(3,\\); expected \\(4,\\)",
    ),
    "gibbs_sweep with an order of 3 positions for 4 coordinates": (
        lambda: _core_gibbs(np.full(4, 0.5), order=[0, 1, 2]),
        "gibbs_sweep: order has 3 positions for 4 coordinates",
    ),
    "gibbs_site_proposal with uniforms of another shape": (
        lambda: _core_site_proposal(np.full(2, 0.5)),
        "gibbs_site_proposal: the uniform has shape \\(2,\\); expected \\(3,\\)",
    ),
    "plate_gibbs_step with 3 uniforms for 4 coordinates": (
        lambda: _core_plate_gibbs(np.full(3, 0.5)),
        "plate_gibbs_step: the proposal uniforms of leaf 0 have shape \\(3,\\)",
    ),
}


@pytest.mark.parametrize("case", list(ROUND4_ERRORS))
def test_round4_bad_input_gives_a_clear_error(case):
    action, message = ROUND4_ERRORS[case]
    with pytest.raises(ValueError, match=message):
        action()


def test_core_steps_refuse_noise_from_another_array_library():
    with pytest.raises(TypeError, match="gwg_step: the move uniform is ndarray but the state"):
        _core_gwg(np.asarray(0.5), lib=torch)


def test_a_resumed_state_with_data_of_the_same_size_runs():
    mcmc = _n_resume(4)
    assert mcmc.get_samples()["z"].shape == (5, 4)


def test_pyro_start_given_by_the_user_is_still_named_as_given():
    """A zero-density start the user gave keeps the message that asks to check it."""
    with pytest.raises(
        ValueError,
        match="is nan; start from values of positive probability "
        "\\(check init_params / initial_params.*Site 'z' \\(Bernoulli\\)",
    ):
        _p_run(px.DMALA(p_infinite_logits), initial_params={"z": torch.tensor([1.0, 0.0, 1.0])})


def test_memory_limits_are_named_constants():
    from discrete_kernels import kernel, sites, tables
    from discrete_kernels.samplers import ab, esh

    assert kernel.SINGLE_SITE_TABLE_MODE == sites.EXACT
    assert tables.exact_table_bytes(10**5, 2) > tables.MAX_EXACT_TABLE_BYTES
    assert tables.exact_table_bytes(46_000, 2) <= tables.MAX_EXACT_TABLE_BYTES
    assert tables.exact_table_bytes(47_000, 2) > tables.MAX_EXACT_TABLE_BYTES
    assert ab.quadratic_bytes(ab.max_quadratic_dim()) <= ab.MAX_QUADRATIC_BYTES
    assert ab.quadratic_bytes(ab.max_quadratic_dim() + 1) > ab.MAX_QUADRATIC_BYTES
    assert esh.MAX_TRAJECTORY_STEPS == 2**20


# ------------------------------------------------------------------------------ EBM trainers

optax = pytest.importorskip("optax")


def _n_train(energy, params, data, method=None, lr=0.01, num_steps=2):
    from numpyro_ext import ebm

    return ebm.train(
        energy,
        params,
        data,
        optimizer=optax.sgd(lr),
        method=method if method is not None else ebm.CD(k=1, sampler=ebm.SiteGibbs()),
        num_steps=num_steps,
        batch_size=4,
        rng_key=jax.random.key(0),
        progress_bar=False,
    )


def _p_train(energy, data, method=None, lr=0.01):
    from pyro_ext import ebm

    return ebm.train(
        energy,
        data,
        optimizer=torch.optim.SGD(energy.parameters(), lr=lr),
        method=method if method is not None else ebm.CD(k=1, sampler=ebm.SiteGibbs()),
        num_steps=2,
        batch_size=4,
        progress_bar=False,
    )


def _nebm():
    from numpyro_ext import ebm

    return ebm


def _pebm():
    from pyro_ext import ebm

    return ebm


DATA9 = (np.arange(20 * 9).reshape(20, 9) % 3 == 0).astype(np.float32)


def _ising_params():
    return {"w": jnp.zeros((9, 9))}


def _sum_energy(params, x):
    return -jnp.sum(x @ params["w"] * x)  # the batch's sum: a scalar


def _wide_energy(params, x):
    return jnp.stack([-(x @ params["w"] * x).sum(-1)] * 3, -1)  # (N, 3)


def _rbm_n(nv, nh):
    from numpyro_ext import ebm

    rbm = ebm.RBM(nv, nh)
    return rbm, rbm.init(jax.random.key(0))


EBM_ERRORS = {
    "numpyro energy returns the batch sum (SiteGibbs)": (
        lambda: _n_train(_sum_energy, _ising_params(), DATA9),
        "energy must return one value per data row, shape \\(2,\\).* got shape \\(\\)",
    ),
    "numpyro energy returns the batch sum (DMALA)": (
        lambda: _n_train(
            _sum_energy,
            _ising_params(),
            DATA9,
            method=_nebm().PCD(sampler=nx.DMALA(step_size=0.2), steps=1),
        ),
        "energy must return one value per data row",
    ),
    "numpyro energy returns (N, 3)": (
        lambda: _n_train(_wide_energy, _ising_params(), DATA9),
        "shape \\(2,\\) for a batch of 2; got shape \\(2, 3\\)",
    ),
    "numpyro RBM(16, 8) on 9 columns": (
        lambda: _n_train(*_rbm_n(16, 8), DATA9),
        "RBM has 16 visible units but the data have 9 columns",
    ),
    "numpyro empty data": (
        lambda: _n_train(_wide_energy, _ising_params(), np.zeros((0, 9))),
        "data has shape \\(0, 9\\); give at least one row",
    ),
    "numpyro NaN learning rate": (
        lambda: _n_train(*_rbm_n(9, 4), DATA9, lr=float("nan")),
        "parameters are NaN or infinite after the first 1 update",
    ),
    "numpyro PCD sampler built with a model": (
        lambda: _n_train(
            *_rbm_n(9, 4),
            DATA9,
            method=_nebm().PCD(sampler=nx.DMALA(n_bits), steps=1),
        ),
        "sampler was built with a model or potential_fn",
    ),
    "pyro RBM(16, 8) on 9 columns": (
        lambda: _p_train(_pebm().RBM(16, 8), DATA9),
        "RBM has 16 visible units but the data have 9 columns",
    ),
    "pyro energy returns the batch sum": (
        lambda: _p_train(_PSum(), DATA9),
        "shape \\(2,\\) for a batch of 2; got shape \\(\\)",
    ),
    "pyro empty data": (
        lambda: _p_train(_pebm().RBM(9, 4), np.zeros((0, 9))),
        "data has shape \\(0, 9\\)",
    ),
    "pyro NaN learning rate": (
        lambda: _p_train(_pebm().RBM(9, 4), DATA9, lr=float("nan")),
        "parameters are NaN or infinite after the first 1 update",
    ),
    "pyro PCD sampler built with a model": (
        lambda: _p_train(
            _pebm().RBM(9, 4),
            DATA9,
            method=_pebm().PCD(sampler=px.DMALA(p_bits), steps=1),
        ),
        "sampler was built with a model or potential_fn",
    ),
}


class _PSum(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(9, 9))

    def forward(self, x):
        return -((x @ self.w) * x).sum()


@pytest.mark.parametrize("case", list(EBM_ERRORS))
def test_ebm_trainer_bad_input_gives_a_clear_error(case):
    action, message = EBM_ERRORS[case]
    with pytest.raises(ValueError, match=message):
        action()


def test_ebm_trainer_refuses_random_bad_inputs():
    """Property test: random bad inputs (energy output shapes, data widths, empty data,
    non-finite learning rates), each refused with a ValueError that starts with ``train:``."""
    rng = np.random.default_rng(33)
    for _ in range(12):
        d = int(rng.integers(2, 7))
        data = (rng.uniform(size=(int(rng.integers(3, 9)), d)) < 0.5).astype(np.float32)
        params = {"w": jnp.zeros((d, d))}
        kind = rng.choice(["sum", "mean", "wide", "rbm_width", "empty", "lr"])
        if kind == "sum":
            args = (_sum_energy, params, data)
        elif kind == "mean":
            args = (lambda p, x: -jnp.mean(x @ p["w"] * x), params, data)
        elif kind == "wide":
            k = int(rng.integers(2, 5))
            args = (lambda p, x, k=k: jnp.stack([(x @ p["w"] * x).sum(-1)] * k, -1), params, data)
        elif kind == "rbm_width":
            args = (*_rbm_n(d + int(rng.integers(1, 4)), 3), data)
        elif kind == "empty":
            args = (*_rbm_n(d, 3), data[:0])
        else:
            lr = float(rng.choice([np.nan, np.inf]))
            with pytest.raises(ValueError, match="^train: "):
                _n_train(*_rbm_n(d, 3), data, lr=lr)
            continue
        with pytest.raises(ValueError, match="^train: "):
            _n_train(*args)
