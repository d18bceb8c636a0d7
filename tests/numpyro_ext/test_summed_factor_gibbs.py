"""PlateGibbs on sites that sum their interactions into one ``factor`` (a chain, a lattice):
the terms say every coordinate touches that term, so the setup finds from the site's
single-site exact tables which coordinates interact, colours them (even/odd, a checkerboard)
and the sweep draws colour by colour from fresh single-site tables. The sweep's transition
matrix is exactly stationary on a summed categorical chain (coloured by ``blocks=``) and a
summed 3x3 Ising lattice (and the jitted step draws from it); forcing one colour breaks
stationarity (the power). A chain without ``blocks=`` is drawn whole from its pair table
(forward filtering, backward sampling, then an MH step): its exact transition matrix is
stationary, from every state it draws the posterior itself, and without its MH step a
proposal that ignores the pair terms is not stationary (the power); inside a ``Gibbs`` sweep
next to NUTS it matches the exact posterior. A dense summed factor, a wrong ``blocks=`` and a
site too large to probe are refused with the reason."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

import discrete_kernels as dk
import numpyro_ext as nx
from discrete_kernels.samplers import plate_gibbs
from numpyro_ext.driver import JAX_CONTROL

from ..core.transition import colour_sweep_matrix
from .test_block_gibbs import (
    CHECKERBOARD,
    COUPLING,
    FIELD,
    LATTICE_STATES,
    PRIOR,
    W,
    Y,
    check_chain_mu_in_a_gibbs_sweep,
    driver_setup,
    lattice_posterior,
)

# a chain of 4 categorical coordinates of 3 values, its pair terms summed into one factor
CHAIN_N, CHAIN_S = 4, 3
CHAIN_PRIOR = np.array([0.5, 0.3, 0.2])
CHAIN_PAIR = np.array([[0.9, -0.4, 0.1], [-0.3, 0.7, -0.5], [0.2, -0.6, 1.1]])
CHAIN_STATES = np.array(list(itertools.product(range(CHAIN_S), repeat=CHAIN_N)))


def summed_chain_model():
    with numpyro.plate("steps", CHAIN_N):
        c = numpyro.sample("c", dist.Categorical(jnp.asarray(CHAIN_PRIOR)))
    numpyro.factor("pairs", jnp.asarray(CHAIN_PAIR)[c[:-1], c[1:]].sum())


def chain_posterior() -> np.ndarray:
    logp = np.log(CHAIN_PRIOR)[CHAIN_STATES].sum(1)
    logp += CHAIN_PAIR[CHAIN_STATES[:, :-1], CHAIN_STATES[:, 1:]].sum(1)
    pi = np.exp(logp - logp.max())
    return pi / pi.sum()


def summed_lattice_model():
    """The 3x3 Ising lattice of test_block_gibbs with its pair terms summed into one factor."""
    z = numpyro.sample("z", dist.Bernoulli(logits=jnp.asarray(FIELD)))
    s = 2 * z - 1
    numpyro.factor(
        "pairs", COUPLING * (jnp.sum(s[:, :-1] * s[:, 1:]) + jnp.sum(s[:-1, :] * s[1:, :]))
    )


def tables_at(local_fn, states: np.ndarray, shape: tuple) -> np.ndarray:
    batch = jnp.asarray(states.reshape((-1,) + shape), jnp.int32)
    _, (tables,) = jax.jit(jax.vmap(lambda x: local_fn((x,))))(batch)
    return np.asarray(tables, np.float64).reshape(len(states), states.shape[1], -1)


def assert_step_draws_from_row(step, row, n: int, s: int, key, num: int = 20000) -> None:
    """``step(uniforms) -> end state`` (n coordinates of s values), run ``num`` times from one
    state, lands on each state as often as ``row`` (that state's row of the exact transition
    matrix) says: a chi-square over the states expected more than 5 times, and few draws
    where fewer are expected."""
    uniforms = jax.random.uniform(key, (num, n))
    ends = np.asarray(jax.jit(jax.vmap(step))(uniforms))
    index = ends @ (s ** np.arange(n - 1, -1, -1))
    counts = np.bincount(index, minlength=len(row))
    expected = row * num
    seen = expected > 5
    chi2 = np.sum((counts[seen] - expected[seen]) ** 2 / expected[seen])
    assert chi2 < seen.sum() + 6 * np.sqrt(2 * seen.sum()), chi2
    assert counts[~seen].sum() < 5 * max(1.0, expected[~seen].sum()) + 10


def test_a_summed_chain_coloured_by_blocks_is_swept_and_its_sweep_is_stationary():
    kernel = nx.PlateGibbs(summed_chain_model, blocks={"c": np.array([0, 1, 0, 1])})
    setup, local_fn = driver_setup(kernel)
    leaf = setup.leaves[0]
    assert leaf.mode == dk.sites.EXACT  # single-site tables, drawn colour by colour
    np.testing.assert_array_equal(leaf.colours, [0, 1, 0, 1])
    tables = tables_at(local_fn, CHAIN_STATES, (CHAIN_N,))
    p = colour_sweep_matrix(CHAIN_STATES, tables, leaf.colours)
    pi = chain_posterior()
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-9)
    assert np.max(np.abs(pi @ p - pi)) < 1e-6
    # the jitted step from one state draws from the row of P
    start = 40
    chain = kernel.spec.init((jnp.asarray(CHAIN_STATES[start], jnp.int32),), local_fn)
    params = kernel.spec.parameters(())

    def step(u):
        noise = dk.StepNoise((u,), jnp.float32(0.5))
        new, _ = kernel.spec.step(chain, noise, params, (), setup.sites, local_fn)
        return new.x[0]

    assert_step_draws_from_row(step, p[start], CHAIN_N, CHAIN_S, jax.random.key(4))


def chain_transition_matrix(kernel, setup, local_fn, metropolis=True) -> np.ndarray:
    """The exact transition matrix of the whole-chain move on ``CHAIN_STATES``: from each
    state ``a`` the proposal ``q_a(b)`` (the kernel's ``log_proposal``, from ``a``'s pair
    table) times the MH acceptance ``min(1, pi(b) q_b(a) / (pi(a) q_a(b)))`` (or 1)."""
    batch = jnp.asarray(CHAIN_STATES, jnp.int32)
    f, (tables,) = jax.jit(jax.vmap(lambda x: local_fn((x,))))(batch)
    params = kernel.spec.parameters(())

    def log_q(a: int, b: int) -> float:
        chain = dk.ChainState((batch[a],), f[a], (tables[a],))
        return kernel.spec.log_proposal(chain, (batch[b],), params, setup.sites)

    m = len(CHAIN_STATES)
    q = np.array(
        jax.jit(jax.vmap(jax.vmap(log_q, (None, 0)), (0, None)))(np.arange(m), np.arange(m)),
        np.float64,
    )
    f = np.asarray(f, np.float64)
    p = np.exp(q)
    if metropolis:
        log_ratio = f[None, :] - f[:, None] + q.T - q
        p = p * np.exp(np.minimum(log_ratio, 0.0))
    np.fill_diagonal(p, 0.0)
    np.fill_diagonal(p, 1.0 - p.sum(axis=1))
    return p


def test_a_summed_chain_is_drawn_whole_from_its_pair_table_and_the_move_is_stationary():
    kernel = nx.PlateGibbs(summed_chain_model)
    setup, local_fn = driver_setup(kernel)
    leaf = setup.leaves[0]
    assert leaf.mode == dk.sites.CHAIN
    np.testing.assert_array_equal(leaf.colours, [0, 1, 0, 1])  # found from its tables
    p = chain_transition_matrix(kernel, setup, local_fn)
    pi = chain_posterior()
    assert np.max(np.abs(pi @ p - pi)) < 1e-6
    # every proposal is the posterior itself (up to float32 rounding): an independent draw
    assert np.max(np.abs(p - pi[None, :])) < 1e-4
    # the jitted step, noise and all, from one state draws from the posterior
    start = 40
    chain = kernel.spec.init((jnp.asarray(CHAIN_STATES[start], jnp.int32),), local_fn)
    params = kernel.spec.parameters(())
    assert kernel.spec.noise_shapes(setup.sites, setup.leaf_shapes).uniforms == ((CHAIN_N,), (1,))

    def step(key):
        u, mh = (
            jax.random.uniform(key, (CHAIN_N,)),
            jax.random.uniform(jax.random.fold_in(key, 1), (1,)),
        )
        new, info = kernel.spec.step(
            chain, dk.StepNoise((u, mh), jnp.float32(0.5)), params, (), setup.sites, local_fn
        )
        return new.x[0], info.accept_prob

    num = 20000
    ends, accept = jax.jit(jax.vmap(step))(jax.random.split(jax.random.key(4), num))
    assert float(np.min(accept)) > 0.999
    index = np.asarray(ends) @ (CHAIN_S ** np.arange(CHAIN_N - 1, -1, -1))
    counts = np.bincount(index, minlength=len(CHAIN_STATES))
    expected = pi * num
    seen = expected > 5
    chi2 = np.sum((counts[seen] - expected[seen]) ** 2 / expected[seen])
    assert chi2 < seen.sum() + 6 * np.sqrt(2 * seen.sum()), chi2


def test_a_chain_proposal_without_its_pair_terms_needs_the_mh_step(monkeypatch):
    """The power of the test above: with the pair terms dropped from the expansion the draw
    is a product of single-site conditionals; its MH step keeps the move stationary, and the
    same proposal always accepted is not."""
    from discrete_kernels import chains

    exact = chains.chain_potentials

    def without_pairs(table, positions):
        unary, pairwise = exact(table, positions)
        return unary, jnp.zeros_like(pairwise)

    monkeypatch.setattr(chains, "chain_potentials", without_pairs)
    check_stationary_only_with_the_mh_step(summed_chain_model)


def check_stationary_only_with_the_mh_step(model) -> None:
    """PlateGibbs's whole-chain move on ``model`` (a density equal to the chain's) is exactly
    stationary with its MH step and not without it."""
    kernel = nx.PlateGibbs(model)
    setup, local_fn = driver_setup(kernel)
    pi = chain_posterior()
    corrected = chain_transition_matrix(kernel, setup, local_fn)
    assert np.max(np.abs(pi @ corrected - pi)) < 1e-6
    uncorrected = chain_transition_matrix(kernel, setup, local_fn, metropolis=False)
    assert np.max(np.abs(pi @ uncorrected - pi)) > 1e-3


def summed_chain_mu_model(y=Y):
    """test_block_gibbs's chain next to a continuous mean, its pair terms summed into one
    factor: a chain only its single-site tables reveal."""
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    with numpyro.plate("rows", 4):
        z = numpyro.sample("z", dist.Bernoulli(PRIOR))
        numpyro.sample("y", dist.Normal(mu + jnp.asarray(W) * z, 1.0), obs=y)
    s = 2 * z - 1
    numpyro.factor("pairs", COUPLING * jnp.sum(s[:-1] * s[1:]))


def test_a_summed_chain_drawn_whole_in_a_gibbs_sweep_next_to_nuts_matches_the_exact_posterior():
    given_mu = numpyro.handlers.condition(summed_chain_mu_model, {"mu": 0.3})
    setup, _ = driver_setup(nx.PlateGibbs(given_mu))
    assert setup.leaves[0].mode == dk.sites.CHAIN
    check_chain_mu_in_a_gibbs_sweep(summed_chain_mu_model)


def test_a_summed_lattice_is_coloured_as_a_checkerboard_and_its_sweep_is_stationary():
    setup, local_fn = driver_setup(nx.PlateGibbs(summed_lattice_model))
    leaf = setup.leaves[0]
    assert leaf.mode == dk.sites.EXACT
    np.testing.assert_array_equal(leaf.colours, CHECKERBOARD)
    states = np.array(LATTICE_STATES).reshape(-1, 9)
    p = colour_sweep_matrix(states, tables_at(local_fn, states, (3, 3)), leaf.colours.reshape(-1))
    pi = lattice_posterior()
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-9)
    assert np.max(np.abs(pi @ p - pi)) < 1e-6


@pytest.mark.parametrize("model", [summed_chain_model, summed_lattice_model])
def test_one_colour_forced_on_a_summed_factor_breaks_stationarity(monkeypatch, model):
    """The power of the tests above: every coordinate drawn at once from its single-site row
    (the setup's colouring replaced by one colour) is not stationary."""
    monkeypatch.setattr(
        "numpyro_ext._plate_setup.greedy_graph_colouring", lambda g: np.zeros(g.shape[0], np.int64)
    )
    monkeypatch.setattr("numpyro_ext._plate_setup.draws_chain", lambda *args: False)  # a sweep
    setup, local_fn = driver_setup(nx.PlateGibbs(model))
    colours = np.asarray(setup.leaves[0].colours).reshape(-1)
    assert colours.max() == 0
    if model is summed_chain_model:
        states, shape, pi = CHAIN_STATES, (CHAIN_N,), chain_posterior()
    else:
        states, shape, pi = np.array(LATTICE_STATES).reshape(-1, 9), (3, 3), lattice_posterior()
    p = colour_sweep_matrix(states, tables_at(local_fn, states, shape), colours)
    assert np.max(np.abs(pi @ p - pi)) > 1e-3


def test_blocks_on_a_summed_lattice_are_checked_against_its_tables():
    stripes = np.array([[0, 1, 2], [1, 2, 0], [2, 0, 1]])
    setup, _ = driver_setup(nx.PlateGibbs(summed_lattice_model, blocks={"z": stripes}))
    np.testing.assert_array_equal(setup.leaves[0].colours, stripes)
    rows = np.repeat(np.arange(3)[:, None], 3, axis=1)
    with pytest.raises(
        ValueError, match=r"blocks\['z'\] is not a valid colouring.*share a colour.*interact"
    ):
        driver_setup(nx.PlateGibbs(summed_lattice_model, blocks={"z": rows}))


DENSE_N = 6  # more than UNROLLED_COLOURS: the sweep goes through the adapter's loop
DENSE_W = np.random.default_rng(0).normal(size=(DENSE_N, DENSE_N))
DENSE_STATES = np.array(list(itertools.product((0, 1), repeat=DENSE_N)))


def dense_model(n: int = DENSE_N):
    """A quadratic form with a full matrix: every pair of coordinates interacts."""
    w = jnp.asarray(DENSE_W if n == DENSE_N else np.random.default_rng(0).normal(size=(n, n)))
    with numpyro.plate("items", n):
        z = numpyro.sample("z", dist.Bernoulli(0.5))
    numpyro.factor("quadratic", z @ (w + w.T) @ z / n)


def dense_posterior() -> np.ndarray:
    logp = np.einsum("si,ij,sj->s", DENSE_STATES, DENSE_W + DENSE_W.T, DENSE_STATES) / DENSE_N
    pi = np.exp(logp - logp.max())
    return pi / pi.sum()


def test_a_dense_summed_factor_is_swept_one_coordinate_at_a_time_and_is_stationary():
    """The last resort: every coordinate interacts with every other, so each is its own
    colour; the sweep's exact matrix keeps the posterior, and the compiled step (the colours
    through ``lax.fori_loop``, as in ``MCMC``) draws from its rows."""
    # on a GPU, JAX multiplies float32 matrices in TF32 by default: the model's own product
    # would then differ between the table's and the row's evaluations by about 1e-4
    with jax.default_matmul_precision("highest"):
        _check_dense_sweep()


def _check_dense_sweep() -> None:
    assert DENSE_N > plate_gibbs.UNROLLED_COLOURS
    kernel = nx.PlateGibbs(dense_model)
    setup, local_fn = driver_setup(kernel)
    leaf = setup.leaves[0]
    assert leaf.mode == dk.sites.EXACT
    assert sorted(np.asarray(leaf.colours).tolist()) == list(range(DENSE_N))
    colours = np.asarray(leaf.colours).reshape(-1)
    # the step reads one coordinate's row at a time (S evaluations): the table's row; the
    # driver's function leaves the unread table out (N x S evaluations after each sweep)
    assert isinstance(local_fn, dk.LocalFnWithRows)
    assert local_fn((jnp.zeros(DENSE_N, jnp.int32),))[1] == (None,)
    tables = tables_at(setup.local_fn((), {}), DENSE_STATES, (DENSE_N,))
    state = (jnp.asarray(DENSE_STATES[37], jnp.int32),)
    rows = [np.asarray(local_fn.row(state, 0, jnp.asarray(i))) for i in range(DENSE_N)]
    np.testing.assert_allclose(np.array(rows), tables[37], rtol=1e-6, atol=1e-6)
    p = colour_sweep_matrix(DENSE_STATES, tables, colours)
    pi = dense_posterior()
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-9)
    assert np.max(np.abs(pi @ p - pi)) < 1e-6
    start = 21
    chain = kernel.spec.init((jnp.asarray(DENSE_STATES[start], jnp.int32),), local_fn)
    params = kernel.spec.parameters(())

    def step(u):
        noise = dk.StepNoise((u,), jnp.float32(0.5))
        new, _ = dk.kernel.take_step(
            kernel.spec, chain, noise, params, (), setup.sites, local_fn, JAX_CONTROL
        )
        return new.x[0]

    assert_step_draws_from_row(step, p[start], DENSE_N, 2, jax.random.key(5))


def test_the_loop_of_colours_draws_what_the_unrolled_sweep_draws(monkeypatch):
    """The power of the chi-square above: the looped sweep by rows against the unrolled one
    by tables on the same uniforms (equal), and a loop that skips its last colour (not
    equal)."""
    kernel = nx.PlateGibbs(dense_model)
    setup, local_fn = driver_setup(kernel)
    chain = kernel.spec.init((jnp.zeros(DENSE_N, jnp.int32),), local_fn)
    params = kernel.spec.parameters(())
    uniforms = jax.random.uniform(jax.random.key(6), (200, DENSE_N))

    def ends(control, fn=local_fn):
        def step(u):
            noise = dk.StepNoise((u,), jnp.float32(0.5))
            new, _ = dk.kernel.take_step(
                kernel.spec, chain, noise, params, (), setup.sites, fn, control
            )
            return new.x[0]

        return np.asarray(jax.jit(jax.vmap(step))(uniforms))

    looped = ends(JAX_CONTROL)
    monkeypatch.setattr(plate_gibbs, "UNROLLED_COLOURS", DENSE_N)
    # unrolled, the sweep reads the tables the driver leaves out for the loop
    np.testing.assert_array_equal(looped, ends(JAX_CONTROL, setup.local_fn((), {})))
    short = JAX_CONTROL._replace(
        loop=lambda num, body, carry: JAX_CONTROL.loop(num - 1, body, carry)
    )
    monkeypatch.setattr(plate_gibbs, "UNROLLED_COLOURS", 1)
    assert np.any(ends(short) != looped)


def test_a_dense_summed_factor_of_many_coordinates_is_refused_with_the_reason():
    with pytest.raises(
        ValueError,
        match="'z' is not conditionally independent.*every coordinate interacts with every other"
        r" \(moving any one changes the exact conditional.*at most 16 coordinates",
    ):
        driver_setup(nx.PlateGibbs(lambda: dense_model(20)))


def test_a_summed_chain_too_large_to_probe_is_refused_with_the_rewrite():
    def long_chain():
        with numpyro.plate("steps", 400):
            z = numpyro.sample("z", dist.Bernoulli(0.5))
        numpyro.factor("pairs", 0.5 * jnp.sum(z[:-1] * z[1:]))

    with pytest.raises(ValueError, match="unsummed array of terms.*too many to find which"):
        driver_setup(nx.PlateGibbs(long_chain))


def dense_model_with_mu():
    """:func:`dense_model` with a continuous ``mu ~ N(0, 1)`` that tilts every coordinate:
    ``f = q(z) + mu a(z)``, ``a(z) = (sum z - N / 2) / 2``; summed over ``mu``,
    ``p(z) ∝ exp(q(z) + a(z)^2 / 2)`` and ``E[mu | z] = a(z)``."""
    with numpyro.plate("items", DENSE_N):
        z = numpyro.sample("z", dist.Bernoulli(0.5))
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    w = jnp.asarray(DENSE_W)
    numpyro.factor("quadratic", z @ (w + w.T) @ z / DENSE_N + mu * (z.sum() - DENSE_N / 2) / 2)


def test_a_dense_site_swept_by_rows_as_a_gibbs_block_next_to_nuts_matches_the_exact_posterior():
    """The swept site's table is left out of the state at its start, at every refresh of the
    ``Gibbs`` sweep (new ``mu``) and after each step alike (one structure for the loop's
    carry); the draws match the closed form (checked by hand to fail, max z 29, with each
    row's draw made from the row of the coordinate before it)."""
    from numpyro.infer import MCMC, NUTS, Gibbs

    from ..mc import assert_mc_close

    a = (DENSE_STATES.sum(1) - DENSE_N / 2) / 2
    logp = np.einsum("si,ij,sj->s", DENSE_STATES, DENSE_W + DENSE_W.T, DENSE_STATES) / DENSE_N
    pi = np.exp(logp + a**2 / 2 - (logp + a**2 / 2).max())
    pi /= pi.sum()
    exact = np.append(pi @ DENSE_STATES, pi @ a)
    kernel = Gibbs([(nx.PlateGibbs(dense_model_with_mu), ["z"]), (NUTS(dense_model_with_mu), None)])
    mcmc = MCMC(kernel, num_warmup=200, num_samples=1500, progress_bar=False)
    mcmc.run(jax.random.key(3))
    samples = mcmc.get_samples(group_by_chain=True)
    stats = np.concatenate([samples["z"], samples["mu"][..., None]], -1)
    assert_mc_close(stats, exact, num_se=4.0)
