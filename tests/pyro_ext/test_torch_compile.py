"""``torch_compile=True`` of the Pyro kernels: each step is one ``torch.compile`` program that
makes the eager step's moves from the same random numbers (on a model, through a ``make_fx``
trace of its log density; on a potential as it is), and what cannot be compiled is refused with
the option's name."""

import pickle

import numpy as np
import pyro
import pytest
import torch
from pyro.infer import MCMC, NUTS

import pyro_ext as px

from .test_jit_compile import _draws, branching_model, categorical_model
from .test_plate_gibbs import discrete_plate_model
from .test_pyro_kernels import ising_model, mixed_model


@pytest.fixture
def fresh_compiler():
    """No program compiled by another test is reused."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _assert_same_draws(eager: dict, compiled: dict) -> None:
    assert eager.keys() == compiled.keys()
    for name in eager:
        np.testing.assert_array_equal(compiled[name], eager[name])


@pytest.mark.parametrize(
    "make",
    [
        lambda compiled: px.DMALA(ising_model, torch_compile=compiled),
        pytest.param(
            lambda compiled: px.GWG(ising_model, torch_compile=compiled), marks=pytest.mark.slow
        ),
        pytest.param(
            lambda compiled: px.AB(ising_model, step_size=0.5, adapt=False, torch_compile=compiled),
            marks=pytest.mark.slow,
        ),
        pytest.param(
            lambda compiled: px.DMALA(categorical_model, torch_compile=compiled),
            marks=pytest.mark.slow,
        ),
        pytest.param(
            lambda compiled: px.PlateGibbs(discrete_plate_model, torch_compile=compiled),
            marks=pytest.mark.slow,
        ),
    ],
    ids=["DMALA", "GWG", "AB", "DMALA-categorical", "PlateGibbs"],
)
def test_compiled_kernel_gives_the_eager_draws(make, fresh_compiler):
    """Through ``pyro.infer.MCMC``, warmup adaptation included (the step size is an input of
    the program, so adapting it compiles nothing new); the kernel still pickles. Fails when
    the compiled gradient is off (checked by hand with its sign flipped in
    ``pyro_ext._target._functional_gradients``)."""
    eager = _draws(make(False), 60)
    kernel = make(True)
    compiled = _draws(kernel, 60)
    _assert_same_draws(eager, compiled)
    # Pyro's worker processes receive the kernel pickled: the program stays behind (and so
    # does the setup, which a run's remembered noise shapes held: a used kernel did not pickle)
    used_eagerly = make(False)
    _draws(used_eagerly, 2)
    for used in (kernel, used_eagerly):
        copy = pickle.loads(pickle.dumps(used))
        assert copy._built_step is None and copy._torch_compile == (used is kernel)


@pytest.mark.slow
def test_compiled_potential_and_gibbs_block_give_the_eager_draws(fresh_compiler):
    """A potential compiled as it is; a block of ``px.Gibbs`` whose conditioning (NUTS's
    ``mu``) changes every sweep: an input of the trace and of the program."""
    weights = torch.tensor([[0.0, 0.5, -0.2], [0.5, 0.0, 0.3], [-0.2, 0.3, 0.0]])

    def potential(values):
        s = 2.0 * values["x"] - 1.0
        return -0.5 * s @ weights @ s

    def on_potential(compiled):
        kernel = px.DMALA(potential_fn=potential, domain=px.Binary(), torch_compile=compiled)
        pyro.set_rng_seed(0)
        mcmc = MCMC(
            kernel,
            num_samples=60,
            warmup_steps=20,
            initial_params={"x": torch.zeros(3)},
            disable_progbar=True,
        )
        mcmc.run()
        return {k: v.numpy() for k, v in mcmc.get_samples().items()}

    _assert_same_draws(on_potential(False), on_potential(True))

    y = torch.tensor([0.3, 1.1, 0.8])

    def gibbs(compiled):
        return px.Gibbs(
            [
                (px.DMALA(mixed_model, torch_compile=compiled), px.discrete_sites),
                (NUTS(mixed_model), None),
            ]
        )

    # a warmup long enough for NUTS's step size, as in test_jit_compile
    eager = _draws(gibbs(False), 40, y, warmup=100)
    assert np.unique(eager["mu"]).size > 10  # the conditioning did change
    _assert_same_draws(eager, _draws(gibbs(True), 40, y, warmup=100))


def test_value_dependent_model_is_refused():
    kernel = px.DMALA(branching_model, torch_compile=True)
    kernel.initial_params = {"x": torch.zeros(20)}
    with pytest.raises(ValueError, match=r"DMALA: torch_compile=True: the model cannot be traced"):
        kernel.setup(0)


def test_torch_compile_must_be_a_bool():
    with pytest.raises(ValueError, match="DMALA: torch_compile must be True or False, got 'y"):
        px.DMALA(ising_model, torch_compile="yes")


def test_a_compiler_failure_names_the_way_out(monkeypatch):
    def broken_compiler(fn, **kwargs):
        def run(*args):
            raise RuntimeError("no C++ compiler found\nlong traceback")

        return run

    monkeypatch.setattr(torch, "compile", broken_compiler)
    kernel = px.DMALA(ising_model, torch_compile=True)
    kernel.setup(0)
    with pytest.raises(
        RuntimeError,
        match=r"DMALA: torch_compile=True: torch.compile failed \(RuntimeError: no C\+\+ compiler "
        r"found\); pass torch_compile=False",
    ):
        kernel.sample(dict(kernel.initial_params))


def test_every_compiled_program_has_a_code_object_of_its_own(fresh_compiler):
    """Dynamo keeps at most ``recompile_limit`` versions per code object, and every kernel's
    step is a closure of the same code: each compiled function gets its own copy, so a tenth
    closure still compiles (without the copy it runs eagerly; checked by hand)."""
    from pyro_ext._torch_compile import _with_own_code, compiled

    def closure(k):
        def add(x):
            return x + k

        return add

    first, second = closure(1.0), closure(2.0)
    assert first.__code__ is second.__code__
    own = _with_own_code(first)
    assert own.__code__ is not first.__code__ and own(torch.ones(2)).tolist() == [2.0, 2.0]
    limit = 2  # PyTorch's default is 8: fewer programs to compile here
    with torch._dynamo.config.patch(recompile_limit=limit):
        programs = [compiled(closure(float(k)), "test") for k in range(limit + 2)]
        before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        for k, program in enumerate(programs):
            assert program(torch.zeros(2)).tolist() == [float(k)] * 2
        assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - before == limit + 2
