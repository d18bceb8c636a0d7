"""numpyro_ext.ebm: the JAX trainer's negative phases against exact RBM expectations, AIS
against the exact log partition function, learning, resuming, and input errors."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import numpyro_ext as nx
from discrete_kernels import ebm as core
from discrete_kernels.ebm import bars_and_stripes
from discrete_kernels.ebm import plate as core_plate
from numpyro_ext import _ebm_chains, _ucd, ebm


def small_rbm(m=5, n=3, scale=1.0, seed=0):
    rng = np.random.default_rng(seed)
    return core.RBMParams(
        jnp.asarray(rng.normal(scale=scale, size=(m, n)), jnp.float32),
        jnp.asarray(rng.normal(scale=0.5, size=m), jnp.float32),
        jnp.asarray(rng.normal(scale=0.5, size=n), jnp.float32),
    )


def exact_negative_grad(params):
    """E_model[grad F(v)] = -grad log Z."""
    return jax.tree.map(jnp.negative, jax.grad(core.rbm_log_partition)(params))


#: block Gibbs's coupling behind -m slow (10 s; default suite time): the DMALA coupling is
#: the default twin
@pytest.mark.parametrize(
    "coupling, horizon",
    [pytest.param("block_gibbs", None, marks=pytest.mark.slow), ("dmala", None), ("dmala", 4)],
)
def test_ucd_negative_phase_is_unbiased_and_cd1_is_not(coupling, horizon):
    """Both couplings: coupled block Gibbs (Alg. 3) and coupled DMALA chains (the
    coordinate-wise maximal coupling of the DLP proposals, beyond the papers), and the
    time-averaged estimator (``m = horizon``). Measured mean meeting times on this RBM: 2.46
    (block Gibbs) and 2.74 (DMALA, step size 2)."""
    params = small_rbm()
    rbm = ebm.RBM(5, 3)
    exact = exact_negative_grad(params)
    batch = jnp.tile(jnp.array([1.0, 1, 0, 0, 1]), (3000, 1))  # far from the model
    kernel = nx.DMALA(step_size=2.0) if coupling == "dmala" else None
    ucd = ebm.UCD(k=1, max_time=200, max_tries=30, coupling=kernel, m=horizon)
    run = jax.jit(lambda key: _ucd.ucd_negative(ucd, rbm, params, batch, key))
    grads, capped = [], 0
    for i in range(12):
        _, grad, info = run(jax.random.key(i))
        grads.append(np.concatenate([np.ravel(g) for g in grad]))
        capped += int(info["time_capped"])
        assert 1.0 < float(info["meeting_time"]) < 10.0
    grads = np.array(grads)
    flat_exact = np.concatenate([np.ravel(g) for g in exact])
    z = (grads.mean(0) - flat_exact) / (grads.std(0, ddof=1) / np.sqrt(len(grads)))
    assert capped == 0
    assert np.all(np.abs(z) < 5), z
    # power: CD-1 from the same batch is biased
    samples, _ = _ebm_chains.advance(ebm.BlockGibbs(), rbm, params, batch, jax.random.key(0), 1, 5)
    _, cd_grad = _ebm_chains.mean_energy_grad(rbm, params, samples)
    flat_cd = np.concatenate([np.ravel(g) for g in cd_grad])
    assert np.max(np.abs(flat_cd - flat_exact) / (grads.std(0, ddof=1) / np.sqrt(12))) > 10


def test_ais_agrees_with_the_exact_log_partition_function():
    params = small_rbm(m=8, n=4, scale=0.7, seed=1)
    rbm = ebm.RBM(8, 4)
    exact = float(core.rbm_log_partition(params))
    estimate, se = ebm.ais_log_partition(
        rbm,
        params,
        jax.random.key(0),
        sampler=nx.DMALA(step_size=1.0),
        base_logits=jnp.zeros(8),
        num_chains=200,
        num_temperatures=200,
    )
    assert 0 < se < 0.1
    assert abs(estimate - exact) < 4 * se + 0.02, (estimate, exact, se)


@pytest.mark.parametrize(
    "method",
    [ebm.CD(1), ebm.PCD(), ebm.UCD(), ebm.PCD(sampler=nx.DMALA(step_size=0.5))],
    ids=["CD-1", "PCD-gibbs", "UCD", "PCD-DMALA"],
)
def test_training_raises_the_exact_log_likelihood(method):
    data = bars_and_stripes()
    rbm = ebm.RBM(16, 8)
    params = rbm.init(jax.random.key(0), scale=0.1)
    start = float(rbm.log_likelihood(params, data))
    result = ebm.train(
        rbm,
        params,
        data,
        optimizer=optax.adam(0.05),
        method=method,
        num_steps=60,
        batch_size=100,
        rng_key=jax.random.key(1),
        evaluate=lambda p: rbm.log_likelihood(p, data),
        eval_every=60,
        progress_bar=False,
    )
    assert result.history["objective"][-1] > start + 0.5
    assert result.step == 60 and len(result.history["energy_gap"]) == 60
    if isinstance(method, ebm.UCD):
        assert 1.0 <= np.mean(result.history["meeting_time"]) < 20


@pytest.mark.parametrize(
    "total,first",
    [
        (6, 3),
        pytest.param(
            130,
            73,
            marks=pytest.mark.skipif(
                jax.default_backend() != "cpu",
                reason="bit for bit on the CPU only: on a GPU, XLA rounds a scanned chunk and "
                "single iterations differently (an H200: 4.8e-7 apart after 130 iterations)",
            ),
        ),
    ],
)
def test_resume_is_bit_identical(total, first):
    """(130, 73): iterations 50-99 run as one scanned chunk in the whole run and one at a time
    after the resume; the results must still agree bit for bit."""
    data = bars_and_stripes()
    rbm = ebm.RBM(16, 4)
    params = rbm.init(jax.random.key(0))
    options = dict(
        optimizer=optax.adam(0.01),
        method=ebm.PCD(steps=2, reinit_prob=0.1),
        batch_size=20,
        progress_bar=False,
    )
    whole = ebm.train(rbm, params, data, num_steps=total, rng_key=jax.random.key(3), **options)
    half = ebm.train(rbm, params, data, num_steps=first, rng_key=jax.random.key(3), **options)
    rest = ebm.train(rbm, None, data, num_steps=total - first, resume=half, **options)
    for a, b in zip(jax.tree.leaves(whole.params), jax.tree.leaves(rest.params)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(whole.method_state, rest.method_state)
    np.testing.assert_array_equal(whole.history["energy_gap"], rest.history["energy_gap"])


def test_other_energies_train_with_a_library_kernel():
    rng = np.random.default_rng(0)
    data = (rng.uniform(size=(64, 9)) < 0.3).astype(np.float32)
    cases = [(ebm.IsingEnergy(3), nx.GWG()), (ebm.MLPEnergy(9, (8,)), nx.GWG())]
    cases += [(ebm.IsingEnergy(3), ebm.SiteGibbs()), (ebm.MLPEnergy(9, (8,)), ebm.SiteGibbs())]
    for energy, sampler in cases:
        params = energy.init(jax.random.key(0))
        result = ebm.train(
            energy,
            params,
            data,
            optimizer=optax.adam(0.01),
            method=ebm.PCD(sampler=sampler, steps=2),
            num_steps=5,
            batch_size=16,
            rng_key=jax.random.key(0),
            progress_bar=False,
        )
        assert np.all(np.isfinite(result.history["energy_gap"]))
        assert np.all((result.method_state == 0) | (result.method_state == 1))


def test_ucd_with_coupled_dmala_trains_an_ising_energy():
    rng = np.random.default_rng(1)
    data = (rng.uniform(size=(64, 9)) < 0.3).astype(np.float32)
    energy = ebm.IsingEnergy(3)
    result = ebm.train(
        energy,
        energy.init(jax.random.key(0)),
        data,
        optimizer=optax.adam(0.01),
        method=ebm.UCD(coupling=nx.DMALA(step_size=1.0), max_time=300),
        num_steps=5,
        batch_size=16,
        rng_key=jax.random.key(0),
        progress_bar=False,
    )
    assert np.all(np.isfinite(result.history["energy_gap"]))
    assert np.all(result.history["meeting_time"] >= 1)
    assert np.all(result.history["time_capped"] == 0)


def test_errors_name_the_argument():
    data = bars_and_stripes()
    ising = ebm.IsingEnergy(4)
    params = ising.init(jax.random.key(0))
    common = dict(optimizer=optax.sgd(0.1), num_steps=1, rng_key=jax.random.key(0))
    with pytest.raises(ValueError, match="needs the RBM energy.*coupling=nx.DMALA"):
        ebm.train(ising, params, data, method=ebm.UCD(), **common)
    with pytest.raises(ValueError, match="coupling must be BlockGibbs.*or a DMALA kernel.*got ACS"):
        ebm.train(ising, params, data, method=ebm.UCD(coupling=nx.ACS()), **common)
    with pytest.raises(ValueError, match="coupling must be BlockGibbs"):
        ebm.train(ising, params, data, method=ebm.UCD(coupling="dmala"), **common)
    with pytest.raises(ValueError, match="give sampler="):
        ebm.train(ising, params, data, method=ebm.PCD(), **common)
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        ebm.train(ising, params, data, method=ebm.CD(0), **common)
    with pytest.raises(ValueError, match="reinit_prob"):
        ebm.train(ising, params, data, method=ebm.PCD(sampler=nx.GWG(), reinit_prob=2), **common)
    with pytest.raises(ValueError, match="data must be a \\(N, d\\) array of 0/1"):
        ebm.train(ising, params, data * 2, method=ebm.CD(1, sampler=nx.GWG()), **common)
    with pytest.raises(ValueError, match="run it in MCMC"):
        from numpyro.infer import MCMC

        MCMC(nx.DMALA(), num_warmup=1, num_samples=1).run(jax.random.key(0))


def test_acs_pcd_runs_the_app_b_schedule_and_learns():
    """PCD with nx.ACS(): iteration 0 is the tuning run (it sets alpha_max >= alpha_min),
    the state counts iterations, and the exact log-likelihood rises; with an explicit cycle
    there is no tuning and the kernel's values are kept."""
    data = bars_and_stripes()
    rbm = ebm.RBM(16, 8)
    params = rbm.init(jax.random.key(0))

    def fit(kernel):
        return ebm.train(
            rbm,
            params,
            data,
            optimizer=optax.adam(0.02),
            method=ebm.PCD(sampler=kernel, steps=3),
            num_steps=250,
            batch_size=50,
            rng_key=jax.random.key(1),
            evaluate=lambda p: rbm.log_likelihood(p, data),
            eval_every=250,
            progress_bar=False,
        )

    result = fit(nx.ACS())
    state = result.method_state
    assert isinstance(state, ebm.ACSPCDState) and int(state.iteration) == 250
    # inside the range where the step size changes a binary proposal (dlp_step_size_bounds)
    assert 1e-3 <= float(state.alpha_min) <= float(state.alpha_max) <= 1e3
    # measured: -11.09 -> -10.79 in 250 iterations
    assert result.history["objective"][-1] > float(rbm.log_likelihood(params, data)) + 0.15
    fixed = fit(nx.ACS(alpha_max=2.0, alpha_min=0.3, beta_schedule=np.linspace(0.9, 0.5, 8)))
    assert float(fixed.method_state.alpha_max) == 2.0
    assert float(fixed.method_state.alpha_min) == pytest.approx(0.3)


def test_history_has_one_entry_per_iteration_and_the_objective_where_evaluated():
    """Iterations run in scanned chunks; the history is still per iteration, with the
    objective at every ``eval_every``-th iteration and the last."""
    data = bars_and_stripes()
    rbm = ebm.RBM(16, 4)
    calls = []

    def evaluate(p):
        calls.append(1)
        return rbm.log_likelihood(p, data)

    result = ebm.train(
        rbm,
        rbm.init(jax.random.key(0)),
        data,
        optimizer=optax.sgd(0.01),
        method=ebm.CD(1),
        num_steps=133,
        batch_size=10,
        rng_key=jax.random.key(0),
        evaluate=evaluate,
        eval_every=20,
        progress_bar=False,
    )
    assert all(len(v) == 133 for v in result.history.values())
    evaluated = np.flatnonzero(~np.isnan(result.history["objective"])) + 1
    np.testing.assert_array_equal(evaluated, [20, 40, 60, 80, 100, 120, 133])
    assert len(calls) == 7 and result.step == 133


def _moment_z(energy, params, samples):
    """Max |z| of the samples' coordinate means and pairwise products (one independent draw
    per chain) against the energy's exact moments by enumeration."""
    dim = samples.shape[1]
    states = np.asarray(core.binary_states(dim, np.zeros((), np.float64)))
    log_p = -np.asarray(energy(params, jnp.asarray(states, jnp.float32)), np.float64)
    p = np.exp(log_p - log_p.max())
    p /= p.sum()
    upper = np.triu_indices(dim)  # the diagonal: the means (x_i^2 = x_i)
    exact = (states.T @ (p[:, None] * states))[upper]
    x = np.asarray(samples, np.float64)
    drawn = np.einsum("ci,cj->ij", x, x)[upper] / x.shape[0]
    se = np.sqrt(np.maximum(exact * (1.0 - exact), 1e-12) / x.shape[0])
    return float(np.max(np.abs(drawn - exact) / se))


def _strong_ising(side, seed=0, scale=0.6):
    energy = ebm.IsingEnergy(side)
    params = energy.init(jax.random.key(seed), scale=scale)
    field = 0.3 * jax.random.normal(jax.random.key(seed + 1), (side * side,))
    return energy, {**params, "field": field}


def test_plate_gibbs_negative_phase_draws_the_exact_distribution(monkeypatch):
    """PlateGibbs as the trainers' negative phase: a checkerboard sweep of a 3x3 lattice Ising
    energy (found from its single-site tables), and a sweep coordinate by coordinate of an
    RBM's free energy (every visible unit interacts with every other), each against the
    exact moments (max |z| 2.9 and 1.7 when written). Power: the lattice swept as one colour
    (the colouring's check bypassed) gives 71, the RBM's coordinates drawn from their
    neighbours' rows 112."""
    chains, steps = 4000, 25
    ising, ising_params = _strong_ising(3)
    kernel = nx.PlateGibbs()
    colours = _ebm_chains.plate_colouring(kernel, ising, ising_params, 9)
    assert colours == (0, 1, 0, 1, 0, 1, 0, 1, 0)  # a checkerboard
    start = jnp.zeros((chains, 9))
    key = jax.random.key(3)
    drawn, accept = _ebm_chains.advance(kernel, ising, ising_params, start, key, steps, 9, colours)
    assert float(accept) == 1.0
    assert _moment_z(ising, ising_params, drawn) < 4.5
    one_colour = (0,) * 9  # every coordinate at once from its single-site conditional: wrong
    broken, _ = _ebm_chains.advance(kernel, ising, ising_params, start, key, steps, 9, one_colour)
    assert _moment_z(ising, ising_params, broken) > 8

    rbm = ebm.RBM(5, 3)
    rbm_params = small_rbm(scale=1.5, seed=2)
    colours = _ebm_chains.plate_colouring(kernel, rbm, rbm_params, 5)
    assert colours == (0, 1, 2, 3, 4)  # one coordinate at a time
    drawn, _ = _ebm_chains.advance(
        kernel, rbm, rbm_params, jnp.zeros((chains, 5)), key, 10, 5, colours
    )
    assert _moment_z(rbm, rbm_params, drawn) < 4.5
    rows = core_plate.coordinate_substitutions
    monkeypatch.setattr(
        core_plate, "coordinate_substitutions", lambda d, x, i: rows(d, x, (i + 1) % x.shape[0])
    )
    broken, _ = _ebm_chains.advance(
        kernel, rbm, rbm_params, jnp.zeros((chains, 5)), key, 10, 5, colours
    )
    assert _moment_z(rbm, rbm_params, broken) > 8


def test_plate_gibbs_trains_and_checks_its_colouring():
    data = bars_and_stripes()
    ising = ebm.IsingEnergy(4)
    params = ising.init(jax.random.key(0))
    common = dict(optimizer=optax.sgd(0.05), num_steps=3, rng_key=jax.random.key(0))
    checkerboard = np.indices((4, 4)).sum(0) % 2
    for sampler in (nx.PlateGibbs(), nx.PlateGibbs(blocks={"x": checkerboard.reshape(-1)})):
        first = ebm.train(
            ising, params, data, method=ebm.PCD(sampler=sampler), progress_bar=False, **common
        )
        assert np.all(first.history["accept_prob"] == 1.0)
        assert np.all((first.method_state == 0) | (first.method_state == 1))
        more = ebm.train(
            ising,
            None,
            data,
            optimizer=optax.sgd(0.05),
            method=ebm.PCD(sampler=sampler),
            num_steps=2,
            progress_bar=False,
            resume=first,
        )
        assert more.step == 5
    rows = np.zeros(16, int)
    rows[8:] = 1  # neighbours in one colour
    with pytest.raises(ValueError, match="blocks\\['x'\\] is not a valid colouring: coordinates"):
        ebm.train(
            ising, params, data, method=ebm.PCD(sampler=nx.PlateGibbs(blocks={"x": rows})), **common
        )
    with pytest.raises(
        ValueError, match="blocks\\['x'\\] must be an integer array of the site's shape"
    ):
        ebm.train(
            ising,
            params,
            data,
            method=ebm.CD(1, sampler=nx.PlateGibbs(blocks={"x": rows[:3]})),
            **common,
        )
    with pytest.raises(ValueError, match="blocks names \\['w'\\]; in training the one site is 'x'"):
        ebm.train(
            ising,
            params,
            data,
            method=ebm.CD(1, sampler=nx.PlateGibbs(blocks={"w": rows})),
            **common,
        )
    wide = ebm.MLPEnergy(20, (8,))
    rng = np.random.default_rng(0)
    wide_data = (rng.uniform(size=(32, 20)) < 0.5).astype(np.float32)
    with pytest.raises(ValueError, match="20 coordinates need 20 colours.*SiteGibbs"):
        ebm.train(
            wide,
            wide.init(jax.random.key(0)),
            wide_data,
            method=ebm.PCD(sampler=nx.PlateGibbs()),
            **common,
        )
