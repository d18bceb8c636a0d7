"""PlateGibbs and plate-mode exact tables in NumPyro: the table from S evaluations equals
single-site changes, the kernel is exactly stationary (its transition matrix), matches exact
posteriors alone and as a Gibbs block next to NUTS, and refuses a site whose coordinates are
coupled; the test's power shown by forcing plate mode on a coupled site."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC, NUTS, Gibbs
from numpyro.infer.gibbs import discrete_latent_sites

import discrete_kernels as dk
import numpyro_ext as nx
from numpyro_ext import _plates

from ..core.transition import colour_sweep_matrix, spec_transition_matrix
from ..mc import assert_mc_close, plate_model_exact

W = np.array([1.0, -2.0, 1.5])
Y = np.array([0.8, -1.4, 2.1])
PRIOR = 0.4
ITEM_SCORES = np.array([[0.0, 1.0, -1.0], [2.0, 0.0, 0.5], [-1.0, 0.3, 0.0]])


def plate_model(y=Y):
    """z_i ~ Bernoulli(0.4) and y_i ~ N(mu + w_i z_i, 1) per row: z conditionally independent."""
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    with numpyro.plate("rows", 3):
        z = numpyro.sample("z", dist.Bernoulli(PRIOR))
        numpyro.sample("y", dist.Normal(mu + jnp.asarray(W) * z, 1.0), obs=y)


def discrete_plate_model():
    """Three categorical items, each with its own likelihood: independent given nothing."""
    with numpyro.plate("items", 3):
        c = numpyro.sample("c", dist.Categorical(jnp.array([0.2, 0.3, 0.5])))
        numpyro.factor("lik", jnp.asarray(ITEM_SCORES)[jnp.arange(3), c])


def coupled_model():
    """A factor over the whole site couples the coordinates: not conditionally independent."""
    with numpyro.plate("rows", 3):
        z = numpyro.sample("z", dist.Bernoulli(0.5))
    numpyro.factor("pair", 0.8 * z[0] * z[1] - 0.6 * z[1] * z[2])


def exact_plate_model(y=Y):
    """E z, E mu, E mu^2 of plate_model by enumerating z (conjugate in mu)."""
    return plate_model_exact(y, W, PRIOR)


def driver_setup(kernel):
    kernel._setup = kernel._site_setup(jax.random.key(0), None, (), {})
    return kernel._setup, kernel._local_fn((), {})


def test_plate_table_costs_s_evaluations_and_equals_single_site_changes():
    kernel = nx.PlateGibbs(discrete_plate_model)
    setup, local_fn = driver_setup(kernel)
    assert [s.mode for s in setup.leaves] == [dk.sites.PLATE]
    x = jnp.array([0, 2, 1])
    f, (table,) = local_fn((x,))
    log_density = setup.log_density_fn((), {})
    for i in range(3):
        for v in range(3):
            changed = x.at[i].set(v)
            assert float(table[i, v]) == pytest.approx(float(log_density((changed,))), abs=1e-5)


def test_plate_gibbs_is_exactly_stationary():
    kernel = nx.PlateGibbs(discrete_plate_model)
    setup, local_fn = driver_setup(kernel)
    states = [(jnp.array(c),) for c in itertools.product(range(3), repeat=3)]
    params = kernel.spec.parameters(())
    p, _ = spec_transition_matrix(kernel.spec, states, local_fn, params, setup.sites)
    log_density = setup.log_density_fn((), {})
    logp = np.array([float(log_density(s)) for s in states])
    pi = np.exp(logp - logp.max())
    pi /= pi.sum()
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-6)
    assert np.max(np.abs(pi @ p - pi)) < 1e-6
    assert np.all(np.diag(p) < 1.0)  # it moves


def test_forcing_plate_mode_on_a_coupled_site_breaks_stationarity(monkeypatch):
    """The power of the test above: with the setup's check bypassed, the block update of a
    coupled site is not stationary (and the check refuses it: next test)."""
    monkeypatch.setattr("numpyro_ext._plate_setup.verify_plate_table", lambda *a, **k: None)
    monkeypatch.setattr("numpyro_ext._plate_setup._outside_plate_reason", lambda *a, **k: None)
    kernel = nx.PlateGibbs(coupled_model)
    setup, local_fn = driver_setup(kernel)
    states = [(jnp.array(z),) for z in itertools.product(range(2), repeat=3)]
    p, _ = spec_transition_matrix(
        kernel.spec, states, local_fn, kernel.spec.parameters(()), setup.sites
    )
    logp = np.array([float(setup.log_density_fn((), {})(s)) for s in states])
    pi = np.exp(logp - logp.max())
    pi /= pi.sum()
    assert np.max(np.abs(pi @ p - pi)) > 1e-3


def test_potential_mode_is_refused():
    kernel = nx.PlateGibbs(potential_fn=lambda z: -jnp.sum(z), domain=nx.Binary())
    with pytest.raises(ValueError, match="PlateGibbs: needs a model"):
        kernel.init(jax.random.key(0), 0, jnp.zeros(3, jnp.int32), (), {})


def chain_pair_model():
    """Pair terms of a chain, one factor element per pair: two colours."""
    with numpyro.plate("rows", 3):
        z = numpyro.sample("z", dist.Bernoulli(0.5))
    numpyro.factor("pairs", jnp.array([0.8, -0.6]) * z[:-1] * z[1:])


def fully_coupled_model():
    """One factor over all coordinates: no two may share a colour."""
    with numpyro.plate("rows", 3):
        z = numpyro.sample("z", dist.Bernoulli(0.5))
    numpyro.factor("triple", 0.8 * z[0] * z[1] * z[2])


def test_a_fully_coupled_site_is_swept_one_coordinate_at_a_time():
    """The last resort (a large one is refused: test_summed_factor_gibbs)."""
    setup, _ = driver_setup(nx.PlateGibbs(fully_coupled_model))
    np.testing.assert_array_equal(setup.leaves[0].colours, [0, 1, 2])


def test_a_coupled_plate_site_is_coloured_and_a_site_outside_plates_is_one_block():
    setup, _ = driver_setup(nx.PlateGibbs(chain_pair_model))  # a chain z0 - z1 - z2
    np.testing.assert_array_equal(setup.leaves[0].colours, [0, 1, 0])
    setup, _ = driver_setup(
        nx.PlateGibbs(lambda: numpyro.sample("z", dist.Bernoulli(0.5).expand([3])))
    )
    np.testing.assert_array_equal(setup.leaves[0].colours, [0, 0, 0])


def test_plate_gibbs_alone_matches_exact_marginals():
    kernel = nx.PlateGibbs(discrete_plate_model)
    setup, _ = driver_setup(nx.PlateGibbs(discrete_plate_model))
    log_density = setup.log_density_fn((), {})
    states = list(itertools.product(range(3), repeat=3))
    logp = np.array([float(log_density((jnp.array(c),))) for c in states])
    pi = np.exp(logp - logp.max())
    pi /= pi.sum()
    onehot = np.array([np.eye(3)[list(c)].ravel() for c in states])
    mcmc = MCMC(
        kernel,
        num_warmup=50,
        num_samples=2000,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(1))
    c = np.asarray(mcmc.get_samples(group_by_chain=True)["c"])
    got = np.eye(3)[c].reshape(c.shape[:2] + (9,))
    assert_mc_close(got, pi @ onehot)
    assert np.asarray(mcmc.get_extra_fields()["accepted"]).mean() > 0.5


def test_plate_gibbs_as_a_gibbs_block_next_to_nuts_matches_the_exact_posterior():
    kernel = Gibbs([(nx.PlateGibbs(plate_model), discrete_latent_sites), (NUTS(plate_model), None)])
    mcmc = MCMC(kernel, num_warmup=300, num_samples=3000, progress_bar=False)
    mcmc.run(jax.random.key(2))
    samples = mcmc.get_samples(group_by_chain=True)
    mean_z, mean_mu, second = exact_plate_model()
    assert_mc_close(np.asarray(samples["z"], float), mean_z)
    mu = np.asarray(samples["mu"], float)
    assert_mc_close(np.stack([mu, mu**2], -1), np.array([mean_mu, second]))


def test_exact_sites_on_a_plate_site_use_the_plate_table():
    """DMALA with exact_sites on a plate site: the table from S evaluations, right answer."""
    kernel = nx.DMALA(plate_model, exact_sites=["z"])
    gibbs = Gibbs([(kernel, discrete_latent_sites), (NUTS(plate_model), None)])
    mcmc = MCMC(gibbs, num_warmup=300, num_samples=3000, progress_bar=False)
    mcmc.run(jax.random.key(3))
    setup, _ = driver_setup(nx.DMALA(discrete_plate_model))  # categorical: exact by default
    assert [s.mode for s in setup.leaves] == [dk.sites.PLATE]
    mean_z, _, _ = exact_plate_model()
    assert_mc_close(np.asarray(mcmc.get_samples(group_by_chain=True)["z"], float), mean_z)


def test_plate_dims_reads_the_plates():
    with numpyro.handlers.seed(rng_seed=0), numpyro.handlers.trace() as tr:
        with numpyro.plate("a", 4, dim=-2), numpyro.plate("b", 3):
            numpyro.sample("x", dist.Bernoulli(0.5))
        numpyro.sample("e", dist.Bernoulli(0.5).expand([3]).to_event(1))
    assert _plates.plate_dims(tr["x"]) == ({"a": -2, "b": -1}, None)
    assert "event" in _plates.plate_dims(tr["e"])[1]


def test_a_coupled_categorical_site_is_swept_not_drawn_whole_from_its_single_site_table():
    """A categorical site always has a single-site table; one that is neither a plate nor
    colourable into fewer colours than coordinates must be swept one coordinate at a time,
    not drawn whole from that table (rows that are not a joint conditional)."""

    def model():
        with numpyro.plate("items", 3):
            c = numpyro.sample("c", dist.Categorical(jnp.array([0.2, 0.3, 0.5])))
        numpyro.factor("all", 0.7 * (c[0] == c[1]) * (c[1] == c[2]))

    setup, _ = driver_setup(nx.PlateGibbs(model))
    assert setup.leaves[0].mode == dk.sites.EXACT
    np.testing.assert_array_equal(setup.leaves[0].colours, [0, 1, 2])


def test_term_dependence_moves_each_coordinate_to_every_other_value():
    """An agreement term ``c_0 == c_1`` at ``(0, 2)``: moving ``c_0`` to its next value (1)
    leaves it unchanged; only the move to 2 shows that it depends on ``c_0``."""
    spec = dk.sites.LeafSpec("c", dk.Categorical(3), dk.sites.PLATE)

    def all_terms(leaves):
        c = leaves[0]
        return jnp.stack([(c[0] == c[1]).astype(jnp.float32), 0.1 * c[1]])

    dependence = _plates.probed_term_dependence(all_terms, 0, spec, [(jnp.array([0, 2]),)])
    np.testing.assert_array_equal(dependence, [[True, False], [True, True]])


def test_terms_outside_the_plates_computed_from_the_site_are_read_from_the_program():
    """The terms a plate table leaves out that the model computes from the site: the summed
    factor of a coupled site, none for a plate site, and a term that reads the site only
    formally; in trace order."""

    def outside(model, name, dims):
        setup, _ = driver_setup(nx.PlateGibbs(model))
        j = setup.names.index(name)
        point = tuple(
            jnp.zeros(shape, setup.site_dtypes[n])
            for n, shape in zip(setup.names, setup.leaf_shapes)
        )
        read = _plates.terms_computed_from(setup.prepared_model, setup.names, j, point, (), {})
        return _plates.outside_plate_dependents(read, dims)

    def formal_model():
        with numpyro.plate("rows", 3):
            z = numpyro.sample("z", dist.Bernoulli(0.5))
        numpyro.factor("first", 0.2 * z[0])
        numpyro.factor("formal", 0.0 * jnp.sum(z))

    assert outside(coupled_model, "z", {"rows": -1}) == ["pair"]
    assert outside(discrete_plate_model, "c", {"items": -1}) == []
    assert outside(formal_model, "z", {"rows": -1}) == ["first", "formal"]


def test_a_term_that_reads_the_site_only_formally_leaves_it_one_colour():
    """The program says ``0 * sum(z)`` (a term of one element) reads z, so the site is
    coloured from its single-site tables; they show that no coordinate interacts with
    another, so the site is still one block (one colour, not a chain), exactly stationary."""

    def formal_model():
        with numpyro.plate("rows", 3):
            z = numpyro.sample("z", dist.Bernoulli(0.5))
            numpyro.factor("own", jnp.asarray(W) * z)
        numpyro.factor("formal", 0.0 * jnp.sum(z))

    setup, local_fn = driver_setup(nx.PlateGibbs(formal_model))
    np.testing.assert_array_equal(setup.leaves[0].colours, [0, 0, 0])
    states = np.array(list(itertools.product(range(2), repeat=3)))
    _, (tables,) = jax.jit(jax.vmap(lambda z: local_fn((z,))))(jnp.asarray(states, jnp.int32))
    p = colour_sweep_matrix(states, np.asarray(tables, np.float64), np.zeros(3, int))
    logp = np.array(
        [float(setup.log_density_fn((), {})((jnp.asarray(z, jnp.int32),))) for z in states]
    )
    pi = np.exp(logp - logp.max())
    pi /= pi.sum()
    assert np.max(np.abs(pi @ p - pi)) < 1e-6
    assert np.all(np.diag(p) < 1.0)


def test_the_terms_read_from_the_program_count_an_events_elements_one_by_one():
    """A ``.to_event`` latent's term is its elements (as the terms' probe splits them), so a
    latent written as an event is not taken for a summed factor; a summed factor is one."""

    def event_model():
        z = numpyro.sample("z", dist.Bernoulli(0.5).expand([3]).to_event(1))
        numpyro.factor("sum", 0.3 * jnp.sum(z))
        numpyro.factor("unrelated", jnp.float32(0.1))

    setup, _ = driver_setup(nx.PlateGibbs(event_model))
    point = (jnp.zeros(3, setup.site_dtypes["z"]),)
    read = _plates.terms_computed_from(setup.prepared_model, setup.names, 0, point, (), {})
    assert [(name, elements) for name, elements, _ in read] == [("z", 3), ("sum", 1)]


def lattice_model():
    """A 3x3 Ising lattice, its pair terms given edge by edge: a checkerboard of two colours."""
    with numpyro.plate("rows", 3, dim=-2), numpyro.plate("cols", 3, dim=-1):
        x = numpyro.sample("x", dist.Bernoulli(0.5))
    s = 2.0 * x - 1.0
    numpyro.factor("across", 0.6 * s[:, 1:] * s[:, :-1])
    numpyro.factor("down", -0.4 * s[1:] * s[:-1])
    numpyro.factor("field", jnp.asarray(FIELD_3X3) * s)


FIELD_3X3 = np.array([[0.3, -0.2, 0.5], [0.1, -0.4, 0.2], [0.0, 0.6, -0.3]])


def test_a_colour_draw_reads_that_colours_rows_alone_and_the_step_ends_with_every_table():
    """Between two colour draws the compiled sweep computes only the next colour's rows
    (``LocalFnByLeaf.colour_local``: one evaluation of the terms per value, not one per
    colour and value) and after its last draw every table, which the step returns (the
    loop's carry keeps its structure): on the same noise, the same draws, log density and
    tables as the whole-table sweep. Power: rows of the wrong colour change the draws."""
    kernel = nx.PlateGibbs(lattice_model)
    setup, by_colour = driver_setup(kernel)
    np.testing.assert_array_equal(setup.leaves[0].colours, [[0, 1, 0], [1, 0, 1], [0, 1, 0]])
    assert isinstance(by_colour, dk.LocalFnByLeaf) and by_colour.complete_at_end
    every = by_colour.local_fn
    wrong = dk.LocalFnByLeaf(
        every,
        by_colour.leaf_local,
        lambda ys, j, c: by_colour.colour_local(ys, j, 1 - c),
        complete_at_end=True,
    )
    spec, sites = kernel.spec, setup.sites
    params = spec.parameters(())

    def step(local_fn, x, u):
        chain = spec.init((x,), every)
        noise = dk.StepNoise((u,), jnp.zeros(()), None, None)
        return spec.step(chain, noise, params, (), sites, local_fn)[0]

    keys = jax.random.split(jax.random.key(3), 40)
    starts = jax.vmap(lambda k: jax.random.bernoulli(k, 0.5, (3, 3)).astype(jnp.int32))(keys)
    uniforms = jax.vmap(lambda k: jax.random.uniform(jax.random.fold_in(k, 1), (3, 3)))(keys)
    runs = [
        jax.jit(jax.vmap(lambda x, u, fn=fn: step(fn, x, u)))(starts, uniforms)
        for fn in (by_colour, every, wrong)
    ]
    (a, b, c) = runs
    np.testing.assert_array_equal(a.x[0], b.x[0])
    np.testing.assert_allclose(a.log_density, b.log_density, rtol=1e-6)
    np.testing.assert_allclose(a.local[0], b.local[0], rtol=1e-6, atol=1e-6)
    _, (tables,) = jax.vmap(every)((a.x[0],))
    np.testing.assert_allclose(a.local[0], tables, rtol=1e-6, atol=1e-6)
    assert int((a.x[0] != starts).sum()) > 40  # the draws move
    assert int(np.any(np.asarray(c.x[0] != a.x[0]), axis=(1, 2)).sum()) > 5
