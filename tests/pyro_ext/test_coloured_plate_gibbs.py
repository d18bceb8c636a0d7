"""PlateGibbs in Pyro on sites whose coordinates interact locally (a chain, a lattice given
term by term): the setup finds which terms each coordinate changes and colours the
coordinates (or checks the user's ``blocks=``); each colour's table, from one model trace per
colour and value, equals the single-site table; the colour sweep is exactly stationary (its
transition matrix through the Pyro driver; the test's power shown by forcing one colour on
the chain) and matches the exact marginals through ``pyro.infer.MCMC``."""

import itertools

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import HMC, MCMC

import discrete_kernels as dk
import pyro_ext as px

from ..core.transition import colour_sweep_matrix
from ..mc import assert_mc_close

FIELD = (0.3, -0.2, 0.5, 0.1, -0.4)
COUPLING = 0.7


def chain_model():
    """Five binary spins on a chain, the pair terms given edge by edge (one element each)."""
    with pyro.plate("sites", len(FIELD)):
        x = pyro.sample("x", dist.Bernoulli(0.5))
    s = 2.0 * x - 1.0
    pyro.factor("pairs", COUPLING * s[1:] * s[:-1])
    pyro.factor("field", torch.tensor(FIELD) * s)


def potts_chain_model():
    """Four three-valued sites on a chain: agreement of neighbours rewarded, edge by edge."""
    with pyro.plate("sites", 4):
        c = pyro.sample("c", dist.Categorical(torch.tensor([0.5, 0.3, 0.2])))
    pyro.factor("agree", 0.9 * (c[1:] == c[:-1]).float())


def summed_chain_model():
    """The chain with its pair terms summed into one factor: every coordinate changes it."""
    with pyro.plate("sites", len(FIELD)):
        x = pyro.sample("x", dist.Bernoulli(0.5))
    s = 2.0 * x - 1.0
    pyro.factor("pairs", COUPLING * torch.sum(s[1:] * s[:-1]))


def setup_of(kernel):
    pyro.set_rng_seed(0)
    kernel.setup(0)
    return kernel._setup, kernel._local_fn()


def states_of(num_values: int, size: int, dtype) -> list:
    return [
        (torch.tensor(v, dtype=dtype),) for v in itertools.product(range(num_values), repeat=size)
    ]


def posterior(setup, name: str, states: list) -> np.ndarray:
    logp = np.array([float(setup.log_density({name: s[0]})) for s in states])
    pi = np.exp(logp - logp.max())
    return pi / pi.sum()


@pytest.mark.parametrize(
    ("model", "name", "num_values", "dtype", "colours"),
    [
        (chain_model, "x", 2, torch.float32, [0, 1, 0, 1, 0]),
        (potts_chain_model, "c", 3, torch.int64, [0, 1, 0, 1]),
    ],
    ids=["binary", "categorical"],
)
def test_a_chain_is_coloured_and_its_table_is_the_single_site_table(
    model, name, num_values, dtype, colours
):
    setup, local_fn = setup_of(px.PlateGibbs(model))
    (leaf,) = setup.leaves
    assert leaf.mode == dk.sites.PLATE
    np.testing.assert_array_equal(leaf.colours, colours)
    exact_fn = px._target.make_local_fn(
        setup.log_density, (dk.sites.LeafSpec(name, leaf.domain, dk.sites.EXACT),)
    )
    for state in states_of(num_values, len(colours), dtype)[::3]:
        _, (table,) = local_fn(state)
        _, (exact,) = exact_fn(state)
        torch.testing.assert_close(table, exact, atol=1e-5, rtol=1e-5)


def sweep_matrix(local_fn, states: list, colours: np.ndarray) -> np.ndarray:
    tables = np.stack([local_fn(state)[1][0].double().cpu().numpy() for state in states])
    values = np.stack([state[0].cpu().numpy() for state in states]).astype(np.int64)
    return colour_sweep_matrix(values, tables, np.asarray(colours))


def test_the_colour_sweep_is_exactly_stationary():
    kernel = px.PlateGibbs(chain_model)
    setup, local_fn = setup_of(kernel)
    states = states_of(2, len(FIELD), torch.float32)
    p = sweep_matrix(local_fn, states, setup.leaves[0].colours)
    pi = posterior(setup, "x", states)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-9)
    assert np.max(np.abs(pi @ p - pi)) < 1e-6
    assert np.all(np.diag(p) < 1.0)


def test_the_colour_sweep_step_draws_its_transition_row():
    """The driver's step from one state (1,500 steps, each from the same state) against the
    row of the sweep's exact transition matrix."""
    kernel = px.PlateGibbs(chain_model)
    setup, local_fn = setup_of(kernel)
    states = states_of(2, len(FIELD), torch.float32)
    p = sweep_matrix(local_fn, states, setup.leaves[0].colours)
    start = 11
    chain = kernel.spec.init(states[start], local_fn)
    params = kernel.spec.parameters(())
    generator = np.random.default_rng(3)
    num = 1500
    counts = np.zeros(len(states))
    for _ in range(num):
        u = torch.as_tensor(generator.uniform(size=len(FIELD)), dtype=torch.float32)
        new, _ = kernel.spec.step(
            chain, dk.StepNoise((u,), None), params, (), setup.sites, local_fn
        )
        counts[int(new.x[0].cpu().numpy() @ (2 ** np.arange(len(FIELD) - 1, -1, -1)))] += 1
    expected = p[start] * num
    seen = expected > 5
    chi2 = np.sum((counts[seen] - expected[seen]) ** 2 / expected[seen])
    assert chi2 < seen.sum() + 6 * np.sqrt(2 * seen.sum()), chi2
    assert counts[~seen].sum() < 5 * max(1.0, expected[~seen].sum()) + 10


def test_one_colour_forced_on_the_chain_breaks_stationarity(monkeypatch):
    """The power of the test above: the user's colouring with every coordinate in one colour,
    its checks bypassed, draws interacting neighbours together from their single-site
    conditionals, which is not stationary (and the check refuses it: next test)."""
    monkeypatch.setattr("discrete_kernels.colouring.check_colouring", lambda *a, **k: None)
    monkeypatch.setattr("pyro_ext._plate_setup.verify_plate_table", lambda *a, **k: None)
    monkeypatch.setattr("pyro_ext._plate_setup.term_owners", _first_owner)
    kernel = px.PlateGibbs(chain_model, blocks={"x": np.zeros(len(FIELD), dtype=np.int64)})
    setup, local_fn = setup_of(kernel)
    states = states_of(2, len(FIELD), torch.float32)
    p = sweep_matrix(local_fn, states, setup.leaves[0].colours)
    pi = posterior(setup, "x", states)
    assert np.max(np.abs(pi @ p - pi)) > 1e-3


def _first_owner(dependence, colours):
    """Each term to the first coordinate that changes it (what a one-colour sweep would need)."""
    owners = np.full((1, dependence.shape[1]), dependence.shape[0], dtype=np.int64)
    hit = dependence.any(axis=0)
    owners[0, hit] = np.argmax(dependence[:, hit], axis=0)
    return owners


def test_the_users_blocks_are_checked():
    kernel = px.PlateGibbs(chain_model, blocks={"x": np.array([0, 1, 2, 0, 1])})
    setup, _ = setup_of(kernel)
    np.testing.assert_array_equal(setup.leaves[0].colours, [0, 1, 2, 0, 1])
    bad = px.PlateGibbs(chain_model, blocks={"x": np.array([0, 0, 1, 1, 0])})
    with pytest.raises(ValueError, match=r"blocks\['x'\] is not a valid colouring"):
        setup_of(bad)
    shaped = px.PlateGibbs(chain_model, blocks={"x": np.zeros(3, dtype=np.int64)})
    with pytest.raises(ValueError, match=r"blocks\['x'\] must be an integer array"):
        setup_of(shaped)


def test_a_factor_summed_over_the_chain_is_refused_with_the_rewrite():
    with pytest.raises(ValueError, match="every coordinate interacts.*unsummed"):
        setup_of(px.PlateGibbs(summed_chain_model))


def test_independent_coordinates_outside_a_plate_take_one_colour():
    setup, _ = setup_of(px.PlateGibbs(lambda: pyro.sample("z", dist.Bernoulli(0.3).expand([3]))))
    np.testing.assert_array_equal(setup.leaves[0].colours, [0, 0, 0])


def test_the_colour_sweep_matches_the_exact_marginals_through_mcmc():
    """Power: with every coordinate given one colour (the colouring's and the table's checks
    switched off by hand), max |z| 9.5 at these 800 draws (0.4 right)."""
    states = np.array(list(itertools.product((0, 1), repeat=len(FIELD))), dtype=float)
    s = 2 * states - 1
    logp = COUPLING * np.sum(s[:, 1:] * s[:, :-1], 1) + s @ np.array(FIELD)
    pi = np.exp(logp - logp.max())
    exact = (pi / pi.sum()) @ states
    pyro.set_rng_seed(0)
    mcmc = MCMC(px.PlateGibbs(chain_model), num_samples=800, warmup_steps=100, num_chains=1,
                disable_progbar=True)  # fmt: skip
    mcmc.run()
    x = mcmc.get_samples(group_by_chain=True)["x"].cpu().numpy().astype(np.float64)
    assert_mc_close(x, exact)


CHAIN_Y = (0.9, 1.4, -0.2, -1.1, 0.3)


def chain_regression(y):
    """The chain's spins shift the mean of one observation each around a shared ``mu``."""
    mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
    with pyro.plate("sites", len(FIELD)):
        x = pyro.sample("x", dist.Bernoulli(0.5))
        pyro.sample("y", dist.Normal(mu + (2.0 * x - 1.0), 1.0), obs=y)
    s = 2.0 * x - 1.0
    pyro.factor("pairs", COUPLING * s[1:] * s[:-1])


def chain_regression_exact() -> tuple[np.ndarray, float, float]:
    """E[x], E[mu], E[mu^2]: the spins enumerated, ``mu`` on a fine grid."""
    states = np.array(list(itertools.product((0, 1), repeat=len(FIELD))), dtype=float)
    s = 2 * states - 1
    mu = np.linspace(-6.0, 6.0, 4001)
    y = np.array(CHAIN_Y)
    log_lik = -0.5 * np.sum((y - mu[:, None, None] - s[None]) ** 2, axis=-1)  # (grid, states)
    log_joint = log_lik - 0.5 * mu[:, None] ** 2 + COUPLING * np.sum(s[:, 1:] * s[:, :-1], 1)
    w = np.exp(log_joint - log_joint.max())
    w /= w.sum()
    return w.sum(0) @ states, float(w.sum(1) @ mu), float(w.sum(1) @ mu**2)


def test_the_colour_sweep_as_a_gibbs_block_next_to_hmc_matches_the_exact_posterior():
    """Power: with every coordinate given one colour (the checks switched off by hand), max
    |z| 18.8 at these 600 draws (1.6 right)."""
    y = torch.tensor(CHAIN_Y)
    kernel = px.PlateGibbs(chain_regression)
    hmc = HMC(chain_regression, step_size=0.5, num_steps=3, adapt_step_size=False)
    pyro.set_rng_seed(1)
    mcmc = MCMC(px.Gibbs([(kernel, ["x"]), (hmc, None)]), num_samples=600, warmup_steps=100,
                disable_progbar=True)  # fmt: skip
    mcmc.run(y)
    np.testing.assert_array_equal(kernel._setup.leaves[0].colours, [0, 1, 0, 1, 0])
    samples = mcmc.get_samples(group_by_chain=True)
    mean_x, mean_mu, second = chain_regression_exact()
    assert_mc_close(samples["x"].cpu().numpy().astype(float), mean_x)
    mu = samples["mu"].cpu().numpy().astype(float)
    assert_mc_close(np.stack([mu, mu**2], -1), np.array([mean_mu, second]))


def test_term_dependence_moves_each_coordinate_to_every_other_value():
    """An agreement term ``c_0 == c_1`` at ``(0, 2)``: moving ``c_0`` to its next value (1)
    leaves it unchanged; only the move to 2 shows that it depends on ``c_0``."""

    def pair():
        with pyro.plate("sites", 2):
            c = pyro.sample("c", dist.Categorical(torch.tensor([0.5, 0.3, 0.2])))
        pyro.factor("agree", (c[0] == c[1]).float().reshape(1))

    all_terms = px._plates.all_terms_fn(pair, (), {})
    point = (torch.tensor([0, 2]),)
    dependence = px._plates.term_dependence(
        all_terms, 0, dk.Categorical(3), [point], lambda ys: {"c": ys[0]}
    )
    # terms: the two prior terms, then the agreement
    np.testing.assert_array_equal(dependence, [[True, False, True], [False, True, True]])


def test_a_colour_draw_reads_that_colours_rows_alone_and_draws_the_same():
    """Between two colour draws the sweep evaluates only the next colour's rows of the table
    (``LocalFnByLeaf.colour_local``: one trace per value instead of one per colour and value)
    and after its last draw only the log density: on the same noise, the same draws and log
    density as evaluating the whole table after each draw, and the tables the next step
    computes are those. Power: rows of the wrong colour change the draws."""
    calls = [0]

    def counted():
        calls[0] += 1
        chain_model()

    kernel = px.PlateGibbs(counted)
    pyro.set_rng_seed(0)
    kernel.setup(0)
    setup, spec = kernel._setup, kernel.spec
    colours = setup.sites.colouring(0)
    np.testing.assert_array_equal(colours, [0, 1, 0, 1, 0])
    by_colour = setup.local_fn()
    assert isinstance(by_colour, dk.LocalFnByLeaf) and by_colour.colour_local is not None
    every = by_colour.local_fn
    wrong = dk.LocalFnByLeaf(
        every, by_colour.leaf_local, lambda ys, j, c: by_colour.colour_local(ys, j, 1 - c)
    )
    params = spec.parameters(kernel.adapt_state)
    state = spec.init(setup.to_leaves(kernel.initial_params), every)
    num_values = num_colours = 2
    moved = differs = 0
    for _ in range(30):
        shapes = spec.noise_shapes(setup.sites, [tuple(x.shape) for x in state.x])
        noise = px.driver.draw_noise(shapes, setup.like)
        counts, steps = [], []
        for local_fn in (by_colour, every, wrong):
            calls[0] = 0
            steps.append(spec.step(state, noise, params, kernel.adapt_state, setup.sites, local_fn))
            counts.append(calls[0])
        (a, _), (b, _), (c, _) = steps
        # a table of every colour: one trace per colour and value, and the log density
        whole = 1 + num_colours * num_values
        lazy = any(local is None for local in state.local)
        assert counts[:2] == [
            (1 + num_values if lazy else 0) + (1 + num_values) + 1,
            (whole if lazy else 0) + num_colours * whole,
        ]
        assert torch.equal(a.x[0], b.x[0]) and torch.equal(a.log_density, b.log_density)
        assert all(local is None for local in a.local)  # computed where the next step reads them
        f, tables = every(a.x)
        assert torch.equal(f, a.log_density) and torch.equal(tables[0], b.local[0])
        moved += int((a.x[0] != state.x[0]).sum())
        differs += int(not torch.equal(c.x[0], a.x[0]))
        state = a
    assert moved > 10  # the draws move: the comparison is not of unchanged states
    assert differs > 5
