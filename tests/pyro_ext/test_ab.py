"""pyro_ext.AB through pyro.infer.MCMC: moments of AB-1st and a quadratic variant, the
burn-in fit and tuning in warmup, a Gibbs block next to NUTS, ArviZ and errors."""

import numpy as np
import pytest
import torch
from pyro.infer import NUTS

import discrete_kernels as dk
import pyro_ext as px

from ..mc import assert_mc_close, mixed_model_exact
from .test_pyro_kernels import _run, enumerate_pyro, ising_model, mixed_model


# tests/test_adapter_parity.py checks this kernel against NumPyro's step by step, and the
# NumPyro moment tests run by default: this Pyro run of the same check is behind slow
@pytest.mark.slow
@pytest.mark.parametrize("variant", ["1st", "trace"])
def test_ising_3x3_moments(variant):
    states, probs = enumerate_pyro(ising_model, {"x": ((9,), (0, 1))})
    s_all = np.stack([2.0 * st[0].cpu().numpy() - 1.0 for st in states])
    iu = np.triu_indices(9, 1)
    pair_all = np.einsum("ni,nj->nij", s_all, s_all)[:, iu[0], iu[1]]
    # AB-1st at fixed, well-mixing parameters (the PPL path; adaptation is tested with the
    # quadratic variant here and in the NumPyro tests): on this 9-spin model the jump-distance
    # tuner can settle on small moves whose rare sign flips make the ESS estimate unreliable
    options = {"adapt": False, "step_size": 0.8, "balance": 0.7} if variant == "1st" else {}
    kernel = px.AB(ising_model, variant=variant, **options)
    mcmc = _run(kernel, 4000, 1200)
    x = mcmc.get_samples(group_by_chain=True)["x"].cpu().numpy().astype(np.float64)
    s = 2.0 * x - 1.0
    pair = np.einsum("cni,cnj->cnij", s, s)[..., iu[0], iu[1]]
    assert_mc_close(s, probs @ s_all)
    assert_mc_close(pair, probs @ pair_all)
    stats = px.to_arviz(mcmc).sample_stats
    tuned = {k: float(v) for k, v in kernel.tuned_parameters().items()}
    np.testing.assert_allclose(stats["step_size"].values, tuned["step_size"], rtol=1e-6)
    np.testing.assert_allclose(stats["balance"].values, tuned["balance"], rtol=1e-6)
    if variant != "1st":
        m = kernel.adapt_state.quadratic.root
        assert float(torch.linalg.eigvalsh(m @ m)[0]) > -1e-5
        assert (
            float(kernel.adapt_state.quadratic.diag.abs().sum()) > 0
        )  # fitted at the burn-in's end


# AB's Pyro driver is checked against NumPyro's step by step (test_adapter_parity.py) and
# px.Gibbs with NUTS runs by default in test_esh.py: this composition run is behind slow
@pytest.mark.slow
def test_ab_as_gibbs_block_matches_exact_posterior():
    y = torch.tensor([0.3, 1.1, 0.8])
    mean_z, mean_mu, second_mu = mixed_model_exact(y.cpu().numpy())
    kernel = px.Gibbs(
        [(px.AB(mixed_model, variant="shift"), px.discrete_sites), (NUTS(mixed_model), None)]
    )
    mcmc = _run(kernel, 1200, 400, y)
    samples = mcmc.get_samples(group_by_chain=True)
    z = samples["z"].cpu().numpy().astype(np.float64)
    mu = samples["mu"].cpu().numpy().astype(np.float64)
    assert_mc_close(z, mean_z)
    assert_mc_close(np.stack([mu, mu**2], axis=-1), np.array([mean_mu, second_mu]))


@pytest.mark.cpu_only  # compares with JAX on the CPU
def test_torch_and_jax_quadratic_proposals_agree():
    """The same W, uniforms and normals give the same proposal and log densities."""
    jnp = pytest.importorskip("jax.numpy")

    rng = np.random.default_rng(0)
    d = 5
    w = rng.normal(size=(d, d))
    w = (w + w.T) / 2
    b = rng.normal(size=d)
    x = np.array([0, 1, 1, 0, 1])
    uniforms, normals = rng.uniform(size=d), rng.normal(size=d)
    out = {}
    for name, lib in (("torch", torch), ("jax", jnp)):
        wt, bt = lib.asarray(w, dtype=lib.float32), lib.asarray(b, dtype=lib.float32)

        def local_fn(leaves, wt=wt, bt=bt, lib=lib):
            v = leaves[0] * 1.0
            return 0.5 * v @ wt @ v + bt @ v, (wt @ v + bt,)

        quadratic = dk.samplers.ab_linalg.quadratic_from_coupling(wt, "trace")
        xs = (lib.asarray(x),)
        f, local = local_fn(xs)
        proposal, log_q_f, log_q_r = dk.samplers.ab_quadratic.ab_quadratic_propose(
            dk.ChainState(xs, f, local),
            (lib.asarray(uniforms, dtype=lib.float32),),
            lib.asarray(normals, dtype=lib.float32),
            local_fn=local_fn,
            domains=(dk.Binary(),),
            quadratic=quadratic,
            sigma=1.5,
            balance=0.8,
        )
        out[name] = (np.asarray(proposal.x[0]), float(log_q_f), float(log_q_r))
    np.testing.assert_array_equal(out["torch"][0], out["jax"][0])
    np.testing.assert_allclose(out["torch"][1:], out["jax"][1:], rtol=1e-4, atol=1e-4)


def test_ab_errors():
    with pytest.raises(ValueError, match="variant must be one of"):
        px.AB(ising_model, variant="2nd")
    kernel = px.AB(ising_model, variant="shift", coupling=np.eye(2))
    with pytest.raises(ValueError, match=r"coupling must have shape \(9, 9\)"):
        _run(kernel, 2, 0)
