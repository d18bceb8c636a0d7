"""ESS per CPU second of one sampler on one model of the user suite (``user_models.py``) at
its benchmark size, for comparisons on a loaded machine, where the suite's wall times
(``user_suite.py``) measure the load more than the sampler. A tool: ``python -m benchmarks``
does not run it.

One run in this process: 4 sequential chains, as many warmup steps as draws (fixed, no
doubling); the process's CPU time (user + system) of ``MCMC``, compilation included, the
wall time beside it, the smallest ESS over the model's statistics (a constant one left out)
and the largest distance from the exact answer in standard errors. Run one process per
sampler, e.g.::

    python benchmarks/_user_cpu_time.py dawid_skene MarginalNUTS 300
    python benchmarks/_user_cpu_time.py dawid_skene MixedHMC 300

The ratio of two samplers' ``ess_per_cpu_s`` approximates the suite's ratio on a quiet
machine where one process gets one core (XLA's CPU backend may use a second thread: then the
CPU time is above the wall time).
"""

from __future__ import annotations

import resource
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from numpyro.diagnostics import effective_sample_size  # noqa: E402

from benchmarks import user_models as um  # noqa: E402

CHAINS = 4


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    name, kernel, draws = sys.argv[1], sys.argv[2], int(sys.argv[3])
    entry = um.MODELS[name]
    data = entry.data(entry.sizes[1])
    answer = entry.exact(data)
    cpu, wall = cpu_seconds(), time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stats = um.run(entry, kernel, data, num_warmup=draws, num_samples=draws, num_chains=CHAINS)
    cpu, wall = cpu_seconds() - cpu, time.perf_counter() - wall
    ess = np.asarray(effective_sample_size(stats))
    varies = stats.std((0, 1)) > 0
    low = float(ess[varies].min())
    sd = stats.std((0, 1))
    se = np.hypot(np.maximum(sd / np.sqrt(np.maximum(ess, 1.0)), 1e-3), answer.se)
    z = np.abs(stats.mean((0, 1)) - answer.mean) / se
    print(
        f"{name} {kernel} draws {draws} cpu_s {cpu:.1f} wall_s {wall:.1f} min_ess {low:.1f} "
        f"ess_per_cpu_s {low / cpu:.2f} max_z {z.max():.2f}"
    )


if __name__ == "__main__":
    main()
