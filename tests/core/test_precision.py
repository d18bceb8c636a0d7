"""Products whose precision matters for correctness are computed at full precision, whatever
the accelerator's default.

On GPUs JAX computes float32 matrix products in TF32 by default (about 10 mantissa bits); the
CPU ignores every precision setting, so a CPU run cannot show the damage directly. Two checks
stand in for it here:

- the traced programs of AB's ``W``, ``D`` and ``(W + D)^{1/2}`` and of the EBM energies ask
  for ``Precision.HIGHEST`` in every ``dot_general``, even under a lowered
  ``jax.default_matmul_precision``;
- under an emulated reduced-precision accelerator (operands of every product that does not ask
  for ``HIGHEST`` rounded to bfloat16), those quantities still agree with float64 references;
  the same emulation visibly damages an ordinary product, so the check has power.

On a machine with CUDA the torch path is checked with TF32 switched on.
"""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.lax import lax as lax_internal

from discrete_kernels import ebm as core_ebm
from discrete_kernels import precise_matmul
from discrete_kernels.samplers import ab_linalg as ab
from numpyro_ext import ebm as nebm

HIGHEST = jax.lax.Precision.HIGHEST


def _is_highest(precision) -> bool:
    if precision is None:
        return False
    if isinstance(precision, (tuple, list)):
        return all(_is_highest(p) for p in precision)
    return jax.lax.Precision(precision) == HIGHEST


def _dot_precisions(jaxpr) -> list:
    """``precision`` of every ``dot_general`` in a jaxpr and the jaxprs nested in it."""
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            found.append(eqn.params["precision"])
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else [value]:
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    found += _dot_precisions(inner)
    return found


@contextlib.contextmanager
def emulated_reduced_precision():
    """Every ``dot_general`` that does not ask for ``HIGHEST`` sees its operands rounded to
    bfloat16 (8 mantissa bits, coarser than a GPU's TF32), as an accelerator's reduced
    default precision would."""
    original = lax_internal.dot_general

    def reduced(lhs, rhs, dimension_numbers, precision=None, *args, **kwargs):
        if not _is_highest(precision):
            lhs = jnp.asarray(lhs).astype(jnp.bfloat16).astype(jnp.asarray(lhs).dtype)
            rhs = jnp.asarray(rhs).astype(jnp.bfloat16).astype(jnp.asarray(rhs).dtype)
        return original(lhs, rhs, dimension_numbers, precision, *args, **kwargs)

    jax.clear_caches()
    lax_internal.dot_general = reduced
    try:
        yield
    finally:
        lax_internal.dot_general = original
        jax.clear_caches()


def _coupling(dim: int = 24, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    raw = rng.normal(size=(dim, dim)) / np.sqrt(dim)
    return ((raw + raw.T) / 2).astype(np.float32)


def _stats(dim: int = 24, seed: int = 1) -> ab.QuadraticStats:
    rng = np.random.default_rng(seed)
    dx = rng.choice([-1.0, 0.0, 1.0], size=(300, dim))
    dg = dx @ _coupling(dim, seed) + 0.1 * rng.normal(size=(300, dim))
    return ab.QuadraticStats(
        jnp.asarray(dx.T @ dx, jnp.float32),
        jnp.asarray(dx.T @ dg, jnp.float32),
        jnp.asarray(300.0, jnp.float32),
    )


def _rbm(seed: int = 2):
    rng = np.random.default_rng(seed)
    params = core_ebm.RBMParams(
        jnp.asarray(rng.normal(size=(30, 12)), jnp.float32),
        jnp.asarray(rng.normal(size=30), jnp.float32),
        jnp.asarray(rng.normal(size=12), jnp.float32),
    )
    visible = jnp.asarray(rng.integers(0, 2, size=(5, 30)), jnp.float32)
    return params, visible


def _rbm_free_energy_f64(params, visible) -> np.ndarray:
    w, b, c = (np.asarray(p, np.float64) for p in params)
    v = np.asarray(visible, np.float64)
    return -(v @ b) - np.logaddexp(0.0, v @ w + c).sum(-1)


PROGRAMS = {
    "AB fit of W": lambda: (ab.fit_coupling, (_stats(),)),
    "AB-shift root": lambda: (lambda w: ab.quadratic_from_coupling(w, "shift"), (_coupling(),)),
    "AB-trace D and root": lambda: (
        lambda w: ab.quadratic_from_coupling(w, "trace"),
        (_coupling(),),
    ),
    "AB-max D and root": lambda: (lambda w: ab.quadratic_from_coupling(w, "max"), (_coupling(),)),
    "RBM free energy": lambda: (core_ebm.rbm_free_energy, _rbm()),
    "RBM visible logits": lambda: (core_ebm.rbm_visible_logits, (_rbm()[0], jnp.ones((3, 12)))),
    "RBM log partition": lambda: (core_ebm.rbm_log_partition, (_rbm()[0],)),
    "Ising energy": lambda: (
        lambda p, x: nebm.IsingEnergy(4)(p, x),
        (nebm.IsingEnergy(4).init(jax.random.PRNGKey(0), 0.5), jnp.ones((3, 16))),
    ),
    "MLP energy": lambda: (
        lambda p, x: nebm.MLPEnergy(16, (8,))(p, x),
        (nebm.MLPEnergy(16, (8,)).init(jax.random.PRNGKey(0)), jnp.ones((3, 16))),
    ),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_every_product_asks_for_highest_precision(name):
    fn, args = PROGRAMS[name]()
    with jax.default_matmul_precision("bfloat16"):
        jaxpr = jax.make_jaxpr(fn)(*args).jaxpr
    precisions = _dot_precisions(jaxpr)
    assert precisions, "no matrix product traced"
    assert all(_is_highest(p) for p in precisions), precisions


#: the emulation stands in for an accelerator on the CPU, which honours no precision setting;
#: on a GPU the real reduced default is there instead (measured on an H100: the emulated plain
#: product off by 4.3e-4 of its scale, under this test's 1e-3 bound, and float32 ``eigh``
#: there leaves ``(W + D)^{1/2}`` squared 3.5e-5 of the scale from ``W + D``, over the CPU's
#: 2e-5 bound); the moment tests of AB on the device are the check there
ON_THE_CPU = pytest.mark.skipif(
    jax.default_backend() != "cpu", reason="emulates a reduced-precision accelerator on the CPU"
)


@ON_THE_CPU
def test_the_emulation_damages_an_ordinary_product():
    """Power of the checks below: a product without ``HIGHEST`` is off by far more than
    their tolerances under the emulation."""
    w = _coupling()
    x = np.random.default_rng(3).normal(size=(5, w.shape[0])).astype(np.float32)
    exact = x.astype(np.float64) @ w.astype(np.float64)
    with emulated_reduced_precision():
        plain = np.asarray(jnp.asarray(x) @ jnp.asarray(w))
        precise = np.asarray(precise_matmul(jnp.asarray(x), jnp.asarray(w)))
    scale = np.abs(exact).max()
    assert np.abs(plain - exact).max() > 1e-3 * scale
    assert np.abs(precise - exact).max() < 1e-5 * scale


@ON_THE_CPU
@pytest.mark.parametrize("variant", ["shift", "trace", "max"])
def test_ab_root_squares_to_w_plus_d_under_reduced_precision(variant):
    """``(W + D)^{1/2}`` squared gives back ``W + D``, which is PSD, to float32 accuracy on a
    reduced-precision accelerator (the GPU failure of ``test_ising_3x3_moments[trace]``:
    eigenvalue -2.8e-4 with TF32)."""
    w = _coupling()
    with emulated_reduced_precision():
        quadratic = ab.quadratic_from_coupling(jnp.asarray(w), variant)
        fitted = ab.fit_coupling(_stats())
    root = np.asarray(quadratic.root, np.float64)
    target = w.astype(np.float64) + np.diag(np.asarray(quadratic.diag, np.float64))
    scale = np.abs(w).max()
    assert np.abs(root @ root - target).max() < 2e-5 * scale
    assert np.linalg.eigvalsh(root @ root)[0] > -2e-5 * scale
    assert np.all(np.asarray(quadratic.diag) >= 0)
    with jax.default_matmul_precision("highest"):
        reference = np.asarray(ab.fit_coupling(_stats()), np.float64)
    assert np.abs(np.asarray(fitted) - reference).max() < 1e-4 * np.abs(reference).max()


@ON_THE_CPU
def test_ebm_energies_under_reduced_precision():
    params, visible = _rbm()
    ising = nebm.IsingEnergy(4)
    ising_params = ising.init(jax.random.PRNGKey(1), 0.5)
    x = jnp.asarray(np.random.default_rng(4).integers(0, 2, size=(6, 16)), jnp.float32)
    with emulated_reduced_precision():
        free_energy = np.asarray(core_ebm.rbm_free_energy(params, visible))
        ising_energy = np.asarray(ising(ising_params, x))
    exact = _rbm_free_energy_f64(params, visible)
    np.testing.assert_allclose(free_energy, exact, rtol=1e-5, atol=1e-4)
    mask = core_ebm.lattice_mask(4).astype(np.float64)
    j = np.asarray(ising_params["couplings"], np.float64) * mask
    j = (j + j.T) / 2
    s = 2.0 * np.asarray(x, np.float64) - 1.0
    exact_ising = -(0.5 * np.einsum("ni,ij,nj->n", s, j, s) + s @ np.asarray(ising_params["field"]))
    np.testing.assert_allclose(ising_energy, exact_ising, rtol=1e-5, atol=1e-4)


try:  # a module-level importorskip would skip every test above too (no torch: newest-stack job)
    import torch
except ImportError:
    torch = None


@pytest.mark.skipif(torch is None or not torch.cuda.is_available(), reason="no torch with CUDA")
def test_torch_products_stay_precise_with_tf32_enabled():
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        a = torch.randn(256, 256, device="cuda")
        b = torch.randn(256, 256, device="cuda")
        exact = a.double() @ b.double()
        scale = exact.abs().max()
        assert (a @ b - exact).abs().max() > 1e-4 * scale  # TF32 is on
        assert (precise_matmul(a, b) - exact).abs().max() < 1e-5 * scale
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
