"""DMALA, DULA, GWG, AB-1st and ACS with the chains in the rows of one leaf
(``Sites.chains_in_rows``): the step of C chains at once equals, chain by chain, the one-chain
step on the same noise, on numpy and torch inputs (the torch cases skip where torch is
absent); other samplers refuse."""

import numpy as np
import pytest

import discrete_kernels as dk
from discrete_kernels import PYTHON_CONTROL, Sites, StepNoise

CHAINS, DIM, STEPS = 7, 6, 25


def _namespace(name):
    """numpy, or torch through array-api-compat (the core's view of it)."""
    if name == "torch":
        pytest.importorskip("torch")
        from array_api_compat import torch as xp

        return xp
    return np


def _local_fn(xp, weights, bias):
    """A pairwise binary target ``f(x) = x W x / 2 + b x`` on one chain (shape (n,)) or on
    chains in rows (shape (C, n), ``f`` of shape (C, 1)), with its gradient; ``f`` is NaN
    where the first two coordinates are both 1 (an unusable proposal, refused per chain)."""

    def local_fn(leaves):
        x = xp.astype(leaves[0], weights.dtype)
        field = x @ weights + bias
        f = xp.sum(x * (x @ weights), axis=-1, keepdims=True) / 2 + xp.sum(
            x * bias, axis=-1, keepdims=True
        )
        unusable = (x[..., 0:1] == 1) & (x[..., 1:2] == 1)
        f = xp.where(unusable, xp.full_like(f, float("nan")), f)
        if x.ndim == 1:
            f = f[0]
        return f, (field,)

    return local_fn


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize(
    "sampler",
    [dk.dlp.DMALA(), dk.dlp.DULA(), dk.gwg.GWG(), dk.ab.AB(balance=0.7), dk.acs.ACS()],
    ids=["DMALA", "DULA", "GWG", "AB-1st", "ACS"],
)
def test_rows_step_equals_the_one_chain_step(sampler, backend):
    xp = _namespace(backend)
    rng = np.random.default_rng(0)
    w = rng.normal(0.0, 0.8, (DIM, DIM)).astype(np.float32)
    w = (w + w.T) / 2
    np.fill_diagonal(w, 0.0)
    b = rng.normal(0.0, 0.5, DIM).astype(np.float32)
    local_fn = _local_fn(xp, xp.asarray(w), xp.asarray(b))
    x0 = (rng.uniform(size=(CHAINS, DIM)) < 0.5).astype(np.int64)
    x0[:, :2] = [1, 0]  # usable starts
    one = Sites(("x",), (dk.Binary(),), (False,))
    (shape,) = sampler.noise_shapes(one, [(DIM,)]).uniforms  # (n,), or () for GWG's move
    uniforms = rng.uniform(size=(STEPS, CHAINS, *(shape or (1,)))).astype(np.float32)
    accepts = rng.uniform(size=(STEPS, CHAINS)).astype(np.float32)
    # a step size per chain, from small to large (most proposals refused at the top)
    steps = np.geomspace(0.1, 5.0, CHAINS).astype(np.float32)
    rows = one._replace(chains_in_rows=True)
    sampler.check_sites(rows, DIM)

    def params(step_size):
        metropolis = getattr(sampler, "metropolis", True)
        return dk.StepParameters(step_size, 0.5 * xp.ones_like(step_size), metropolis)

    # the adaptation state (AB's step reads it; the parameters are given below)
    adapt_rows = sampler.adapt_init(xp.ones((CHAINS, 1)), 0, rows, DIM, PYTHON_CONTROL)
    adapt_one = sampler.adapt_init(xp.ones(()), 0, one, DIM, PYTHON_CONTROL)
    batch = sampler.init((xp.asarray(x0),), local_fn)
    chains = [sampler.init((xp.asarray(x0[c]),), local_fn) for c in range(CHAINS)]
    moved, refused_nan = 0, 0
    for i in range(STEPS):
        noise = StepNoise((xp.asarray(uniforms[i]),), xp.asarray(accepts[i][:, None]))
        batch, info = sampler.step(
            batch, noise, params(xp.asarray(steps[:, None])), adapt_rows, rows, local_fn
        )
        for c in range(CHAINS):
            u = uniforms[i, c] if shape else uniforms[i, c, 0]
            noise_c = StepNoise((xp.asarray(u),), xp.asarray(accepts[i, c]))
            chains[c], info_c = sampler.step(
                chains[c], noise_c, params(xp.asarray(steps[c])), adapt_one, one, local_fn
            )
            np.testing.assert_array_equal(np.asarray(batch.x[0][c]), np.asarray(chains[c].x[0]))
            np.testing.assert_allclose(
                float(batch.log_density[c, 0]), float(chains[c].log_density), rtol=1e-6
            )
            np.testing.assert_allclose(
                np.asarray(batch.local[0][c]), np.asarray(chains[c].local[0]), rtol=1e-6
            )
            for name in ("accept_prob", "accepted", "hamming_distance"):
                got, want = getattr(info, name)[c, 0], getattr(info_c, name)
                np.testing.assert_allclose(float(got), float(want), rtol=1e-5, err_msg=name)
            moved += bool(info_c.accepted)
            refused_nan += bool(info_c.accept_prob == 0 and info_c.hamming_distance > 0)
        assert info.accept_prob.shape == (CHAINS, 1)
    # the chains do different things: some move, some proposals are refused
    assert 0 < moved < CHAINS * STEPS and refused_nan > 0
    assert np.all(np.isfinite(np.asarray(batch.log_density)))


@pytest.mark.parametrize(
    "sampler",
    [dk.ab.AB(variant="trace"), dk.dlp.DMALA(per_coordinate_mh=True)],
    ids=["AB-trace", "DMALA-per-coordinate"],
)
def test_other_samplers_refuse_chains_in_rows(sampler):
    sites = Sites(("x",), (dk.Binary(),), (False,), chains_in_rows=True)
    sites = sites._replace(per_coordinate_mh=sampler.per_coordinate)
    with pytest.raises(ValueError, match="one chain at a time|variant='1st' only"):
        sampler.check_sites(sites, DIM)


def test_ab_refuses_its_warmup_tuner_with_chains_in_rows():
    """AB's tuner keeps one (sigma, balance) and one jump statistic: with chains in rows it
    would pool the chains' jumps, so a warmup is refused (none is fine)."""
    sites = Sites(("x",), (dk.Binary(),), (False,), chains_in_rows=True)
    like = np.ones((CHAINS, 1), np.float32)
    dk.ab.AB().adapt_init(like, 0, sites, DIM, PYTHON_CONTROL)
    with pytest.raises(ValueError, match="tunes one chain at a time"):
        dk.ab.AB().adapt_init(like, 100, sites, DIM, PYTHON_CONTROL)


def test_acs_tuner_state_has_one_field_per_chain_in_rows():
    """ACS's tuner with chains in rows: every field (C, 1), the balance schedule (C, 1, s), so
    each chain tunes its own cycle (tests/pyro_ext/test_ebm.py runs it against vmap)."""
    sites = Sites(("x",), (dk.Binary(),), (False,), chains_in_rows=True)
    like = np.ones((CHAINS, 1), np.float32)
    sampler = dk.acs.ACS()
    state = sampler.adapt_init(like, 100, sites, DIM, PYTHON_CONTROL)
    s = sampler.config.steps_per_cycle
    for name, value in state._asdict().items():
        expected = (CHAINS, 1, s) if name == "beta_schedule" else (CHAINS, 1)
        assert np.shape(value) == expected, name


@pytest.mark.parametrize(
    ("domain", "is_table"),
    [(dk.Ordinal(4), False), (dk.Categorical(3), True), (dk.Binary(), True)],
    ids=["ordinal", "categorical", "binary-table"],
)
def test_chains_in_rows_take_binary_gradient_leaves_only(domain, is_table):
    """A (C, n, S) table would broadcast a (C, 1) step size along the wrong axis: refused."""
    sites = Sites(("z",), (domain,), (is_table,), chains_in_rows=True)
    with pytest.raises(ValueError, match="Binary leaves with gradients only.*'z'"):
        dk.dlp.DMALA().check_sites(sites, DIM)
