"""PlateGibbs on chains whose terms the model gives one by one (an HMM's transitions as an
array of terms, an HMM written with ``scan``): the terms each coordinate changes show a chain,
and the site is drawn whole from a pair table built from its terms at ``3 S^2`` states. The
table equals the one from ``(N - 1) S^2`` evaluations of the model (an impossible transition
included), the whole-chain move's exact transition matrix is stationary and from every state
draws the posterior itself; with the pair terms left out of the layout the table is another
one, the MH step still keeps the move stationary and the same proposal always accepted is not
(the power). ``blocks=`` keeps the colour sweep. In MCMC: the scan HMM's marginals and the
chain next to NUTS in test_block_gibbs run through this path."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.contrib.control_flow import scan

import discrete_kernels as dk
import numpyro_ext as nx
from discrete_kernels.chains import ChainTerms, pair_substitutions

from .test_block_gibbs import HMM_Y, driver_setup, hmm_model
from .test_summed_factor_gibbs import (
    CHAIN_PAIR,
    CHAIN_PRIOR,
    chain_posterior,
    chain_transition_matrix,
    check_stationary_only_with_the_mh_step,
)


def term_chain_model():
    """test_summed_factor_gibbs's chain with its pair terms given to ``factor`` unsummed."""
    with numpyro.plate("steps", len(CHAIN_PAIR) + 1):
        c = numpyro.sample("c", dist.Categorical(jnp.asarray(CHAIN_PRIOR)))
    numpyro.factor("pairs", jnp.asarray(CHAIN_PAIR)[c[:-1], c[1:]])


# a transition that never happens (state 2 never follows state 0): -inf in the pair tables
SPARSE_TRANSITION = np.array([[0.7, 0.3, 0.0], [0.2, 0.5, 0.3], [0.1, 0.3, 0.6]])


def sparse_scan_hmm(y=HMM_Y):
    def step(previous, y_t):
        z = numpyro.sample("z", dist.Categorical(jnp.asarray(SPARSE_TRANSITION)[previous]))
        numpyro.sample("y", dist.Normal(jnp.asarray([-1.5, 0.0, 1.5])[z], 1.0), obs=y_t)
        return z, None

    scan(step, jnp.array(0), jnp.asarray(y))


def check_pair_tables(kernel, args, states) -> None:
    setup, local_fn = driver_setup(kernel, *args)
    leaf = setup.leaves[0]
    assert leaf.mode == dk.sites.CHAIN
    assert isinstance(setup.term_owners[leaf.name], ChainTerms)
    log_density = jax.jit(lambda v: setup.log_density_fn(args, {})((v,)))
    evaluate = jax.jit(lambda v: local_fn((v,)))
    s = leaf.domain.num_values
    for x in states:
        x = jnp.asarray(x, jnp.int32)
        f, (table,) = evaluate(x)
        full = np.asarray(jax.vmap(log_density)(pair_substitutions(leaf.domain, x)), np.float64)
        full = full.reshape(-1, s, s)
        table = np.asarray(table, np.float64)
        np.testing.assert_array_equal(np.isinf(table), np.isinf(full))
        finite = np.isfinite(full)
        np.testing.assert_allclose(table[finite], full[finite], rtol=1e-5, atol=1e-4)
        assert abs(float(f) - float(log_density(x))) < 1e-4


def test_a_chain_given_by_its_terms_gets_a_pair_table_equal_to_full_evaluations():
    check_pair_tables(nx.PlateGibbs(term_chain_model), (), [[0, 1, 2, 0], [2, 2, 1, 0]])
    rng = np.random.default_rng(0)
    states = [rng.integers(0, 3, len(HMM_Y)) for _ in range(3)]
    check_pair_tables(nx.PlateGibbs(hmm_model), (HMM_Y,), states)
    # an impossible transition next to the current state and inside the table
    sparse = [[0, 1, 2, 2, 1, 0], [1, 1, 1, 1, 1, 1], [0, 0, 1, 2, 2, 2]]
    check_pair_tables(nx.PlateGibbs(sparse_scan_hmm), (HMM_Y,), sparse)


def test_the_whole_chain_move_from_terms_is_exactly_stationary_and_draws_the_posterior():
    kernel = nx.PlateGibbs(term_chain_model)
    setup, local_fn = driver_setup(kernel)
    p = chain_transition_matrix(kernel, setup, local_fn)
    pi = chain_posterior()
    assert np.max(np.abs(pi @ p - pi)) < 1e-6
    assert np.max(np.abs(p - pi[None, :])) < 1e-4  # from every state, an independent draw


def test_a_layout_without_its_pair_terms_changes_the_table_and_needs_the_mh_step(monkeypatch):
    """The power of the two tests above."""
    from numpyro_ext import _plate_setup

    exact = _plate_setup.chain_term_layout

    def without_pairs(dependence):
        layout = exact(dependence)
        return ChainTerms(layout.singles, np.full_like(layout.pairs, dependence.shape[1]))

    monkeypatch.setattr(_plate_setup, "chain_term_layout", without_pairs)
    with pytest.raises(AssertionError):
        check_pair_tables(nx.PlateGibbs(term_chain_model), (), [[0, 1, 2, 0]])
    check_stationary_only_with_the_mh_step(term_chain_model)


def test_blocks_keeps_the_colour_sweep_of_a_term_chain():
    setup, _ = driver_setup(nx.PlateGibbs(term_chain_model, blocks={"c": np.array([0, 1, 0, 1])}))
    assert setup.leaves[0].mode == dk.sites.PLATE
    assert setup.leaves[0].num_colours == 2


def test_the_scan_hmm_and_the_chain_next_to_nuts_are_drawn_whole():
    """The MCMC tests of test_block_gibbs (the scan HMM's exact marginals, the chain next to
    NUTS) run through the whole-chain move."""
    from .test_block_gibbs import chain_mu_model

    setup, _ = driver_setup(nx.PlateGibbs(hmm_model), HMM_Y)
    assert setup.leaves[0].mode == dk.sites.CHAIN
    given_mu = numpyro.handlers.condition(chain_mu_model, {"mu": 0.3})
    setup, _ = driver_setup(nx.PlateGibbs(given_mu))
    assert setup.leaves[0].mode == dk.sites.CHAIN
