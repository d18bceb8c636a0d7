"""``jit_compile=True``: the log density through ``torch.jit.trace`` gives the very draws of
the eager kernel (alone, in potential mode and as a block of ``px.Gibbs`` whose conditioning
changes every sweep), and a model whose operations depend on its values is refused."""

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import MCMC, NUTS

import discrete_kernels as dk
import pyro_ext as px
from pyro_ext._jit import TracedFunction

from .test_plate_gibbs import Y, discrete_plate_model, hmc, plate_model
from .test_pyro_kernels import ising_model, mixed_model


def _draws(kernel, num_samples, *args, warmup=20, seed=0):
    pyro.set_rng_seed(seed)
    mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup, disable_progbar=True)
    mcmc.run(*args)
    return {k: v.detach().cpu().numpy() for k, v in mcmc.get_samples().items()}


def categorical_model():
    with pyro.plate("items", 4):
        c = pyro.sample("c", dist.Categorical(torch.tensor([0.2, 0.3, 0.5])))
    pyro.factor("pairs", 0.4 * (c[:-1] == c[1:]).float().sum())


@pytest.mark.parametrize(
    "make",
    [
        lambda jit: px.DMALA(ising_model, jit_compile=jit),
        lambda jit: px.GWG(ising_model, jit_compile=jit),
        lambda jit: px.AB(ising_model, step_size=0.5, adapt=False, jit_compile=jit),
        lambda jit: px.DMALA(categorical_model, jit_compile=jit),
    ],
    ids=["DMALA", "GWG", "AB", "DMALA-categorical"],
)
def test_traced_kernel_gives_the_eager_draws(make):
    eager = _draws(make(False), 60)
    traced = _draws(make(True), 60)
    assert eager.keys() == traced.keys()
    for name in eager:
        np.testing.assert_array_equal(traced[name], eager[name])


def test_traced_potential_gives_the_eager_draws():
    weights = torch.tensor([[0.0, 0.5, -0.2], [0.5, 0.0, 0.3], [-0.2, 0.3, 0.0]])

    def potential(values):
        s = 2.0 * values["x"] - 1.0
        return -(s @ weights @ s)

    def kernel(jit):
        k = px.DMALA(potential_fn=potential, domain=px.Binary(), jit_compile=jit)
        k.initial_params = {"x": torch.zeros(3)}
        return k

    np.testing.assert_array_equal(_draws(kernel(True), 80)["x"], _draws(kernel(False), 80)["x"])


def test_traced_block_of_gibbs_sees_each_sweeps_conditioning():
    """The other block's value (NUTS's ``mu``) changes every sweep: it is an input of the
    trace, so the traced DMALA block draws what the eager one draws."""
    y = torch.tensor([0.3, 1.1, 0.8])

    def kernel(jit):
        return px.Gibbs(
            [
                (px.DMALA(mixed_model, jit_compile=jit), px.discrete_sites),
                (NUTS(mixed_model), None),
            ]
        )

    # a warmup long enough for NUTS's step size (20 steps left it frozen on CUDA's stream)
    eager = _draws(kernel(False), 40, y, warmup=100)
    traced = _draws(kernel(True), 40, y, warmup=100)
    assert np.unique(eager["mu"]).size > 10  # the conditioning did change
    for name in ("z", "mu"):
        np.testing.assert_allclose(traced[name], eager[name], rtol=1e-5, atol=1e-6)


def branching_model():
    x = pyro.sample("x", dist.Bernoulli(0.5).expand([20]).to_event(1))
    if x.sum() > 0:  # Python control flow on a value: a trace keeps one branch
        pyro.factor("crowd", 0.5 * x.sum())


def test_value_dependent_model_is_refused():
    kernel = px.DMALA(branching_model, jit_compile=True)
    kernel.initial_params = {"x": torch.zeros(20)}  # a prior draw of 20 bits is not all 0
    with pytest.raises(
        ValueError, match=r"DMALA: jit_compile=True: at a prior draw the trace gives"
    ):
        kernel.setup(0)
    # without the option the same model runs
    kernel = px.DMALA(branching_model)
    kernel.initial_params = {"x": torch.zeros(20)}
    kernel.setup(0)


def test_subsampling_model_is_refused():
    data = torch.randn(10)

    def model():
        x = pyro.sample("x", dist.Bernoulli(0.5))
        with pyro.plate("rows", 10, subsample_size=4) as rows:
            pyro.sample("y", dist.Normal(x, 1.0), obs=data[rows])

    kernel = px.DULA(model, jit_compile=True)
    with pytest.raises(ValueError, match="jit_compile=True cannot trace a model that subsamples"):
        kernel.setup(0)


def test_jit_compile_must_be_a_bool():
    with pytest.raises(ValueError, match="DMALA: jit_compile must be True or False"):
        px.DMALA(ising_model, jit_compile="yes")


def test_traced_nuts_block_is_refused():
    """Pyro's NUTS(jit_compile=True) traces its potential with its own sites as the only
    inputs: inside Gibbs it would keep the first sweep's discrete values (measured: posterior
    mean of mu -0.63 against 0.42)."""
    kernel = px.Gibbs(
        [(px.DMALA(mixed_model), px.discrete_sites), (NUTS(mixed_model, jit_compile=True), None)]
    )
    with pytest.raises(ValueError, match=r"Gibbs: NUTS\(jit_compile=True\) would keep"):
        kernel.setup(0, torch.tensor([0.3, 1.1, 0.8]))


@pytest.mark.parametrize("discrete", ["PlateGibbs", "DMALA-exact"])
def test_traced_plate_tables_give_the_eager_draws(discrete):
    """PlateGibbs's tables (and DMALA's exact table of a plate site) come from traced
    per-coordinate terms; inside Gibbs next to HMC their conditioning changes every sweep."""
    y = torch.tensor(Y)

    def kernel(jit):
        block = (
            px.PlateGibbs(plate_model, jit_compile=jit)
            if discrete == "PlateGibbs"
            else px.DMALA(plate_model, exact_sites=["z"], jit_compile=jit)
        )
        return px.Gibbs([(block, px.discrete_sites), (hmc(plate_model), None)]), block

    (eager_kernel, _), (traced_kernel, block) = kernel(False), kernel(True)
    eager, traced = _draws(eager_kernel, 60, y), _draws(traced_kernel, 60, y)
    assert [s.mode for s in block._setup.leaves] == [dk.sites.PLATE]
    assert isinstance(block._setup.element_terms[0], TracedFunction)
    for name in ("z", "mu"):
        np.testing.assert_allclose(traced[name], eager[name], rtol=1e-5, atol=1e-6)


def test_traced_discrete_plate_model_gives_the_eager_draws():
    def kernel(jit):
        return px.PlateGibbs(discrete_plate_model, jit_compile=jit)

    np.testing.assert_array_equal(_draws(kernel(True), 80)["c"], _draws(kernel(False), 80)["c"])


def test_a_traced_kernel_pickles_and_traces_again():
    """Pyro's worker processes receive the kernel pickled: the traces stay behind (setup
    rebuilds them), the option travels."""
    import pickle

    copies = {}
    for jit in (False, True):
        kernel = px.DMALA(ising_model, jit_compile=jit)
        pyro.set_rng_seed(0)
        kernel.setup(0)
        copies[jit] = pickle.loads(pickle.dumps(kernel))
    copies[True].setup(0)
    assert isinstance(copies[True]._setup.log_density, TracedFunction)
    np.testing.assert_array_equal(_draws(copies[True], 30)["x"], _draws(copies[False], 30)["x"])
