"""Benchmarks of discrete-kernels: ``python -m benchmarks`` runs them all (see ``__main__``)."""
