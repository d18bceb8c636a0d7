"""PlateGibbs on sites whose coordinates interact locally (a lattice, a chain, an HMM written
with ``scan``): the setup colours them from the terms each coordinate changes, the coloured
table equals single-site changes at C x S evaluations, the colour sweep is exactly
stationary and its jitted step draws from it, the kernel matches exact answers alone, in a
two-block Gibbs sweep next to NUTS and as DMALA's exact table; ``blocks=`` takes a user's
colouring and refuses a wrong one. The power: one colour forced on a lattice breaks
stationarity."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.contrib.control_flow import scan
from numpyro.infer import MCMC, NUTS, Gibbs
from numpyro.infer.gibbs import discrete_latent_sites

import discrete_kernels as dk
import numpyro_ext as nx

from ..core.transition import colour_sweep_matrix
from ..mc import assert_mc_close

COUPLING = 0.6
FIELD = np.array([[0.3, -0.2, 0.1], [0.0, 0.4, -0.5], [-0.3, 0.2, 0.1]])
CHECKERBOARD = np.indices((3, 3)).sum(0) % 2


def lattice_model():
    """A 3x3 Ising lattice with a field, its pair terms one factor element per edge (no
    plates: a site with a batch shape)."""
    z = numpyro.sample("z", dist.Bernoulli(logits=jnp.asarray(FIELD)))
    s = 2 * z - 1
    numpyro.factor("rows", COUPLING * s[:, :-1] * s[:, 1:])
    numpyro.factor("columns", COUPLING * s[:-1, :] * s[1:, :])


def lattice_log_density(z: np.ndarray) -> float:
    s = 2 * z - 1
    field = np.sum(z * FIELD - np.logaddexp(0.0, FIELD))
    return field + COUPLING * (np.sum(s[:, :-1] * s[:, 1:]) + np.sum(s[:-1, :] * s[1:, :]))


LATTICE_STATES = [np.array(c).reshape(3, 3) for c in itertools.product((0, 1), repeat=9)]


def lattice_posterior() -> np.ndarray:
    logp = np.array([lattice_log_density(z) for z in LATTICE_STATES])
    pi = np.exp(logp - logp.max())
    return pi / pi.sum()


HMM_TRANSITION = np.array([[0.8, 0.15, 0.05], [0.1, 0.8, 0.1], [0.05, 0.15, 0.8]])
HMM_MEANS = np.array([-1.5, 0.0, 1.5])
HMM_Y = np.array([-1.2, -0.4, 0.3, 1.9, 1.1, -0.2])


def hmm_model(y=HMM_Y):
    """An HMM written with scan, the chain starting from state 0: z_t ~ A[z_{t-1}],
    y_t ~ N(means[z_t], 1)."""

    def step(previous, y_t):
        z = numpyro.sample("z", dist.Categorical(jnp.asarray(HMM_TRANSITION)[previous]))
        numpyro.sample("y", dist.Normal(jnp.asarray(HMM_MEANS)[z], 1.0), obs=y_t)
        return z, None

    scan(step, jnp.array(0), jnp.asarray(y))


def hmm_marginals(y=HMM_Y) -> np.ndarray:
    """p(z_t = k | y), shape (T, 3), by enumerating the 3^T paths."""
    marginals = np.zeros((len(y), 3))
    paths = list(itertools.product(range(3), repeat=len(y)))
    logp = np.empty(len(paths))
    for n, path in enumerate(paths):
        previous = (0,) + path[:-1]
        logp[n] = np.sum(np.log(HMM_TRANSITION[previous, path])) - 0.5 * np.sum(
            (y - HMM_MEANS[list(path)]) ** 2
        )
    w = np.exp(logp - logp.max())
    w /= w.sum()
    for n, path in enumerate(paths):
        marginals[np.arange(len(y)), path] += w[n]
    return marginals


W = np.array([1.0, -2.0, 1.5, 0.5])
Y = np.array([0.8, -1.4, 2.1, 0.2])
PRIOR = 0.4


def chain_mu_model(y=Y):
    """Indicators in a plate, a continuous mean, and pair terms along the rows (a chain)."""
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    with numpyro.plate("rows", 4):
        z = numpyro.sample("z", dist.Bernoulli(PRIOR))
        numpyro.sample("y", dist.Normal(mu + jnp.asarray(W) * z, 1.0), obs=y)
    s = 2 * z - 1
    numpyro.factor("pairs", COUPLING * s[:-1] * s[1:])


def chain_mu_exact(y=Y):
    """E z, E mu and E mu^2, enumerating z (conjugate in mu)."""
    rows = []
    for z in itertools.product((0, 1), repeat=4):
        z = np.array(z, float)
        s = 2 * z - 1
        resid = y - W * z
        prec = 1.0 + len(y)
        mean = resid.sum() / prec
        log_marg = (
            -0.5 * np.sum(resid**2)
            + 0.5 * mean**2 * prec
            + np.sum(z * np.log(PRIOR) + (1 - z) * np.log(1 - PRIOR))
            + COUPLING * np.sum(s[:-1] * s[1:])
        )
        rows.append((z, mean, 1.0 / prec, log_marg))
    lm = np.array([r[3] for r in rows])
    w = np.exp(lm - lm.max())
    w /= w.sum()
    mean_z = sum(wi * r[0] for wi, r in zip(w, rows))
    mean_mu = sum(wi * r[1] for wi, r in zip(w, rows))
    second = sum(wi * (r[2] + r[1] ** 2) for wi, r in zip(w, rows))
    return mean_z, mean_mu, second


def driver_setup(kernel, *args):
    kernel._setup = kernel._site_setup(jax.random.key(0), None, args, {})
    return kernel._setup, kernel._local_fn(args, {})


def sweep_matrix(tables: np.ndarray, colours: np.ndarray) -> np.ndarray:
    """The colour sweep's exact transition matrix on the lattice states, from each state's
    table (shape (states, 3, 3, 2)): :func:`tests.core.transition.colour_sweep_matrix`."""
    z = np.array(LATTICE_STATES)  # (n, 3, 3)
    n = len(z)
    return colour_sweep_matrix(z.reshape(n, 9), tables.reshape(n, 9, 2), colours.reshape(9))


def lattice_tables(local_fn) -> np.ndarray:
    states = jnp.asarray(np.array(LATTICE_STATES), jnp.int32)
    _, (tables,) = jax.jit(jax.vmap(lambda z: local_fn((z,))))(states)
    return np.asarray(tables, np.float64)


def test_the_lattice_is_coloured_as_a_checkerboard_and_its_table_is_exact():
    setup, local_fn = driver_setup(nx.PlateGibbs(lattice_model))
    assert setup.leaves[0].mode == dk.sites.PLATE
    np.testing.assert_array_equal(setup.leaves[0].colours, CHECKERBOARD)
    z = jnp.asarray(LATTICE_STATES[300], jnp.int32)
    _, (table,) = local_fn((z,))
    for r, c, v in itertools.product(range(3), range(3), range(2)):
        changed = np.array(LATTICE_STATES[300]).copy()
        changed[r, c] = v
        assert float(table[r, c, v]) == pytest.approx(lattice_log_density(changed), abs=1e-4)


def test_the_colour_sweep_is_exactly_stationary_and_the_step_draws_from_it():
    kernel = nx.PlateGibbs(lattice_model)
    setup, local_fn = driver_setup(kernel)
    p = sweep_matrix(lattice_tables(local_fn), setup.leaves[0].colours)
    pi = lattice_posterior()
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-9)
    assert np.max(np.abs(pi @ p - pi)) < 1e-6  # the tables are float32
    # the jitted step from one state: its empirical transitions follow the row of P
    start = 300
    x = (jnp.asarray(LATTICE_STATES[start], jnp.int32),)
    chain = kernel.spec.init(x, local_fn)
    params = kernel.spec.parameters(())

    def step(u):
        noise = dk.StepNoise((u,), jnp.float32(0.5))
        new, _ = kernel.spec.step(chain, noise, params, (), setup.sites, local_fn)
        return new.x[0]

    num = 20000
    uniforms = jax.random.uniform(jax.random.key(4), (num, 3, 3))
    ends = np.asarray(jax.jit(jax.vmap(step))(uniforms)).reshape(num, 9)
    index = ends @ (2 ** np.arange(8, -1, -1))
    counts = np.bincount(index, minlength=512)
    expected = p[start] * num
    seen = expected > 5
    chi2 = np.sum((counts[seen] - expected[seen]) ** 2 / expected[seen])
    assert chi2 < seen.sum() + 6 * np.sqrt(2 * seen.sum()), chi2
    assert counts[~seen].sum() < 5 * max(1.0, expected[~seen].sum()) + 10


def test_one_colour_forced_on_the_lattice_breaks_stationarity(monkeypatch):
    """The power of the test above: a colouring that puts neighbours together, with the
    setup's checks bypassed, gives a sweep that is not stationary."""
    monkeypatch.setattr("numpyro_ext._plate_setup.verify_plate_table", lambda *a, **k: None)
    monkeypatch.setattr(
        "discrete_kernels.colouring.greedy_colouring", lambda d: np.zeros(d.shape[0], np.int64)
    )
    setup, local_fn = driver_setup(nx.PlateGibbs(lattice_model))
    p = sweep_matrix(lattice_tables(local_fn), setup.leaves[0].colours)
    pi = lattice_posterior()
    assert np.max(np.abs(pi @ p - pi)) > 1e-3


def test_plate_gibbs_on_an_hmm_written_with_scan_matches_the_exact_marginals():
    kernel = nx.PlateGibbs(hmm_model)
    setup, _ = driver_setup(nx.PlateGibbs(hmm_model), HMM_Y)
    np.testing.assert_array_equal(setup.leaves[0].colours, [0, 1, 0, 1, 0, 1])
    mcmc = MCMC(
        kernel,
        num_warmup=100,
        num_samples=2000,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(5))
    z = np.asarray(mcmc.get_samples(group_by_chain=True)["z"])
    got = np.eye(3)[z].reshape(z.shape[:2] + (18,))
    assert_mc_close(got, hmm_marginals().ravel())


def test_gradient_kernels_run_on_the_scan_hmm_with_the_coloured_table():
    """DMALA on the scan HMM (categorical: exact differences): no carry-dtype failure at setup,
    the exact table from 2 colours x 3 values, the right marginals."""
    setup, _ = driver_setup(nx.DMALA(hmm_model), HMM_Y)
    assert setup.leaves[0].mode == dk.sites.PLATE
    assert setup.leaves[0].num_colours == 2
    mcmc = MCMC(nx.DMALA(hmm_model), num_warmup=300, num_samples=3000, progress_bar=False)
    mcmc.run(jax.random.key(6))
    z = np.asarray(mcmc.get_samples(group_by_chain=True)["z"])
    got = np.eye(3)[z].reshape(z.shape[:2] + (18,))
    assert_mc_close(got, hmm_marginals().ravel())


def check_chain_mu_in_a_gibbs_sweep(model) -> None:
    """PlateGibbs on ``z`` next to NUTS on ``mu`` against :func:`chain_mu_exact` (``model``:
    :func:`chain_mu_model` or a rewrite of it with the same density)."""
    kernel = Gibbs([(nx.PlateGibbs(model), discrete_latent_sites), (NUTS(model), None)])
    mcmc = MCMC(kernel, num_warmup=200, num_samples=2000, progress_bar=False)
    mcmc.run(jax.random.key(7))
    samples = mcmc.get_samples(group_by_chain=True)
    mean_z, mean_mu, second = chain_mu_exact()
    assert_mc_close(np.asarray(samples["z"], float), mean_z)
    mu = np.asarray(samples["mu"], float)
    assert_mc_close(np.stack([mu, mu**2], -1), np.array([mean_mu, second]))


def test_plate_gibbs_on_a_chain_in_a_gibbs_sweep_next_to_nuts_matches_the_exact_posterior():
    check_chain_mu_in_a_gibbs_sweep(chain_mu_model)


def test_dmala_with_exact_sites_on_the_lattice_uses_the_coloured_table():
    setup, _ = driver_setup(nx.DMALA(lattice_model, exact_sites=["z"]))
    assert setup.leaves[0].num_colours == 2
    mcmc = MCMC(
        nx.DMALA(lattice_model, exact_sites=["z"]),
        num_warmup=300,
        num_samples=3000,
        progress_bar=False,
    )
    mcmc.run(jax.random.key(8))
    z = np.asarray(mcmc.get_samples(group_by_chain=True)["z"], float).reshape(1, -1, 9)
    expected = lattice_posterior() @ np.array(LATTICE_STATES).reshape(-1, 9)
    assert_mc_close(z, expected)


def test_blocks_takes_a_valid_colouring_and_refuses_a_wrong_one():
    stripes = np.array([[0, 1, 2], [1, 2, 0], [2, 0, 1]])  # a 3-colouring of the lattice
    setup, _ = driver_setup(nx.PlateGibbs(lattice_model, blocks={"z": stripes}))
    np.testing.assert_array_equal(setup.leaves[0].colours, stripes)
    rows = np.repeat(np.arange(3)[:, None], 3, axis=1)  # neighbours along a row share a colour
    with pytest.raises(ValueError, match=r"blocks\['z'\] is not a valid colouring.*share a colour"):
        driver_setup(nx.PlateGibbs(lattice_model, blocks={"z": rows}))
    with pytest.raises(ValueError, match=r"blocks names \['w'\]"):
        driver_setup(nx.PlateGibbs(lattice_model, blocks={"w": rows}))
    with pytest.raises(TypeError, match="blocks must be a dict"):
        nx.PlateGibbs(lattice_model, blocks=rows)


def capture_model(y):
    """Presence per animal and occasion carried through scan with an integer start: the
    values are indices for the carry (no gradient), 600 coordinates."""
    num_animals = y.shape[1]

    def step(present, y_t):
        with numpyro.plate("animals", num_animals, dim=-1):
            z = numpyro.sample("z", dist.Bernoulli(jnp.where(present > 0, 0.7, 0.0) * 0.98 + 0.01))
            numpyro.sample("y", dist.Bernoulli(z * 0.4), obs=y_t)
        return z, None

    scan(step, jnp.ones(num_animals, dtype=jnp.int32), y)


def test_a_scan_carried_site_of_600_coordinates_runs_with_gradient_kernels():
    """Today's failure at setup (carry dtypes) is gone: the site is switched to exact
    differences from its coloured table (2 colours x 2 values, within the automatic budget)."""
    y = (np.random.default_rng(0).random((6, 100)) < 0.4).astype(np.float32)
    with pytest.warns(UserWarning, match="'z' as an index.*4 log-density evaluations"):
        setup, _ = driver_setup(nx.DMALA(capture_model), y)
    assert setup.leaves[0].mode == dk.sites.PLATE and setup.leaves[0].num_colours == 2
