"""pyro_ext.ebm: the torch trainer learns, resumes bit for bit, refuses bad input, and gives
the same UCD estimate as the JAX trainer from the same noise."""

import numpy as np
import pytest
import torch

import pyro_ext as px
from discrete_kernels import ebm as core
from discrete_kernels.ebm import bars_and_stripes
from discrete_kernels.samplers.acs import ACS
from pyro_ext import _ebm_chains, _ucd, ebm


@pytest.mark.parametrize(
    "method",
    [ebm.CD(1), ebm.PCD(), ebm.UCD(), ebm.PCD(sampler=px.DMALA(step_size=0.5), steps=3)],
    ids=["CD-1", "PCD-gibbs", "UCD", "PCD-DMALA"],
)
def test_training_raises_the_exact_log_likelihood(method):
    torch.manual_seed(0)
    data = torch.as_tensor(bars_and_stripes())
    rbm = ebm.RBM(16, 8, scale=0.1)
    start = float(rbm.log_likelihood(data))
    dmala = isinstance(getattr(method, "sampler", None), px.DMALA)
    # DMALA's chains take a batch of 20, whose gradient is noisy: at 40 steps of Adam 0.1 the
    # gain over seeds 0-7 was 0.21-0.38 (and 0.12 on CUDA's stream), at 80 of 0.05 0.47-0.94
    steps, rate, batch = (80, 0.05, 20) if dmala else (40, 0.1, 100)
    result = ebm.train(
        rbm,
        data,
        optimizer=torch.optim.Adam(rbm.parameters(), lr=rate),
        method=method,
        num_steps=steps,
        batch_size=batch,
        evaluate=lambda m: m.log_likelihood(data),
        eval_every=steps,
        progress_bar=False,
    )
    assert result.history["objective"][-1] > start + 0.2
    if isinstance(method, ebm.UCD):
        assert 1.0 <= np.mean(result.history["meeting_time"]) < 20


def test_resume_is_bit_identical():
    data = bars_and_stripes()

    def fresh():
        torch.manual_seed(0)
        rbm = ebm.RBM(16, 4)
        return rbm, torch.optim.Adam(rbm.parameters(), lr=0.01)

    options = dict(method=ebm.PCD(steps=2, reinit_prob=0.1), batch_size=20, progress_bar=False)
    rbm, opt = fresh()
    whole = ebm.train(rbm, data, optimizer=opt, num_steps=6, **options)
    rbm2, opt2 = fresh()
    half = ebm.train(rbm2, data, optimizer=opt2, num_steps=3, **options)
    torch.rand(5)  # the generator moves on in between: resume restores it
    rbm3, opt3 = fresh()
    rest = ebm.train(rbm3, data, optimizer=opt3, num_steps=3, resume=half, **options)
    for a, b in zip(rbm.parameters(), rbm3.parameters()):
        assert torch.equal(a, b)
    assert torch.equal(whole.method_state, rest.method_state)
    np.testing.assert_array_equal(whole.history["energy_gap"], rest.history["energy_gap"])


def test_errors_name_the_argument():
    data = bars_and_stripes()
    ising = ebm.IsingEnergy(4)
    opt = torch.optim.SGD(ising.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="needs the RBM energy.*coupling=px.DMALA"):
        ebm.train(ising, data, optimizer=opt, method=ebm.UCD(), num_steps=1)
    with pytest.raises(ValueError, match="coupling must be BlockGibbs.*or a DMALA kernel.*got GWG"):
        ebm.train(ising, data, optimizer=opt, method=ebm.UCD(coupling=px.GWG()), num_steps=1)
    with pytest.raises(ValueError, match="give sampler="):
        ebm.train(ising, data, optimizer=opt, method=ebm.PCD(), num_steps=1)
    with pytest.raises(ValueError, match="max_time must be an integer >= 2"):
        ebm.train(ising, data, optimizer=opt, method=ebm.UCD(max_time=1), num_steps=1)
    with pytest.raises(ValueError, match="UCD: m must be an integer >= 2"):
        ebm.train(ising, data, optimizer=opt, method=ebm.UCD(k=2, m=1), num_steps=1)
    with pytest.raises(ValueError, match="m=100 must be below max_time=100"):
        ebm.train(ising, data, optimizer=opt, method=ebm.UCD(m=100), num_steps=1)


def test_other_energies_train_with_a_library_kernel():
    torch.manual_seed(0)
    data = (torch.rand(64, 9) < 0.3).float()
    cases = [(ebm.IsingEnergy(3), px.GWG()), (ebm.MLPEnergy(9, (8,)), px.GWG())]
    cases += [(ebm.IsingEnergy(3), ebm.SiteGibbs()), (ebm.MLPEnergy(9, (8,)), ebm.SiteGibbs())]
    for energy, sampler in cases:
        result = ebm.train(
            energy,
            data,
            optimizer=torch.optim.Adam(energy.parameters(), lr=0.01),
            method=ebm.PCD(sampler=sampler, steps=2),
            num_steps=3,
            batch_size=8,
            progress_bar=False,
        )
        assert np.all(np.isfinite(result.history["energy_gap"]))
    energy = ebm.IsingEnergy(3)
    result = ebm.train(
        energy,
        data,
        optimizer=torch.optim.Adam(energy.parameters(), lr=0.01),
        method=ebm.UCD(coupling=px.DMALA(step_size=1.0), max_time=300),
        num_steps=2,
        batch_size=8,
        progress_bar=False,
    )
    assert np.all(np.isfinite(result.history["energy_gap"]))
    assert np.all(result.history["meeting_time"] >= 1)


def test_ucd_with_coupled_dmala_is_unbiased():
    """The torch trainer's UCD negative phase with coupled DMALA chains: its gradient
    estimate of the model term averages to the exact ``E_model[grad F]`` of a small RBM.
    Power (shown by hand): with one DMALA step too many before the coupling starts (the
    chain ahead two steps ahead of the one behind) it fails at |z| 14.8."""
    torch.manual_seed(0)
    rbm = ebm.RBM(4, 2, scale=0.8)
    params = core.RBMParams(*(p.detach().double() for p in rbm.rbm_params()))
    states = core.binary_states(4, params.weights)
    log_w = -core.rbm_free_energy(params, states)
    weights = torch.softmax(log_w, 0)
    method = ebm.UCD(k=1, max_time=300, coupling=px.DMALA(step_size=2.0))
    batch = torch.tensor([[1.0, 0, 1, 1]] * 200)
    estimates, taus = [], []
    for _ in range(10):
        rbm.zero_grad()
        surrogate, info = _ucd.ucd_negative(method, rbm, batch)
        surrogate.backward()
        estimates.append(rbm.visible_bias.grad.clone().cpu().numpy())
        taus.append(info["meeting_time"])
        assert info["time_capped"] == 0
    # d F / d visible_bias = -v, so the model term is -E_model[v]
    exact = -(weights[:, None] * states).sum(0).cpu().numpy()
    estimates = np.array(estimates)
    z = (estimates.mean(0) - exact) / (estimates.std(0, ddof=1) / np.sqrt(len(estimates)))
    assert np.all(np.abs(z) < 5), z
    assert 1.0 < np.mean(taus) < 10.0
    # power: the data batch itself (CD-0) is far from the model
    assert np.max(np.abs(-batch[0].cpu().numpy() - exact) / estimates.std(0, ddof=1)) > 3


@pytest.mark.cpu_only  # compares with the JAX trainer on the CPU
@pytest.mark.parametrize("k, horizon", [(1, None), (0, 3)])
def test_ucd_estimate_is_the_same_in_both_trainers(monkeypatch, k, horizon):
    """Same RBM, batch and uniforms: the JAX and torch UCD negative phases give the same
    gradient estimate and meeting statistics (``horizon``: the time-averaged estimator's
    ``m``)."""
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    from numpyro_ext import _ucd as nucd
    from numpyro_ext import ebm as nebm

    rng = np.random.default_rng(0)
    m, n, chains, tries, max_time = 6, 4, 80, 8, 40
    weights = rng.normal(scale=0.8, size=(m, n)).astype(np.float32)
    vb = rng.normal(scale=0.3, size=m).astype(np.float32)
    hb = rng.normal(scale=0.3, size=n).astype(np.float32)
    batch = (rng.uniform(size=(chains, m)) < 0.5).astype(np.float32)
    start = [
        rng.uniform(size=s).astype(np.float32) for s in ((chains, n), (chains, m), (chains, n))
    ]
    steps = [
        [
            rng.uniform(size=s).astype(np.float32)
            for s in ((chains,), (chains, m), (tries, chains, 2), (tries, chains, m), (chains, n))
        ]
        for _ in range(max_time + 1)
    ]
    stacked = [np.stack([s[j] for s in steps]) for j in range(5)]
    method = core.UCD(k=k, max_time=max_time, max_tries=tries, m=horizon)
    assert len(core.ucd_compaction_capacities(chains)) > 1  # the working set shrinks

    def rows_of(arrays, rows, lead=0):
        """The first ``rows`` rows of a step's uniforms (the working set's size); ``lead``
        leading axes (the stacked steps) come first."""
        axes = (0, 0, 1, 1, 0)
        return tuple(np.take(a, np.arange(rows), axis=ax + lead) for a, ax in zip(arrays, axes))

    # torch
    monkeypatch.setattr(
        _ucd,
        "ucd_start_noise",
        lambda c, m_, n_, device=None: tuple(torch.as_tensor(a) for a in start),
    )
    monkeypatch.setattr(
        _ucd,
        "ucd_step_noise",
        lambda t, c, m_, n_, k_, device=None: tuple(
            torch.as_tensor(a) for a in rows_of(steps[t], c)
        ),
    )
    rbm = ebm.RBM(m, n)
    with torch.no_grad():
        rbm.weights.copy_(torch.as_tensor(weights))
        rbm.visible_bias.copy_(torch.as_tensor(vb))
        rbm.hidden_bias.copy_(torch.as_tensor(hb))
    surrogate, t_info = _ucd.ucd_negative(method, rbm, torch.as_tensor(batch))
    surrogate.backward()
    t_grad = [rbm.weights.grad.numpy(), rbm.visible_bias.grad.numpy(), rbm.hidden_bias.grad.numpy()]

    # jax
    monkeypatch.setattr(
        nucd, "ucd_start_noise", lambda key, c, m_, n_: (key, tuple(jnp.asarray(a) for a in start))
    )
    monkeypatch.setattr(
        nucd,
        "ucd_step_noise",
        lambda key, t, c, m_, n_, k_: (
            key,
            tuple(jnp.asarray(a)[t] for a in rows_of(stacked, c, lead=1)),
        ),
    )
    params = core.RBMParams(jnp.asarray(weights), jnp.asarray(vb), jnp.asarray(hb))
    value, j_grad, j_info = nucd.ucd_negative(
        method, nebm.RBM(m, n), params, jnp.asarray(batch), jax.random.key(0)
    )
    assert t_info["time_capped"] == 0 and int(j_info["time_capped"]) == 0
    np.testing.assert_allclose(float(j_info["meeting_time"]), t_info["meeting_time"], rtol=1e-6)
    for a, b in zip(j_grad, t_grad):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(float(value), float(surrogate.detach()), rtol=1e-4, atol=1e-5)


def test_acs_pcd_runs_the_app_b_schedule():
    """As the JAX trainer's test, with few chains (the torch trainer loops over chains)."""
    torch.manual_seed(0)
    data = torch.as_tensor(bars_and_stripes())
    rbm = ebm.RBM(16, 8)
    result = ebm.train(
        rbm,
        data,
        optimizer=torch.optim.Adam(rbm.parameters(), lr=0.02),
        method=ebm.PCD(sampler=px.ACS(), steps=2, num_chains=4),
        num_steps=4,
        batch_size=8,
        progress_bar=False,
    )
    state = result.method_state
    assert isinstance(state, ebm.ACSPCDState) and int(state.iteration) == 4
    # inside the range where the step size changes a binary proposal (dlp_step_size_bounds)
    assert 1e-3 <= float(state.alpha_min) <= float(state.alpha_max) <= 1e3
    assert np.all(np.isfinite(result.history["energy_gap"]))


@pytest.mark.parametrize(
    "kernel",
    [px.GWG(), px.DMALA(step_size=0.7), px.DULA(step_size=0.4), px.AB(step_size=0.8), px.ACS()],
    ids=["GWG", "DMALA", "DULA", "AB", "ACS"],
)
def test_batched_kernel_steps_equal_the_one_chain_step(kernel):
    """The trainer's steps of all chains at once (the chains in the rows of one leaf) give,
    chain by chain, what the spec's one-chain step
    gives on the same noise (every step's uniforms are drawn at once, (C, steps, ...), then
    the MH uniform)."""
    from discrete_kernels import PYTHON_CONTROL, Binary, ChainState, Sites, StepNoise

    torch.manual_seed(0)
    energy = ebm.RBM(6, 3, scale=1.0)
    x = (torch.rand(5, 6) < 0.5).float()
    steps = 3
    torch.manual_seed(1)
    batched, _, _ = _ebm_chains.kernel_steps(kernel, energy, x, steps)
    spec = kernel.spec
    sites = Sites(("x",), (Binary(),), (False,))
    like = torch.ones(())
    adapt = spec.adapt_init(like, 0, sites, 6, PYTHON_CONTROL)
    shapes = spec.noise_shapes(sites, [(6,)])
    size = sum(int(np.prod(s)) for s in shapes.uniforms)
    torch.manual_seed(1)
    flat = torch.rand(5, steps, size + 1)

    def local_fn(leaves):
        z = leaves[0].float().detach().requires_grad_(True)
        f = -energy(z[None])[0]
        (g,) = torch.autograd.grad(f, z)
        return f.detach(), (g,)

    for c in range(5):
        chain = ChainState((x[c].long(),), *local_fn((x[c].long(),)))
        for i in range(steps):
            pieces = flat[c, i, :-1].split([int(np.prod(s)) for s in shapes.uniforms])
            uniforms = tuple(p.reshape(s) for p, s in zip(pieces, shapes.uniforms))
            noise = StepNoise(uniforms, flat[c, i, -1], None, None)
            chain, _ = spec.step(chain, noise, spec.parameters(adapt), adapt, sites, local_fn)
        np.testing.assert_array_equal(batched[c].cpu().numpy(), chain.x[0].float().cpu().numpy())
    assert not torch.equal(batched, x)  # the chains moved


def test_rows_and_vmap_paths_adapt_alike(monkeypatch):
    """DMALA's steps with the chains in rows equal its vmapped one-chain steps, step-size
    adaptation included (each chain adapts its own step size)."""
    from discrete_kernels.samplers.dlp import DMALA

    torch.manual_seed(0)
    energy = ebm.RBM(8, 4, scale=1.0)
    x = (torch.rand(6, 8) < 0.5).float()
    kernel = px.DMALA(step_size=2.0)
    results = []
    for in_rows in (True, False):
        monkeypatch.setattr(DMALA, "steps_chains_in_rows", in_rows)
        torch.manual_seed(1)
        results.append(_ebm_chains.kernel_steps(kernel, energy, x, 20, num_warmup=20))
    (rows_x, rows_accept, rows_adapt), (vmap_x, vmap_accept, vmap_adapt) = results
    np.testing.assert_array_equal(rows_x.cpu().numpy(), vmap_x.cpu().numpy())
    np.testing.assert_allclose(float(rows_accept), float(vmap_accept), rtol=1e-5)
    assert rows_adapt.step_size.shape == vmap_adapt.step_size.shape == (6,)
    np.testing.assert_allclose(
        rows_adapt.step_size.cpu().numpy(), vmap_adapt.step_size.cpu().numpy(), 1e-3
    )
    assert float(rows_adapt.step_size.std()) > 0  # adapted chain by chain


@pytest.mark.parametrize("iteration", [0, 1], ids=["explore", "exploit"])
def test_acs_pcd_schedule_steps_in_rows_equal_the_vmapped_steps(iteration, monkeypatch):
    """ACS's PCD iterations step the chains as rows (every chain the schedule's parameters;
    the explore iteration's first step without MH) and move them as the vmapped one-chain
    step does on the same noise."""
    torch.manual_seed(0)
    energy = ebm.RBM(8, 4, scale=1.0)
    x = (torch.rand(6, 8) < 0.5).float()
    kernel = px.ACS()
    schedule = kernel.spec.pcd_schedule()
    state = ebm.ACSPCDState(x, torch.tensor(iteration), torch.tensor(3.0), torch.tensor(0.5))

    def step_parameters(i):
        return schedule.parameters(state, torch.tensor(i))

    results = []
    for in_rows in (True, False):
        monkeypatch.setattr(ACS, "steps_chains_in_rows", in_rows)
        torch.manual_seed(1)
        results.append(_ebm_chains.kernel_steps(kernel, energy, x, 4, step_parameters))
    (rows_x, rows_accept, _), (vmap_x, vmap_accept, _) = results
    np.testing.assert_array_equal(rows_x.cpu().numpy(), vmap_x.cpu().numpy())
    np.testing.assert_allclose(float(rows_accept), float(vmap_accept), rtol=1e-5)
    assert not torch.equal(rows_x, x)  # the chains moved


def test_acs_tuning_in_rows_equals_the_vmapped_tuning(monkeypatch):
    """ACS's re-tuning run (its whole tuner: burn-in, searches, balance schedule) with the
    chains in rows tunes each chain as the vmapped one-chain tuner does, chain by chain."""
    torch.manual_seed(0)
    energy = ebm.RBM(8, 4, scale=1.0)
    x = (torch.rand(6, 8) < 0.5).float()
    kernel = px.ACS()
    tuning = kernel.spec.pcd_schedule().tuning_steps
    results = []
    for in_rows in (True, False):
        monkeypatch.setattr(ACS, "steps_chains_in_rows", in_rows)
        torch.manual_seed(1)
        results.append(_ebm_chains.kernel_steps(kernel, energy, x, tuning, None, tuning))
    (rows_x, rows_accept, rows_adapt), (vmap_x, vmap_accept, vmap_adapt) = results
    np.testing.assert_array_equal(rows_x.cpu().numpy(), vmap_x.cpu().numpy())
    np.testing.assert_allclose(float(rows_accept), float(vmap_accept), rtol=1e-5)
    for name in ("alpha_max", "alpha_min", "beta_schedule", "phase", "restarts"):
        rows_value, vmap_value = getattr(rows_adapt, name), getattr(vmap_adapt, name)
        assert rows_value.shape == vmap_value.shape, name
        np.testing.assert_allclose(rows_value.cpu().numpy(), vmap_value.cpu().numpy(), 1e-5)
    assert len(set(rows_adapt.alpha_max.tolist())) > 2  # tuned chain by chain, not pooled
    assert bool((rows_adapt.phase == 5).all())  # every chain finished its tuning


def test_ucd_steps_only_the_pairs_still_apart(monkeypatch):
    """The coupled steps run on working sets that shrink as pairs meet: far fewer pair-steps
    than pairs times steps."""
    torch.manual_seed(0)
    rows = []
    draw = _ucd.ucd_step_noise

    def recording(t, chains, *rest, **kwargs):
        rows.append(chains)
        return draw(t, chains, *rest, **kwargs)

    monkeypatch.setattr(_ucd, "ucd_step_noise", recording)
    rbm = ebm.RBM(16, 16, scale=1.0)
    batch = torch.as_tensor(bars_and_stripes()).repeat(20, 1)  # 600 pairs
    _, info = _ucd.ucd_negative(ebm.UCD(k=1, max_time=10_000), rbm, batch)
    assert rows[0] == 600 and rows[-1] < 600 and rows == sorted(rows, reverse=True)
    assert sum(rows) < 0.5 * 600 * len(rows), (sum(rows), len(rows), info)


def test_rbm_closed_form_input_gradient_is_the_free_energy_gradient():
    """``core.rbm_free_energy_and_input_grad`` equals the free energy and its autograd
    gradient in torch (float64) and ``jax.grad`` in JAX, on batched inputs."""
    import jax
    import jax.numpy as jnp

    torch.manual_seed(0)
    params = core.RBMParams(
        torch.randn(7, 5, dtype=torch.float64),
        torch.randn(7, dtype=torch.float64),
        torch.randn(5, dtype=torch.float64),
    )
    v = (torch.rand(4, 7, dtype=torch.float64) < 0.5).double().requires_grad_(True)
    f = core.rbm_free_energy(params, v)
    (g,) = torch.autograd.grad(f.sum(), v)
    f_closed, g_closed = core.rbm_free_energy_and_input_grad(params, v.detach())
    np.testing.assert_allclose(f_closed.cpu().numpy(), f.detach().cpu().numpy(), rtol=1e-12)
    np.testing.assert_allclose(g_closed.cpu().numpy(), g.cpu().numpy(), rtol=1e-12)

    jparams = core.RBMParams(*(jnp.asarray(p.cpu().numpy(), jnp.float32) for p in params))
    jv = jnp.asarray(v.detach().cpu().numpy(), jnp.float32)
    jg = jax.grad(lambda x: jnp.sum(core.rbm_free_energy(jparams, x)))(jv)
    _, jg_closed = core.rbm_free_energy_and_input_grad(jparams, jv)
    np.testing.assert_allclose(np.asarray(jg_closed), np.asarray(jg), rtol=1e-5, atol=1e-6)


def _with_random_biases(energy: ebm.RBM) -> ebm.RBM:
    """``energy`` with standard normal biases (an RBM starts with zero ones, which would
    leave the biases' part of a gradient untested)."""
    with torch.no_grad():
        energy.visible_bias.normal_()
        energy.hidden_bias.normal_()
    return energy


def test_ising_closed_form_input_gradient_is_the_energy_gradient():
    """``core.lattice_ising_energy_and_input_grad`` equals the lattice Ising energy and its
    autograd gradient (float64), couplings not symmetric to start with and a field."""
    torch.manual_seed(0)
    side = 3
    mask = torch.as_tensor(core.lattice_mask(side), dtype=torch.float64)
    couplings = torch.randn(side * side, side * side, dtype=torch.float64)
    field = torch.randn(side * side, dtype=torch.float64)
    x = (torch.rand(4, side * side, dtype=torch.float64) < 0.5).double().requires_grad_(True)
    e = core.lattice_ising_energy(couplings, field, mask, x)
    (g,) = torch.autograd.grad(e.sum(), x)
    e_closed, g_closed = core.lattice_ising_energy_and_input_grad(
        couplings, field, mask, x.detach()
    )
    np.testing.assert_allclose(e_closed.cpu().numpy(), e.detach().cpu().numpy(), rtol=1e-12)
    np.testing.assert_allclose(g_closed.cpu().numpy(), g.cpu().numpy(), rtol=1e-12)


class _AutogradRBM(ebm.RBM):
    """The RBM without its closed-form gradient: the trainer takes autograd's."""

    energy_and_input_grad = None  # type: ignore[assignment]


class _AutogradIsing(ebm.IsingEnergy):
    """The Ising energy without its closed-form gradient."""

    energy_and_input_grad = None  # type: ignore[assignment]


def _energy_pair(kind: str) -> tuple:
    """An energy with random parameters (biases and fields included) and its twin without
    the closed-form gradient."""
    if kind == "RBM":
        energy, twin = _with_random_biases(ebm.RBM(8, 4, scale=1.0)), _AutogradRBM(8, 4)
    else:
        energy, twin = ebm.IsingEnergy(3, scale=1.0), _AutogradIsing(3)
        with torch.no_grad():
            energy.field.normal_()
    twin.load_state_dict(energy.state_dict())
    return energy, twin


@pytest.mark.parametrize("kind", ["RBM", "Ising"])
@pytest.mark.parametrize(
    "kernel", [px.DMALA(step_size=0.7), px.GWG(), px.ACS()], ids=["DMALA", "GWG", "ACS"]
)
def test_closed_form_gradient_takes_the_autograd_paths_steps(kernel, kind):
    """The trainer's steps read the energy's closed-form input gradient (rows path: DMALA,
    GWG; vmap path: ACS) and take the moves autograd's gradient gives, on the same noise."""
    torch.manual_seed(0)
    energy, twin = _energy_pair(kind)
    x = (torch.rand(6, energy.mask.shape[0] if kind == "Ising" else 8) < 0.5).float()
    results = []
    for model in (energy, twin):
        torch.manual_seed(1)
        results.append(_ebm_chains.kernel_steps(kernel, model, x, 10))
    (closed_x, closed_accept, _), (auto_x, auto_accept, _) = results
    np.testing.assert_array_equal(closed_x.cpu().numpy(), auto_x.cpu().numpy())
    np.testing.assert_allclose(float(closed_accept), float(auto_accept), rtol=1e-5)
    assert not torch.equal(closed_x, x)  # the chains moved


def test_a_wrong_closed_form_gradient_is_refused():
    """An energy whose ``energy_and_input_grad`` disagrees with autograd is refused at the
    start of training, naming the method (here the gradient's sign is flipped)."""

    class Flipped(ebm.RBM):
        def energy_and_input_grad(self, x):
            e, de = super().energy_and_input_grad(x)
            return e, -de

    torch.manual_seed(0)
    energy = Flipped(16, 4, scale=0.5)
    data = torch.as_tensor(bars_and_stripes())
    kwargs = dict(
        optimizer=torch.optim.SGD(energy.parameters(), lr=0.01),
        method=core.PCD(sampler=px.DMALA(step_size=0.5), num_chains=10),
        num_steps=1,
        batch_size=10,
        progress_bar=False,
    )
    with pytest.raises(ValueError, match="energy_and_input_grad.*autograd"):
        ebm.train(energy, data, **kwargs)
    ebm.train(_with_random_biases(ebm.RBM(16, 4, scale=0.5)), data, **kwargs)  # the RBM's own


def _moment_z(energy, samples):
    """Max |z| of the samples' coordinate means and pairwise products (one independent draw
    per chain) against the energy's exact moments by enumeration."""
    dim = samples.shape[1]
    states = core.binary_states(dim, torch.zeros((), dtype=torch.float64))
    with torch.no_grad():
        log_p = -energy(states.float()).double()
    p = torch.softmax(log_p, 0)
    upper = torch.triu_indices(dim, dim)
    exact = (states.T @ (p[:, None] * states))[upper[0], upper[1]]
    x = samples.double()
    drawn = (x.T @ x)[upper[0], upper[1]] / x.shape[0]
    se = torch.sqrt(torch.clamp(exact * (1 - exact), min=1e-12) / x.shape[0])
    return float(((drawn - exact).abs() / se).max())


def test_plate_gibbs_negative_phase_draws_the_exact_distribution():
    """PlateGibbs as the torch trainer's negative phase (its one-chain step vectorised with
    torch.func.vmap): a checkerboard sweep of a 3x3 lattice Ising energy and a sweep
    coordinate by coordinate of an RBM's free energy, against the exact moments (max |z| 3.1
    and 1.6 when written); power: the lattice swept as one colour gives 24."""
    torch.manual_seed(0)
    ising = ebm.IsingEnergy(3, scale=0.6)
    with torch.no_grad():
        ising.field.copy_(0.3 * torch.randn(9))
    data = torch.zeros((4, 9))
    kernel = px.PlateGibbs()
    colours = _ebm_chains.plate_colouring(kernel, ising, data)
    assert colours == (0, 1, 0, 1, 0, 1, 0, 1, 0)
    start = torch.zeros((3000, 9))
    drawn, accept = _ebm_chains.negative_samples(
        kernel, ising, start, 25, _ebm_chains.ONE_PROCESS, colours
    )
    assert accept == 1.0
    assert _moment_z(ising, drawn) < 4.5
    torch.manual_seed(1)
    broken, _ = _ebm_chains.negative_samples(
        kernel, ising, start, 25, _ebm_chains.ONE_PROCESS, (0,) * 9
    )
    assert _moment_z(ising, broken) > 8

    rbm = ebm.RBM(5, 3, scale=1.5)
    colours = _ebm_chains.plate_colouring(kernel, rbm, torch.zeros((4, 5)))
    assert colours == (0, 1, 2, 3, 4)
    drawn, _ = _ebm_chains.negative_samples(
        kernel, rbm, torch.zeros((3000, 5)), 10, _ebm_chains.ONE_PROCESS, colours
    )
    assert _moment_z(rbm, drawn) < 4.5


def test_plate_gibbs_trains_resumes_and_checks_its_colouring():
    data = bars_and_stripes()

    def fresh():
        torch.manual_seed(0)
        ising = ebm.IsingEnergy(4)
        return ising, torch.optim.SGD(ising.parameters(), lr=0.05)

    options = dict(
        method=ebm.PCD(sampler=px.PlateGibbs(), steps=2), batch_size=20, progress_bar=False
    )
    ising, opt = fresh()
    whole = ebm.train(ising, data, optimizer=opt, num_steps=4, **options)
    assert np.all(whole.history["accept_prob"] == 1.0)
    ising2, opt2 = fresh()
    half = ebm.train(ising2, data, optimizer=opt2, num_steps=2, **options)
    ising3, opt3 = fresh()
    rest = ebm.train(ising3, data, optimizer=opt3, num_steps=2, resume=half, **options)
    assert torch.equal(whole.method_state, rest.method_state)
    for a, b in zip(ising.parameters(), ising3.parameters()):
        assert torch.equal(a, b)

    rows = np.zeros(16, int)
    rows[8:] = 1  # neighbours in one colour
    with pytest.raises(ValueError, match="blocks\\['x'\\] is not a valid colouring: coordinates"):
        ebm.train(
            ising,
            data,
            optimizer=opt,
            method=ebm.PCD(sampler=px.PlateGibbs(blocks={"x": rows})),
            num_steps=1,
        )
    with pytest.raises(ValueError, match="torch_compile=True does not apply to PlateGibbs"):
        ebm.train(
            ising,
            data,
            optimizer=opt,
            method=ebm.CD(1, sampler=px.PlateGibbs()),
            num_steps=1,
            torch_compile=True,
        )
    wide = ebm.MLPEnergy(20, (8,))
    wide_data = (torch.rand(32, 20) < 0.5).float()
    with pytest.raises(ValueError, match="20 coordinates need 20 colours.*SiteGibbs"):
        ebm.train(
            wide,
            wide_data,
            optimizer=torch.optim.SGD(wide.parameters(), lr=0.1),
            method=ebm.PCD(sampler=px.PlateGibbs()),
            num_steps=1,
        )
