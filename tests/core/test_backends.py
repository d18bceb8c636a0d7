"""The core gives the same numbers on numpy, jax.numpy (also under jit) and torch inputs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import discrete_kernels as dk

jax.config.update("jax_enable_x64", False)

CASES = [
    (dk.Binary(), np.array([0, 1, 1, 0]), np.array([0.3, -1.2, 0.5, 2.0]), False),
    (dk.Ordinal(5, low=-2), np.array([-2, 0, 2]), np.array([0.7, -0.1, 1.3]), False),
    (
        dk.Ordinal(5, low=0, lower=np.array([0, 1, 0]), upper=np.array([4, 3, 2])),
        np.array([0, 2, 1]),
        np.array([0.7, -0.1, 1.3]),
        False,
    ),
    (
        dk.Categorical(3),
        np.array([0, 2]),
        np.array([[0.1, -0.4, 0.9], [1.0, 0.2, -0.3]]),
        True,
    ),
]
IDS = ["binary", "ordinal", "ordinal-bounded", "categorical"]


def _backends(x, local):
    yield "numpy", x, local.astype(np.float32), lambda a: np.asarray(a)
    yield "jax", jnp.asarray(x, jnp.int32), jnp.asarray(local, jnp.float32), np.asarray
    yield (
        "torch",
        torch.as_tensor(x, dtype=torch.int64),
        torch.as_tensor(local, dtype=torch.float32),
        lambda a: a.numpy(),
    )


@pytest.mark.parametrize(("domain", "x", "local", "is_table"), CASES, ids=IDS)
def test_logits_log_prob_and_sample_agree(domain, x, local, is_table):
    rng = np.random.default_rng(0)
    noise = rng.uniform(size=dk.dlp_noise_shapes([domain], [x.shape])[0]).astype(np.float32)
    results = {}
    for name, xb, lb, to_np in _backends(x, local):
        logits = dk.dlp_leaf_logits(domain, xb, lb, is_table, 0.6)
        u = (
            noise
            if name == "numpy"
            else (jnp.asarray(noise) if name == "jax" else torch.as_tensor(noise))
        )
        y = dk.dlp_leaf_sample(domain, xb, logits, u)
        results[name] = (
            to_np(logits),
            to_np(y),
            float(dk.dlp_leaf_log_prob(domain, xb, y, logits)),
            to_np(dk.gwg_move_logits(domain, xb, lb, is_table)),
        )
    ref = results["numpy"]
    for name in ("jax", "torch"):
        got = results[name]
        np.testing.assert_allclose(got[0], ref[0], rtol=1e-5)
        np.testing.assert_array_equal(got[1], ref[1])
        np.testing.assert_allclose(got[2], ref[2], rtol=1e-5)
        np.testing.assert_allclose(got[3], ref[3], rtol=1e-5)


def test_dlp_step_under_jit_and_vmap_matches_numpy():
    w = np.array([[0.0, 0.5, -0.3], [0.5, 0.0, 0.8], [-0.3, 0.8, 0.0]], dtype=np.float32)

    def make_local_fn(xp):
        ww = xp.asarray(w)

        def local_fn(leaves):
            x = xp.astype(leaves[0], ww.dtype)
            return xp.sum(x * (ww @ x)) / 2, (ww @ x,)

        return local_fn

    x0 = np.array([1, 0, 1], dtype=np.int32)
    u = np.array([0.1, 0.7, 0.3], dtype=np.float32)
    kwargs = dict(domains=[dk.Binary()], is_table=[False], step_size=0.9)

    def np_step(x):
        f, loc = make_local_fn(np)((x,))
        return dk.dlp_step(
            dk.ChainState((x,), f, loc), [u], np.float32(0.2), local_fn=make_local_fn(np), **kwargs
        )

    @jax.jit
    def jax_step(x):
        f, loc = make_local_fn(jnp)((x,))
        return dk.dlp_step(
            dk.ChainState((x,), f, loc),
            [jnp.asarray(u)],
            jnp.float32(0.2),
            local_fn=make_local_fn(jnp),
            **kwargs,
        )

    ref_state, ref_info = np_step(x0)
    state, info = jax_step(jnp.asarray(x0))
    np.testing.assert_array_equal(np.asarray(state.x[0]), ref_state.x[0])
    np.testing.assert_allclose(float(info.accept_prob), float(ref_info.accept_prob), rtol=1e-5)
    batched = jax.vmap(jax_step)(jnp.stack([jnp.asarray(x0)] * 3))
    np.testing.assert_array_equal(np.asarray(batched[0].x[0]), np.stack([ref_state.x[0]] * 3))
