"""DMALA with one MH decision per coordinate (``per_coordinate_mh``) on targets whose
coordinates are independent: the exact kernel (a product of one-coordinate MH kernels) leaves
the target invariant, the step moves by it, a test of the step has the power to tell it from
an uncorrected ratio, and a coupled target is where the decision must stay joint."""

from __future__ import annotations

import itertools
from functools import reduce

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special

import discrete_kernels as dk

from .transition import assert_rows_match, spec_transition_matrix

POISSON_TOP = 40  # P(X > 40) < 1e-25 for each coordinate's Poisson(3) or Poisson(5) below


def count_terms(x):
    """Per-coordinate log terms of a count leaf of 2 coordinates: Poisson(3) and a wiggly
    Poisson(5) (array in, array out; numpy or jax)."""
    xp = jnp if isinstance(x, jax.Array) else np
    lg = jax.scipy.special.gammaln if xp is jnp else special.gammaln
    xf = x.astype(xp.float64 if xp is np else jnp.float32)
    rates = xp.asarray([3.0, 5.0])
    wiggle = xp.asarray([0.0, 0.5])
    return xf * xp.log(rates) - lg(xf + 1) + wiggle * xp.sin(1.3 * xf)


def count_gradient(x):
    xp = jnp if isinstance(x, jax.Array) else np
    dg = jax.scipy.special.digamma if xp is jnp else special.digamma
    xf = x.astype(xp.float64 if xp is np else jnp.float32)
    return xp.log(xp.asarray([3.0, 5.0])) - dg(xf + 1) + xp.asarray([0.0, 0.65]) * xp.cos(1.3 * xf)


def bounded_terms(x):
    """A rough target on ``0 .. 4`` per coordinate (both ends of the window bind)."""
    xp = jnp if isinstance(x, jax.Array) else np
    xf = x.astype(xp.float64 if xp is np else jnp.float32)
    shift = xp.asarray([0.0, 0.7])
    return 0.8 * xf - 0.2 * xf**2 + 0.6 * xp.sin(1.7 * xf + shift)


def bounded_gradient(x):
    xp = jnp if isinstance(x, jax.Array) else np
    xf = x.astype(xp.float64 if xp is np else jnp.float32)
    shift = xp.asarray([0.0, 0.7])
    return 0.8 - 0.4 * xf + 1.02 * xp.cos(1.7 * xf + shift)


BIAS = np.array([-0.4, 0.9])


def binary_terms(b):
    """``h_c b + 0.3 b^2``: on {0, 1} a linear term, whose relaxed gradient (``h_c`` at 0,
    ``h_c + 0.6`` at 1) is not the exact difference, so the MH correction matters."""
    xp = jnp if isinstance(b, jax.Array) else np
    bf = b.astype(xp.float64 if xp is np else jnp.float32)
    return xp.asarray(BIAS) * bf + 0.3 * bf**2


def binary_gradient(b):
    xp = jnp if isinstance(b, jax.Array) else np
    bf = b.astype(xp.float64 if xp is np else jnp.float32)
    return xp.asarray(BIAS) + 0.6 * bf


TARGETS = {
    # name: (count domain, count terms, count gradient, enumerated count range)
    "poisson": (dk.Integer(), count_terms, count_gradient, (0, POISSON_TOP)),
    "poisson-window-3": (dk.Integer(window=3), count_terms, count_gradient, (0, POISSON_TOP)),
    "bounded": (dk.Integer(low=0, high=4, window=2), bounded_terms, bounded_gradient, (0, 4)),
}


def make_target(name, coupling=0.0):
    """``(sites, local_fn, states)`` of a count leaf (2 coordinates) and a binary leaf (2
    coordinates), independent unless ``coupling`` adds ``-coupling * n_0 * n_1`` (which the
    per-coordinate terms then leave out, as a wrongly verified model would)."""
    domain, terms, gradient, (low, high) = TARGETS[name]
    sites = dk.Sites(("n", "b"), (domain, dk.Binary()), (False, False), per_coordinate_mh=True)

    def element_terms(leaves):
        return terms(leaves[0]), binary_terms(leaves[1])

    def local(leaves):
        n, b = leaves
        xp = jnp if isinstance(n, jax.Array) else np
        f = xp.sum(terms(n)) + xp.sum(binary_terms(b))
        g = gradient(n)
        if coupling:
            nf = n.astype(g.dtype)
            f = f - coupling * nf[0] * nf[1]
            g = g - coupling * nf[::-1]
        return f, (g, binary_gradient(b))

    states = [
        (np.asarray(c, np.int64), np.asarray(b, np.int64))
        for c in itertools.product(range(low, high + 1), repeat=2)
        for b in itertools.product((0, 1), repeat=2)
    ]
    return sites, dk.LocalFnWithTerms(local, element_terms), states


def coordinate_kernels(name, step_size, corrected=True):
    """Each coordinate's own MH kernel ``K_c[a, b]`` over its values, from the core's DLP
    logits and per-coordinate log-probabilities (``corrected=False``: the ratio without the
    proposal's reverse/forward term)."""
    domain, terms, gradient, (low, high) = TARGETS[name]
    kernels = []
    for leaf_domain, leaf_terms, leaf_gradient, values in (
        (domain, terms, gradient, np.arange(low, high + 1)),
        (dk.Binary(), binary_terms, binary_gradient, np.arange(2)),
    ):
        for c in range(2):
            k = np.zeros((len(values), len(values)))
            for a, va in enumerate(values):
                x = np.asarray([va, va])
                logits = dk.dlp.dlp_leaf_logits(leaf_domain, x, leaf_gradient(x), False, step_size)
                log_q = dk.dlp.dlp_coordinate_log_prob
                for b_, vb in enumerate(values):
                    y = x.copy()
                    y[c] = vb
                    if vb == va:
                        continue
                    forward = float(log_q(leaf_domain, x, y, logits)[c])
                    if forward == -np.inf:
                        continue
                    back = dk.dlp.dlp_leaf_logits(
                        leaf_domain, y, leaf_gradient(y), False, step_size
                    )
                    reverse = float(log_q(leaf_domain, y, x, back)[c])
                    change = float(leaf_terms(y)[c] - leaf_terms(x)[c])
                    log_ratio = change + (reverse - forward if corrected else 0.0)
                    k[a, b_] = np.exp(forward) * float(
                        dk.metropolis.accept_probability(np.float64(log_ratio))
                    )
                k[a, a] = 1.0 - k[a].sum()
            kernels.append(k)
    return kernels


def exact_pi(states, local_fn):
    f = np.array([float(local_fn(s)[0]) for s in states])
    pi = np.exp(f - f.max())
    return pi / pi.sum()


@pytest.mark.parametrize("name", list(TARGETS))
@pytest.mark.parametrize("step_size", [0.4, 3.0])
def test_the_per_coordinate_kernel_is_exactly_stationary(name, step_size):
    """The kernel over all four coordinates (the product of their MH kernels, in the order
    of the enumerated states) leaves the target invariant to 1e-10; the windows' truncated
    mass is negligible."""
    sites, local_fn, states = make_target(name)
    kernels = coordinate_kernels(name, step_size)
    p = reduce(np.kron, kernels)
    pi = exact_pi(states, local_fn)
    assert np.all(p >= -1e-12)
    assert np.max(np.abs(pi @ p - pi)) < 1e-10
    assert np.allclose(p.sum(axis=1), 1.0)


def _jax_chain(state, local_fn):
    f, local = local_fn(tuple(jnp.asarray(x, jnp.int32) for x in state))
    return dk.ChainState(tuple(jnp.asarray(x, jnp.int32) for x in state), f, tuple(local))


def _one_step_counts(spec, params, sites, local_fn, states, num, seed):
    """``C[a, b]``: ``num`` compiled one-step moves from each state ``a`` (float32), all of
    them in one vectorised call."""
    shapes = spec.noise_shapes(sites, [np.shape(v) for v in states[0]])
    rng = np.random.default_rng(seed)
    starts = [_jax_chain(s, local_fn) for s in states]
    chains = jax.tree.map(lambda *a: jnp.repeat(jnp.stack(a), num, axis=0), *starts)
    total = len(states) * num
    noise = dk.StepNoise(
        tuple(jnp.asarray(rng.uniform(size=(total,) + s), jnp.float32) for s in shapes.uniforms),
        jnp.asarray(rng.uniform(size=total), jnp.float32),
    )
    step = jax.jit(jax.vmap(lambda c, n: spec.step(c, n, params, None, sites, local_fn)[0]))
    moved = step(chains, noise)
    flat = np.concatenate([np.asarray(x).reshape(total, -1) for x in moved.x], axis=1)
    index = {tuple(np.concatenate(s).tolist()): i for i, s in enumerate(states)}
    counts = np.zeros((len(states), len(states)))
    for row, values in enumerate(flat):
        counts[row // num, index[tuple(values.tolist())]] += 1
    return counts


@pytest.fixture(scope="module")
def bounded_counts():
    spec = dk.dlp.DMALA(step_size=2.0, per_coordinate_mh=True)
    sites, local_fn, states = make_target("bounded")
    params = spec.parameters(spec.adapt_init(np.float64(1.0), 0, sites, 4, dk.PYTHON_CONTROL))
    return _one_step_counts(spec, params, sites, local_fn, states, 600, 7)


def test_the_step_moves_by_the_per_coordinate_kernel(bounded_counts):
    """The step itself (compiled, float32) from every state of the bounded target, 600 steps
    each: its moves follow the exact kernel's rows."""
    assert_rows_match(bounded_counts, reduce(np.kron, coordinate_kernels("bounded", 2.0)))


def test_the_step_test_tells_an_uncorrected_ratio_apart(bounded_counts):
    """Power: the same counts fail against the kernel whose ratio leaves out the proposal's
    correction (the rows differ where the gradient is not the exact difference)."""
    wrong = reduce(np.kron, coordinate_kernels("bounded", 2.0, corrected=False))
    with pytest.raises(AssertionError):
        assert_rows_match(bounded_counts, wrong)


def test_a_coupled_target_needs_the_joint_decision():
    """Why the adapters verify independence: on counts coupled by ``-0.15 n_0 n_1`` (terms
    that leave the coupling out, as a wrongly verified model's would), the per-coordinate
    step does not leave the target invariant (one step from the target's own law ends far
    from it), while the joint DMALA step on the same target and proposal does."""
    spec = dk.dlp.DMALA(step_size=2.0, per_coordinate_mh=True)
    sites, local_fn, states = make_target("bounded", coupling=0.15)
    pi = exact_pi(states, local_fn)
    params = spec.parameters(spec.adapt_init(np.float64(1.0), 0, sites, 4, dk.PYTHON_CONTROL))
    counts = _one_step_counts(spec, params, sites, local_fn, states, 400, 3)
    after = pi @ (counts / counts.sum(axis=1, keepdims=True))
    joint = dk.dlp.DMALA(step_size=2.0)
    p, _ = spec_transition_matrix(
        joint, states, local_fn, params, sites._replace(per_coordinate_mh=False)
    )
    assert np.max(np.abs(pi @ p - pi)) < 1e-10
    # 0.093 measured; the same estimate's sampling error alone (multinomial rows of the joint
    # step's exact matrix, or this step on the independent target) gives 0.017 to 0.023
    assert 0.5 * np.abs(after - pi).sum() > 0.06


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_refused_coordinates_keep_the_chain_consistent():
    """A coordinate whose proposal has zero density (a term of ``-inf``) is refused alone:
    the others move, and the new log density and locals are those of the state taken."""
    spec = dk.dlp.DMALA(step_size=50.0, per_coordinate_mh=True)
    domain = dk.Integer(low=0, high=None)

    def terms(leaves):
        x = leaves[0].astype(np.float64)
        # coordinate 0 may not exceed 2; coordinate 1 is Poisson(3)
        own = x * np.log(3.0) - special.gammaln(x + 1)
        own[0] = 0.0 if x[0] <= 2 else -np.inf
        return (own,)

    def local(leaves):
        x = leaves[0].astype(np.float64)
        return np.float64(np.sum(terms(leaves)[0])), (np.log(3.0) - special.digamma(x + 1),)

    local_fn = dk.LocalFnWithTerms(local, terms)
    sites = dk.Sites(("n",), (domain,), (False,), per_coordinate_mh=True)
    params = spec.parameters(spec.adapt_init(np.float64(1.0), 0, sites, 2, dk.PYTHON_CONTROL))
    chain = spec.init((np.asarray([2, 2]),), local_fn)
    # proposal uniforms picking the top of each window (x + 1), then MH uniforms near 0
    noise = dk.StepNoise((np.asarray([0.999, 0.999]), np.asarray([1e-9, 1e-9])), np.float64(0.5))
    new, info = spec.step(chain, noise, params, None, sites, local_fn)
    assert new.x[0].tolist() == [2, 3]
    f, (g,) = local((new.x[0],))
    assert float(new.log_density) == pytest.approx(f)
    assert np.allclose(new.local[0], g)
    assert bool(info.accepted)
    assert float(info.hamming_distance) == 2.0
    assert float(info.accept_prob) == pytest.approx(0.5 * (0.0 + 1.0), abs=0.5)


def test_options_are_checked():
    with pytest.raises(ValueError, match="DULA makes no MH decision"):
        dk.dlp.DULA(per_coordinate_mh=True)
    with pytest.raises((ValueError, TypeError), match="per_coordinate_mh"):
        dk.dlp.DMALA(per_coordinate_mh="yes")
    spec = dk.dlp.DMALA(per_coordinate_mh=True)
    # gradients only: no automatic switch to exact tables, and a model (its plates) needed
    assert spec.per_coordinate and spec.needs_plates and not spec.auto_exact
    assert dk.dlp.DMALA().auto_exact and not dk.dlp.DMALA().needs_plates
    sites, local_fn, states = make_target("bounded")
    chain = spec.init(states[0], local_fn)
    shapes = spec.noise_shapes(sites, [np.shape(v) for v in states[0]])
    assert shapes.uniforms == ((2,), (2,), (2,), (2,))
    noise = dk.StepNoise(tuple(np.full(s, 0.5) for s in shapes.uniforms), np.float64(0.5))
    params = spec.parameters(spec.adapt_init(np.float64(1.0), 0, sites, 4, dk.PYTHON_CONTROL))
    with pytest.raises(TypeError, match="LocalFnWithTerms"):
        spec.step(chain, noise, params, None, sites, local_fn.local_fn)
