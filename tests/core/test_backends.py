"""The core gives the same numbers on numpy, jax.numpy (also under jit) and torch inputs (the
torch cases skip where torch is not installed: the newest-stack CI job installs none)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

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


def _namespace(name):
    """The array library ``name`` (numpy, jax.numpy, torch); skips where torch is absent."""
    if name == "torch":
        return pytest.importorskip("torch")
    return {"numpy": np, "jax": jnp}[name]


def _inputs(name, x, local):
    """``x`` (integers) and ``local`` (float32) on backend ``name``, and a way back to numpy."""
    if name == "numpy":
        return x, local.astype(np.float32), np.asarray
    if name == "jax":
        return jnp.asarray(x, jnp.int32), jnp.asarray(local, jnp.float32), np.asarray
    torch = _namespace("torch")
    return (
        torch.as_tensor(x, dtype=torch.int64),
        torch.as_tensor(local, dtype=torch.float32),
        lambda a: a.numpy(),
    )


@pytest.mark.parametrize("backend", ["jax", "torch"])
@pytest.mark.parametrize(("domain", "x", "local", "is_table"), CASES, ids=IDS)
def test_logits_log_prob_and_sample_agree(domain, x, local, is_table, backend):
    rng = np.random.default_rng(0)
    noise = rng.uniform(size=dk.dlp.dlp_noise_shapes([domain], [x.shape])[0]).astype(np.float32)
    results = {}
    for name in ("numpy", backend):
        xb, lb, to_np = _inputs(name, x, local)
        logits = dk.dlp.dlp_leaf_logits(domain, xb, lb, is_table, 0.6)
        y = dk.dlp.dlp_leaf_sample(domain, xb, logits, _namespace(name).asarray(noise))
        results[name] = (
            to_np(logits),
            to_np(y),
            float(dk.dlp.dlp_leaf_log_prob(domain, xb, y, logits)),
            to_np(dk.gwg.gwg_move_logits(domain, xb, lb, is_table)),
        )
    ref, got = results["numpy"], results[backend]
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
        return dk.dlp.dlp_step(
            dk.ChainState((x,), f, loc), [u], np.float32(0.2), local_fn=make_local_fn(np), **kwargs
        )

    @jax.jit
    def jax_step(x):
        f, loc = make_local_fn(jnp)((x,))
        return dk.dlp.dlp_step(
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


NAN, INF = float("nan"), float("inf")
# (f(x), f(y), log q(y | x), log q(x | y)) -> log A
MH_CASES = [
    ((-1.0, -2.0, -0.5, -0.25), -1.0 + 0.25),
    ((-1.0, -INF, -0.5, -0.25), -INF),  # zero-probability proposal
    ((-1.0, NAN, -0.5, -0.25), -INF),
    ((-1.0, INF, -0.5, -0.25), -INF),  # an infinite energy is unusable, not a sure move
    ((-1.0, -2.0, -INF, -0.25), -INF),  # drawn from a table with no usable entry
    ((-1.0, -2.0, NAN, -0.25), -INF),
    ((-1.0, -2.0, -0.5, -INF), -INF),  # no way back: never accepted
    ((-1.0, -2.0, -0.5, NAN), -INF),
]


@pytest.mark.parametrize("backend", ["numpy", "jax", "torch", "python"])
@pytest.mark.parametrize(("terms", "expected"), MH_CASES, ids=[str(c[0]) for c in MH_CASES])
def test_mh_log_ratio_rejects_every_unusable_term_on_every_backend(terms, expected, backend):
    """The same on Python floats (the one-chain CPU torch step's decision)."""
    if backend == "python":
        args, as_array = [float(t) for t in terms], float
    else:
        lib = _namespace(backend)
        args = [lib.asarray(t, dtype=lib.float32) for t in terms]
        as_array = lib.asarray
    got = float(dk.metropolis.mh_log_ratio(*args))
    assert got == pytest.approx(expected), (backend, terms)
    assert float(dk.metropolis.accept_probability(as_array(got))) == pytest.approx(
        min(1.0, np.exp(expected))
    )


@pytest.mark.parametrize("metropolis", [True, False])
def test_the_cpu_decision_on_python_floats_equals_the_tensor_decision(metropolis, monkeypatch):
    """``mh_finish`` for one CPU torch chain decides on Python floats and keeps one side whole;
    the tensor path (what a CUDA chain takes, forced here) gives the same kept state, acceptance
    probability, move flag and distance for every MH case above (unusable terms included) and
    for uniforms at 0, in the middle, and on either side of the acceptance probability."""
    torch = pytest.importorskip("torch")
    from discrete_kernels import metropolis as mh

    x, y = torch.tensor([0.0, 1.0, 1.0]), torch.tensor([1.0, 1.0, 0.0])
    local_x, local_y = torch.tensor([0.1, 0.2, 0.3]), torch.tensor([-0.1, -0.2, -0.3])

    def finish(terms, uniform, same_side=False):
        f_x, f_y, forward, reverse = (torch.tensor(t) for t in terms)
        state = dk.ChainState((x,), f_x, (local_x,))
        proposal = dk.ChainState((x if same_side else y,), f_y, (local_y,))
        return mh.mh_finish(state, proposal, forward, reverse, torch.tensor(uniform), metropolis)

    cases = [(terms, u) for terms, _ in MH_CASES for u in (0.0, 0.3, 0.45, 0.5, 0.99)]
    cases += [(((-1.0, -1.0, -0.5, -0.5), 0.3), True)]  # accepted, but no coordinate moves
    host = []
    for case in cases:
        (terms, u), same = case if isinstance(case[1], bool) else (case, False)
        host.append(finish(terms, u, same))
    with monkeypatch.context() as patch:
        patch.setattr(mh, "host_number", lambda v: v)
        device = []
        for case in cases:
            (terms, u), same = case if isinstance(case[1], bool) else (case, False)
            device.append(finish(terms, u, same))
    decisions = set()
    for (state, info), (want_state, want_info) in zip(host, device):
        assert torch.equal(state.x[0], want_state.x[0])
        assert torch.equal(state.local[0], want_state.local[0])
        assert torch.equal(state.log_density, want_state.log_density)
        assert info.accept_prob.dtype == want_info.accept_prob.dtype
        assert float(info.accept_prob) == pytest.approx(float(want_info.accept_prob))
        assert info.accepted.dtype == torch.bool and bool(info.accepted) == bool(want_info.accepted)
        assert float(info.hamming_distance) == float(want_info.hamming_distance)
        decisions.add(bool(info.accepted))
    assert decisions == {True, False}  # both outcomes were compared


def test_fused_binary_flip_logits_equal_the_generic_ones():
    """The fused torch form of a ``Binary`` leaf's flip logits (Python-number balance and
    penalty: one chain on the CPU) gives the generic expression's values, NaN and infinite
    gradient entries made harmless first as everywhere."""
    torch = pytest.importorskip("torch")
    from discrete_kernels.samplers.dlp import binary_flip_logits, dlp_leaf_logits

    rng = np.random.default_rng(3)
    x = torch.as_tensor(rng.integers(0, 2, 50), dtype=torch.float32)
    local = torch.as_tensor(rng.standard_normal(50) * 3, dtype=torch.float32)
    local[:3] = torch.tensor([float("nan"), float("inf"), -float("inf")])
    fused = dlp_leaf_logits(dk.Binary(), x, local, False, 0.3, 0.5, penalty=0.5 / 0.3)
    generic = dlp_leaf_logits(dk.Binary(), x, local, False, torch.tensor(0.3), torch.tensor(0.5))
    torch.testing.assert_close(fused, generic)
    assert torch.isfinite(fused).all()
    sign = 1.0 - 2.0 * x
    torch.testing.assert_close(
        binary_flip_logits(local.nan_to_num(0.0, 0.0, 0.0), x, 0.7, 1.25),
        0.7 * local.nan_to_num(0.0, 0.0, 0.0) * sign - 1.25,
    )


@pytest.mark.parametrize("backend", ["numpy", "jax", "torch"])
def test_finite_local_zeroes_every_non_finite_gradient_entry_on_every_backend(backend):
    from discrete_kernels.local import finite_local

    local = np.array([0.5, NAN, INF, -INF, -2.0], dtype=np.float32)
    lib = _namespace(backend)
    got = np.asarray(finite_local(lib.asarray(local), is_table=False))
    np.testing.assert_array_equal(got, [0.5, 0.0, 0.0, 0.0, -2.0])
    table = np.asarray(finite_local(lib.asarray(local), is_table=True))
    np.testing.assert_array_equal(table, [0.5, -INF, -INF, -INF, -2.0])
