"""Suite-wide settings."""

import tempfile

try:
    import jax
except ImportError:  # the Pyro side runs without JAX (tests/test_lint.py checks it)
    jax = None

if jax is not None:
    # Many tests compile the same programs (the same kernel on the same small model, built
    # from fresh closures that jit's in-memory cache does not recognise); a compilation cache
    # keyed by the program itself, fresh for each run, lets them compile once.
    jax.config.update("jax_compilation_cache_dir", tempfile.mkdtemp(prefix="dk-jax-cache-"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
