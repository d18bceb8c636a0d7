"""Suite-wide settings."""

import importlib.util
import os
import subprocess
import sys
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

# XLA's CPU fusion emitters (the MLIR pipeline that generates fused kernels) take most of the
# remaining compile time of a small loop; the legacy emitters compile the same operations
# faster (measured: tests/numpyro_ext/test_moments.py and test_kernel_protocol.py 115 s
# against 186 s; the default run 1,019 s against 1,206 s). An XLA that does not know the flag
# aborts the process at its first use, so a child process tries it first (before JAX starts
# its backend); the workers of `-n auto` inherit the result in XLA_FLAGS.
FUSION_FLAG = "--xla_cpu_use_fusion_emitters=false"
if jax is not None and "xla_cpu_use_fusion_emitters" not in os.environ["XLA_FLAGS"]:
    probe = subprocess.run(
        [sys.executable, "-c", "import jax.numpy as jnp; jnp.zeros(1).block_until_ready()"],
        env=dict(os.environ, XLA_FLAGS=f"{os.environ['XLA_FLAGS']} {FUSION_FLAG}"),
        capture_output=True,
    )
    if probe.returncode == 0:
        os.environ["XLA_FLAGS"] += f" {FUSION_FLAG}"

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

# The default run distributes whole files over two workers (`--dist loadfile`), in collection
# order: where the heaviest files come last, one worker runs them alone while the other has
# finished. These files (seconds of work each in a default run from cold caches, as in a fresh
# clone: no mypy cache, no inductor cache; 2026-12-02) start first, heaviest first; the rest
# keep their order and fill in behind.
HEAVIEST_FILES = (
    "tests/test_user_models.py",  # 106 s
    "tests/test_bad_inputs.py",  # 69 s (before its Pyro ESH run was shortened)
    "tests/numpyro_ext/test_ebm.py",  # 57 s
    "tests/numpyro_ext/test_kernel_protocol.py",  # 55 s
    "tests/numpyro_ext/test_paired.py",  # 53 s
    "tests/core/test_stationarity.py",  # 36 s
    "tests/test_lint.py",  # 35 s (mypy without its cache)
    "tests/numpyro_ext/test_summed_factor_gibbs.py",  # 31 s
    "tests/numpyro_ext/test_marginal_nuts.py",  # 30 s
    "tests/numpyro_ext/test_esh.py",  # 28 s
    "tests/numpyro_ext/test_moments.py",  # 26 s
    "tests/numpyro_ext/test_block_gibbs.py",  # 26 s
    "tests/numpyro_ext/test_warmup_check.py",  # 26 s
    "tests/pyro_ext/test_torch_compile.py",  # 25 s (inductor without its cache)
)


def pytest_collection_modifyitems(config, items):
    """Order the collected tests so that :data:`HEAVIEST_FILES` come first (stable sort)."""
    rank = {name: i for i, name in enumerate(HEAVIEST_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
