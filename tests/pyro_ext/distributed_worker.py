"""One process of the two-process torch tests (``tests/pyro_ext/test_distributed.py``):
``python -m tests.pyro_ext.distributed_worker PROCESS_ID NUM_PROCESSES PORT [MODE]``.

Modes: ``run`` (default) runs 3 DMALA chains over the processes and trains an RBM
data-parallel by CD, PCD with five samplers and UCD, printing the ArviZ data and the trained
weights as one JSON line; ``die`` makes
process 1 exit right after joining (the others must stop with an error)."""

from __future__ import annotations

import json
import os
import sys


def work(process_id: int, num_processes: int, port: int, mode: str = "run") -> dict:
    import torch

    torch.set_num_threads(1)
    from pyro_ext import distributed

    if num_processes > 1:
        distributed.initialize(
            "gloo",
            timeout_s=30,
            init_method=f"tcp://127.0.0.1:{port}",
            rank=process_id,
            world_size=num_processes,
        )
    if mode == "die":
        if process_id == 1:
            os._exit(3)
        distributed._all_gather(process_id)  # waits for the process that died
    import pyro
    import pyro.distributions as dist
    from pyro.infer import MCMC

    import pyro_ext as px
    from discrete_kernels.arviz_export import group_dataset
    from discrete_kernels.ebm import bars_and_stripes
    from pyro_ext import ebm

    def model():
        x = pyro.sample("x", dist.Bernoulli(0.3 * torch.ones(6)).to_event(1))
        pyro.factor("coupling", 0.5 * (x[:-1] * x[1:]).sum())

    def make_mcmc():
        return MCMC(px.DMALA(model), num_samples=30, warmup_steps=20, disable_progbar=True)

    idata = distributed.run_chains(make_mcmc, 3, 7)
    posterior = group_dataset(idata, "posterior")
    stats = group_dataset(idata, "sample_stats")
    data = torch.as_tensor(bars_and_stripes(), dtype=torch.float32)
    steps = int(os.environ.get("DK_STEPS", "4"))  # ACS uses its re-tuned cycle from step 2
    methods = {
        "pcd_block_gibbs": ebm.PCD(steps=2, num_chains=8),
        "pcd_dmala": ebm.PCD(sampler=px.DMALA(step_size=0.3), steps=2, num_chains=8),
        "pcd_acs": ebm.PCD(sampler=px.ACS(), steps=2, num_chains=8),
        "pcd_site_gibbs": ebm.PCD(sampler=ebm.SiteGibbs(), steps=3, num_chains=8),
        # its colouring is probed in each process from process 0's parameters
        "pcd_plate_gibbs": ebm.PCD(sampler=px.PlateGibbs(), steps=2, num_chains=8),
        "cd": ebm.CD(k=1),
        "ucd": ebm.UCD(k=1),
    }
    weights, gaps = {}, {}
    for name, method in methods.items():
        torch.manual_seed(0)
        rbm = ebm.RBM(16, 8, scale=1.0)  # sharp: ACS tunes a different cycle per chain
        result = distributed.train(
            rbm, data, optimizer=torch.optim.SGD(rbm.parameters(), lr=0.1), method=method,
            num_steps=1 if name == "ucd" else steps, batch_size=8, seed=3, progress_bar=False,
        )  # fmt: skip
        weights[name] = rbm.weights.detach().numpy().tolist()
        gaps[name] = result.history["energy_gap"].tolist()
    return {
        "processes": num_processes,
        "chain_coords": [int(c) for c in posterior["x"].coords["chain"].values],
        "draws": posterior["x"].values.tolist(),
        "accept": stats["acceptance_rate"].values.tolist(),
        "weights": weights,
        "gap": gaps,
    }


if __name__ == "__main__":
    process_id, num_processes, port = (int(a) for a in sys.argv[1:4])
    print(json.dumps(work(process_id, num_processes, port, *sys.argv[4:])))
