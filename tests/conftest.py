"""Suite-wide settings."""

import importlib.util
import os
import tempfile

# tests/pyro_ext needs torch (its conftest imports it); a NumPyro-only install, as in the
# newest-stack CI job (scripts/ci_newest.sh), has none. The other Pyro tests skip themselves.
collect_ignore = [] if importlib.util.find_spec("torch") else ["pyro_ext"]

# ArviZ 1.x imports numpyro lazily; imported in that state (arviz, then jax, then
# numpyro.infer: the order test collection can take) numpyro.infer loses its submodule
# attributes and arviz.from_numpyro fails (numpyro_ext/arviz.py repairs it for nx.to_arviz).
# Users import numpyro before arviz; so do the tests.
try:
    import numpyro.infer  # noqa: F401
except ImportError:  # a Pyro-only install
    pass

# Most tests compile small programs and run them briefly: LLVM's optimisation of the compiled
# CPU code costs more than it saves there (measured: 11% off the NumPyro kernel tests). It does
# not change what XLA computes, only how fast the machine code runs; subprocesses inherit it.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
    ).strip()

# The Pyro tests' models have tensors of a few elements: torch's intra-op threads only add
# synchronisation there (measured on a busy 2-core machine: 13 s against 46-194 s for the Pyro
# warmup-check test). A user's large model keeps torch's default.
try:
    import torch

    torch.set_num_threads(1)
except ImportError:  # a NumPyro-only install
    pass

try:
    import jax
except ImportError:  # the Pyro side runs without JAX (tests/test_lint.py checks it)
    jax = None

if jax is not None:
    # Many tests compile the same programs (the same kernel on the same small model, built
    # from fresh closures that jit's in-memory cache does not recognise); a compilation cache
    # keyed by the program itself, fresh for each run, lets them compile once. It keeps the
    # kernels' starts and probes, not their loops: a loop with 20 or more warmup steps holds
    # the warmup's host callbacks, which JAX does not cache (measured: the same three test
    # files took 199 s with it and 201 s without).
    jax.config.update("jax_compilation_cache_dir", tempfile.mkdtemp(prefix="dk-jax-cache-"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
