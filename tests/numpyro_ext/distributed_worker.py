"""One process of the two-process JAX tests (``tests/numpyro_ext/test_distributed.py``):
``python -m tests.numpyro_ext.distributed_worker PROCESS_ID NUM_PROCESSES PORT [MODE]``.

Modes: ``run`` (default) samples 4 vectorised DMALA chains and trains an RBM, printing the
gathered draws, the ArviZ data and the trained weights as one JSON line; ``die`` makes
process 1 exit right after joining (the others must stop with an error)."""

from __future__ import annotations

import json
import os
import sys


def work(process_id: int, num_processes: int, port: int, mode: str = "run") -> dict:
    import jax

    from numpyro_ext import distributed

    if num_processes > 1:
        distributed.initialize(
            f"127.0.0.1:{port}", num_processes, process_id, timeout_s=60, heartbeat_timeout_s=5
        )
    if mode == "die" and process_id == 1:
        os._exit(3)
    import numpy as np
    import numpyro
    import numpyro.distributions as dist
    import optax
    from numpyro.infer import MCMC

    import numpyro_ext as nx
    from discrete_kernels.arviz_export import group_dataset
    from discrete_kernels.ebm import bars_and_stripes
    from numpyro_ext import ebm

    def model():
        x = numpyro.sample("x", dist.Bernoulli(0.3).expand([6]))
        numpyro.factor("coupling", 0.5 * (x[:-1] * x[1:]).sum())

    mcmc = MCMC(nx.DMALA(model), num_warmup=20, num_samples=30, num_chains=4,
                chain_method="vectorized", progress_bar=False)  # fmt: skip
    mcmc.run(jax.random.key(0))
    devices = len(jax.tree.leaves(mcmc.last_state)[0].sharding.device_set)
    idata = distributed.to_arviz(mcmc)
    posterior = group_dataset(idata, "posterior")
    stats = group_dataset(idata, "sample_stats")
    data, rbm = bars_and_stripes(), ebm.RBM(16, 8)
    result = ebm.train(rbm, rbm.init(jax.random.key(0)), data, optimizer=optax.adam(0.01),
                       method=ebm.PCD(steps=1), num_steps=10, batch_size=40,
                       rng_key=jax.random.key(1), progress_bar=False)  # fmt: skip
    buffer = distributed.gather(result.method_state)
    return {
        "processes": jax.process_count(),
        "chain_devices": devices,
        "draws": np.asarray(distributed.gather(mcmc.get_samples(True))["x"]).tolist(),
        "chain_coords": [int(c) for c in posterior["x"].coords["chain"].values],
        "arviz_x": posterior["x"].values.tolist(),
        "accept": stats["acceptance_rate"].values.tolist(),
        "weights": np.asarray(result.params.weights).tolist(),
        "gap": np.asarray(result.history["energy_gap"]).tolist(),
        "buffer": np.asarray(buffer).tolist(),
    }


if __name__ == "__main__":
    process_id, num_processes, port = (int(a) for a in sys.argv[1:4])
    print(json.dumps(work(process_id, num_processes, port, *sys.argv[4:])))
