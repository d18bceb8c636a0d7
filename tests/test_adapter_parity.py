"""Adapter parity: every kernel in both PPLs, driven by the same fixed noise, makes the same
draws and reports the same statistics step by step (warmup adaptation included).

Both drivers take their noise through one method (``_draw_noise``); the test replaces it with
a table of pre-drawn numbers, so any difference comes from the drivers or the specs, not the
RNGs. Float32 on both sides: statistics agree to a relative 1e-3.
"""

import numpy as np
import pytest

jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")
pytest.importorskip("numpyro")
pytest.importorskip("pyro")

import jax.numpy as jnp  # noqa: E402
from numpyro.infer import MCMC  # noqa: E402
from pyro.infer import MCMC as PyroMCMC  # noqa: E402

import numpyro_ext as nx  # noqa: E402
import pyro_ext as px  # noqa: E402
from discrete_kernels import Sites, StepNoise  # noqa: E402

NUM_WARMUP, NUM_SAMPLES = 40, 20
COUPLING = np.array(
    [[0.0, 0.6, 0.0, -0.3], [0.6, 0.0, 0.5, 0.0], [0.0, 0.5, 0.0, 0.4], [-0.3, 0.0, 0.4, 0.0]],
    np.float32,
)
FIELD = np.array([0.2, -0.1, 0.3, 0.0], np.float32)


def energy(z, xp):
    """-log density of a binary vector ``s`` (4,) and an ordinal pair ``k`` (2,) on {0..4}."""
    s = z["s"] * 2.0 - 1.0
    k = z["k"] * 1.0
    w, h = xp.asarray(COUPLING), xp.asarray(FIELD)
    ising = 0.5 * (s @ (w @ s)) + h @ s
    return -(ising - 0.3 * ((k - 2.0) ** 2).sum() + 0.25 * k[0] * s[0])


START = {"s": np.array([1, 0, 1, 1], np.int32), "k": np.array([0, 4], np.int32)}
DOMAINS = {"s": nx.Binary(), "k": nx.Ordinal(5)}

KERNELS = {
    "DMALA": ("DMALA", {"step_size": 0.8}),
    "DULA": ("DULA", {"step_size": 0.3}),
    "GWG": ("GWG", {}),
    "ACS": ("ACS", {"steps_per_cycle": 4, "tuning": {"num_candidates": 2}}),
    "AB-1st": ("AB", {"block_size": 4}),
    "AB-trace": ("AB", {"variant": "trace", "block_size": 4, "burn_in": 20}),
}
# W's fit (an O(d^3) eigensolve and an iterative SDP for D) runs in float32 through different
# LAPACK backends: AB-trace's acceptance probabilities agree to ~2e-3 only
RTOL = {"AB-trace": 1e-2}
FIELDS = ("accept_prob", "accepted", "step_size", "balance", "hamming_distance")


def noise_table(shapes, num_draws):
    """Pre-drawn flat uniforms (proposal uniforms, then the MH uniform) and normals per draw."""
    rng = np.random.default_rng(7)
    size = sum(int(np.prod(shape)) for shape in shapes.uniforms) + 1
    uniforms = rng.uniform(size=(num_draws, size)).astype(np.float32)
    normals = rng.standard_normal((num_draws, max(shapes.num_normals, 1))).astype(np.float32)
    return uniforms, normals


def split(flat, shapes, xp):
    pieces, start = [], 0
    for shape in shapes.uniforms:
        size = int(np.prod(shape))
        pieces.append(xp.reshape(flat[start : start + size], shape))
        start += size
    return tuple(pieces), flat[-1]


def numpyro_run(name, options, table):
    uniforms, normals = (jnp.asarray(a) for a in table)

    class Fixed(getattr(nx, name)):
        def _draw_noise(self, rng_key, shapes, index):
            pieces, accept = split(uniforms[index], shapes, jnp)
            n = normals[index][: shapes.num_normals] if shapes.num_normals else None
            return rng_key, StepNoise(pieces, accept, n)

    kernel = Fixed(potential_fn=lambda z: energy(z, jnp), domain=dict(DOMAINS), **dict(options))
    mcmc = MCMC(kernel, num_warmup=NUM_WARMUP, num_samples=NUM_SAMPLES, progress_bar=False)
    start = {k: jnp.asarray(v) for k, v in START.items()}
    mcmc.run(jax.random.key(0), init_params=start, extra_fields=FIELDS)
    draws = mcmc.get_samples()
    stats = mcmc.get_extra_fields()
    return {k: np.asarray(v) for k, v in draws.items()}, {f: np.asarray(stats[f]) for f in FIELDS}


def pyro_run(name, options, table):
    uniforms, normals = (torch.as_tensor(a) for a in table)

    class Fixed(getattr(px, name)):
        def _draw_noise(self, shapes, index):
            pieces, accept = split(uniforms[index], shapes, torch)
            n = normals[index][: shapes.num_normals] if shapes.num_normals else None
            return StepNoise(pieces, accept, n)

    kernel = Fixed(potential_fn=lambda z: energy(z, torch), domain=dict(DOMAINS), **dict(options))
    start = {k: torch.as_tensor(v, dtype=torch.long) for k, v in START.items()}
    mcmc = PyroMCMC(
        kernel,
        num_samples=NUM_SAMPLES,
        warmup_steps=NUM_WARMUP,
        initial_params=start,
        disable_progbar=True,
    )
    mcmc.run()
    draws = {k: v.numpy() for k, v in mcmc.get_samples().items()}
    stats = kernel.diagnostics()["sample_stats"]  # the sampling draws, as NumPyro's
    return draws, {f: stats[f].numpy() for f in FIELDS}


@pytest.mark.parametrize("label", list(KERNELS))
def test_both_adapters_make_the_same_draws_from_the_same_noise(label):
    name, options = KERNELS[label]
    probe = getattr(nx, name)(
        potential_fn=lambda z: energy(z, jnp), domain=dict(DOMAINS), **dict(options)
    )
    # both adapters order potential-mode leaves by sorted key: "k" (2,), then "s" (4,)
    sites = Sites(("k", "s"), (DOMAINS["k"], DOMAINS["s"]), (False, False))
    shapes = probe.spec.noise_shapes(sites, [(2,), (4,)])
    table = noise_table(shapes, NUM_WARMUP + NUM_SAMPLES)
    n_draws, n_stats = numpyro_run(name, options, table)
    p_draws, p_stats = pyro_run(name, options, table)
    moves = int(n_stats["hamming_distance"].sum())
    assert moves > 0, f"{label}: no move at all, the comparison would be empty"
    for site in ("s", "k"):
        np.testing.assert_array_equal(n_draws[site], p_draws[site], err_msg=f"{label} {site}")
    for field in FIELDS:
        np.testing.assert_allclose(
            n_stats[field].astype(np.float64),
            p_stats[field],
            rtol=RTOL.get(label, 1e-3),
            atol=1e-5,
            err_msg=f"{label} {field}",
        )


# ------------------------------------------------------------------------------------------
# ESH: the continuous sampler, same spec in both PPLs

PRECISION = np.array([[2.0, 0.6, 0.0], [0.6, 1.0, -0.3], [0.0, -0.3, 0.5]], np.float32)


def gaussian_energy(z, xp):
    x = xp.concatenate([xp.reshape(z["a"], (-1,)), xp.reshape(z["b"], (-1,))])
    return 0.5 * x @ (xp.asarray(PRECISION) @ x) + 0.1 * (x**4).sum()


ESH_START = {"a": np.array([0.5, -1.0], np.float32), "b": np.array(0.3, np.float32)}
ESH_OPTIONS = {"step_size": 0.3, "num_steps": 6}


def esh_noise(num_draws):
    """Per draw: ``num_steps`` reservoir uniforms, the orbit-offset uniform, 3 normals."""
    rng = np.random.default_rng(11)
    uniforms = rng.uniform(size=(num_draws, ESH_OPTIONS["num_steps"] + 1)).astype(np.float32)
    return uniforms, rng.standard_normal((num_draws, 3)).astype(np.float32)


def test_esh_is_the_same_in_both_adapters():
    num = NUM_WARMUP + NUM_SAMPLES
    table = esh_noise(num)
    uniforms, normals = (jnp.asarray(a) for a in table)

    class FixedNumPyro(nx.ESH):
        def _draw_noise(self, rng_key, shapes, index):
            u = uniforms[index]
            return rng_key, StepNoise((u[:-1], u[-1]), u[-1], normals[index])

    kernel = FixedNumPyro(potential_fn=lambda z: gaussian_energy(z, jnp), **ESH_OPTIONS)
    mcmc = MCMC(kernel, num_warmup=NUM_WARMUP, num_samples=NUM_SAMPLES, progress_bar=False)
    start = {k: jnp.asarray(v) for k, v in ESH_START.items()}
    mcmc.run(jax.random.key(0), init_params=start, extra_fields=("hamiltonian_drift",))
    n_draws = {k: np.asarray(v) for k, v in mcmc.get_samples().items()}
    n_drift = np.asarray(mcmc.get_extra_fields()["hamiltonian_drift"])

    t_uniforms, t_normals = (torch.as_tensor(a) for a in table)

    class FixedPyro(px.ESH):
        def _draw_noise(self, shapes, index, like):
            u = t_uniforms[index]
            return StepNoise((u[:-1], u[-1]), u[-1], t_normals[index])

    kernel = FixedPyro(potential_fn=lambda z: gaussian_energy(z, torch), **ESH_OPTIONS)
    pyro_mcmc = PyroMCMC(
        kernel,
        num_samples=NUM_SAMPLES,
        warmup_steps=NUM_WARMUP,
        initial_params={k: torch.as_tensor(v) for k, v in ESH_START.items()},
        disable_progbar=True,
    )
    pyro_mcmc.run()
    p_draws = {k: v.numpy() for k, v in pyro_mcmc.get_samples().items()}
    p_drift = kernel.diagnostics()["sample_stats"]["hamiltonian_drift"].numpy()
    assert np.ptp(n_draws["b"]) > 0.1, "ESH did not move: the comparison would be empty"
    for site in ("a", "b"):
        np.testing.assert_allclose(n_draws[site], p_draws[site], rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(n_drift, p_drift, rtol=1e-2, atol=1e-4)
