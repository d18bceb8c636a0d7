"""MarginalNUTS: the model with its plate discrete site summed out equals the enumerated sum
over every configuration of the site, its conditional is the enumerated one and its draws
follow it, a site whose coordinates interact is summed over its joint values (refused past
``max_joint_values``), and (slow) a run matches the exact posterior. The enumeration tests'
power: they fail when the sum is replaced by a maximum (shown once by editing
:func:`discrete_kernels.sites.summed_out_log_density`); the joint tests fail when the joint
draw is tempered (``0.8 * logits``, shown once)."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax.scipy.special import logsumexp
from numpyro import handlers
from numpyro.infer import MCMC
from numpyro.infer.util import log_density, potential_energy

import numpyro_ext as nx

from ..mc import assert_mc_close, plate_model_exact

ITEMS, CLASSES, ANNOTATORS = 3, 3, 2
LABELS = np.array([[0, 2, 1], [0, 1, 1]])  # (annotators, items)
W = np.array([1.0, -2.0, 1.5])
Y = np.array([0.8, -1.4, 2.1])
PRIOR = 0.4


def annotation_model(labels):
    """Dawid-Skene with nested plates: a class per item, a confusion matrix per annotator (in
    logits: Normal priors, cheap to draw at setup)."""
    prevalence = numpyro.sample("prevalence", dist.Normal(0.0, 1.0).expand([CLASSES]).to_event(1))
    with numpyro.plate("annotators", ANNOTATORS, dim=-2):
        with numpyro.plate("rows", CLASSES, dim=-1):
            confusion = numpyro.sample(
                "confusion", dist.Normal(0.0, 1.0).expand([CLASSES]).to_event(1)
            )
    with numpyro.plate("items", ITEMS, dim=-1):
        c = numpyro.sample("c", dist.Categorical(logits=prevalence))
        with numpyro.plate("annotators", ANNOTATORS, dim=-2):
            logits = confusion[jnp.arange(ANNOTATORS)[:, None], c]
            numpyro.sample("label", dist.Categorical(logits=logits), obs=labels)


def plate_model(y):
    """mu ~ N(0, 1); per row z_i ~ Bernoulli(0.4), y_i ~ N(mu + w_i z_i, 1)."""
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    with numpyro.plate("rows", 3):
        z = numpyro.sample("z", dist.Bernoulli(PRIOR))
        numpyro.sample("y", dist.Normal(mu + jnp.asarray(W) * z, 1.0), obs=y)


def coupled_model(y):
    """The plate model with a factor over pairs of neighbouring rows: z not independent."""
    plate_model(y)
    z = numpyro.sample("w", dist.Bernoulli(0.5).expand([3]).to_event(0))
    numpyro.factor("pairs", 0.7 * jnp.sum(z[1:] * z[:-1]))


def _continuous_draws(seed: int) -> list[dict]:
    key = jax.random.key(seed)
    out = []
    for k in jax.random.split(key, 2):
        a, b = jax.random.split(k)
        prevalence = jax.random.normal(a, (CLASSES,))
        confusion = 2.0 * jax.random.normal(b, (ANNOTATORS, CLASSES, CLASSES))
        out.append({"prevalence": prevalence, "confusion": confusion})
    return out


def _enumerated(values: dict) -> tuple[np.ndarray, np.ndarray]:
    """Every configuration of c and its joint log density with ``values``."""
    configs = np.array(list(itertools.product(range(CLASSES), repeat=ITEMS)))
    return configs, np.asarray(_joint(jnp.asarray(configs), values), np.float64)


@jax.jit
@jax.vmap
def _joint_one(c: jax.Array, values: dict) -> jax.Array:
    return log_density(annotation_model, (LABELS,), {}, {**values, "c": c})[0]


def _joint(configs: jax.Array, values: dict) -> jax.Array:
    batch = jax.tree.map(lambda v: jnp.broadcast_to(v, (len(configs), *v.shape)), values)
    return _joint_one(configs, batch)


def test_the_summed_model_equals_the_enumerated_sum_and_its_conditional_the_enumerated_one():
    kernel = nx.MarginalNUTS(annotation_model)
    summed = kernel.prepare(jax.random.key(0), (LABELS,))
    marginal_at = jax.jit(lambda values: log_density(summed, (LABELS,), {}, values)[0])
    logits_at = jax.jit(lambda values: kernel.conditional_logits(values, (LABELS,), {}))
    for values in _continuous_draws(1):
        configs, joint = _enumerated(values)
        marginal = float(marginal_at(values))
        np.testing.assert_allclose(marginal, float(logsumexp(joint)), rtol=1e-5, atol=1e-4)
        weights = np.exp(joint - logsumexp(joint))
        exact = np.stack(
            [[weights[configs[:, i] == v].sum() for v in range(CLASSES)] for i in range(ITEMS)]
        )
        logits = logits_at(values)
        np.testing.assert_allclose(jax.nn.softmax(logits, -1), exact, atol=1e-5)


@pytest.mark.slow
def test_draws_follow_the_exact_conditional():
    kernel = nx.MarginalNUTS(plate_model)
    kernel.prepare(jax.random.key(0), (Y,))
    mu = 0.3
    # z_i | mu: prior times the row's likelihood, by hand
    on = np.log(PRIOR) - 0.5 * (Y - mu - W) ** 2
    off = np.log(1 - PRIOR) - 0.5 * (Y - mu) ** 2
    exact = 1.0 / (1.0 + np.exp(off - on))
    draws = jax.vmap(lambda k: kernel._draw({"mu": jnp.asarray(mu)}, k, (Y,), {}))(
        jax.random.split(jax.random.key(2), 20_000)
    )
    frequency = np.asarray(draws, np.float64).mean(0)
    se = np.sqrt(exact * (1 - exact) / 20_000)
    assert np.all(np.abs(frequency - exact) < 5 * se), (frequency, exact)


def pairs_model(y):
    """The plate model with a factor over neighbouring rows' indicators: z does not split."""
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    with numpyro.plate("rows", 3):
        z = numpyro.sample("z", dist.Bernoulli(PRIOR))
        numpyro.sample("y", dist.Normal(mu + jnp.asarray(W) * z, 1.0), obs=y)
    numpyro.factor("pairs", 0.7 * jnp.sum(z[1:] * z[:-1]))


def _pairs_joint(mu: float) -> tuple[np.ndarray, np.ndarray]:
    """Every configuration of the pairs model's z and its joint log density with ``mu``."""
    configs = np.array(list(itertools.product((0, 1), repeat=3)))
    prior = np.where(configs == 1, np.log(PRIOR), np.log(1 - PRIOR)).sum(-1)
    rows = -0.5 * ((Y - mu - W * configs) ** 2).sum(-1) - 1.5 * np.log(2 * np.pi)
    pairs = 0.7 * (configs[:, 1:] * configs[:, :-1]).sum(-1)
    return configs, prior + rows + pairs - 0.5 * mu**2 - 0.5 * np.log(2 * np.pi)


def test_a_site_that_does_not_split_is_summed_over_its_joint_values():
    kernel = nx.MarginalNUTS(pairs_model)
    summed = kernel.prepare(jax.random.key(0), (Y,))
    assert kernel.joint_values is not None and kernel.joint_values.shape == (8, 3)
    mu = 0.3
    configs, joint = _pairs_joint(mu)
    marginal = float(log_density(summed, (Y,), {}, {"mu": jnp.asarray(mu)})[0])
    np.testing.assert_allclose(marginal, float(logsumexp(joint)), rtol=1e-5, atol=1e-4)
    # its draws follow the exact joint conditional (20,000 draws, every configuration)
    draws = jax.jit(jax.vmap(lambda k: kernel._draw({"mu": jnp.asarray(mu)}, k, (Y,), {})))(
        jax.random.split(jax.random.key(2), 20_000)
    )
    index = np.asarray(draws) @ np.array([4, 2, 1])
    frequency = np.bincount(index, minlength=8) / len(index)
    exact = np.exp(joint - logsumexp(joint))[np.asarray(configs) @ np.array([4, 2, 1])]
    se = np.sqrt(exact * (1 - exact) / len(index))
    assert np.all(np.abs(frequency - exact) < 5 * se), (frequency, exact)


def scaled_plate_model(y):
    """The plate model with a positive scale per row, in the indicators' plate: NUTS samples
    its logarithm, and the change of variables is a term in that plate."""
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    with numpyro.plate("rows", 3):
        scale = numpyro.sample("scale", dist.HalfNormal(1.0))
        z = numpyro.sample("z", dist.Bernoulli(PRIOR))
        numpyro.sample("y", dist.Normal(mu + jnp.asarray(W) * z, scale), obs=y)


def scaled_pairs_model(y):
    """The pairs model (summed jointly) with a positive noise scale."""
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    scale = numpyro.sample("scale", dist.HalfNormal(1.0))
    with numpyro.plate("rows", 3):
        z = numpyro.sample("z", dist.Bernoulli(PRIOR))
        numpyro.sample("y", dist.Normal(mu + jnp.asarray(W) * z, scale), obs=y)
    numpyro.factor("pairs", 0.7 * jnp.sum(z[1:] * z[:-1]))


def _summed_by_hand(model, scale_shape):
    """``model`` with z summed over its 8 configurations by hand (a factor)."""
    configs = jnp.asarray(list(itertools.product((0, 1), repeat=3)))

    def summed(y):
        mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
        scale = numpyro.sample("scale", dist.HalfNormal(1.0).expand(scale_shape).to_event())

        def joint(z):
            with handlers.block():  # the model's own sites stay out of this model's trace
                return log_density(model, (y,), {}, {"mu": mu, "scale": scale, "z": z})[0]

        numpyro.factor("z_summed", logsumexp(jax.vmap(joint)(configs)) - dist.Normal(
            0.0, 1.0).log_prob(mu) - dist.HalfNormal(1.0).log_prob(scale).sum())  # fmt: skip

    return summed


@pytest.mark.parametrize(
    "model, scale_shape", [(scaled_plate_model, (3,)), (scaled_pairs_model, ())]
)
def test_the_summed_model_keeps_the_change_of_variables_of_constrained_sites(model, scale_shape):
    """NUTS's potential (unconstrained coordinates, with the log-Jacobian of the positive
    scale) equals the hand-summed model's: coordinate by coordinate, where the scale is in
    the indicators' plate, and jointly."""
    summed = nx.MarginalNUTS(model).prepare(jax.random.key(0), (Y,))
    by_hand = _summed_by_hand(model, scale_shape)
    for seed in range(3):
        a, b = jax.random.split(jax.random.key(seed))
        u = {"mu": jax.random.normal(a, ()), "scale": jax.random.normal(b, scale_shape)}
        np.testing.assert_allclose(
            float(potential_energy(summed, (Y,), {}, u)),
            float(potential_energy(by_hand, (Y,), {}, u)),
            rtol=1e-5,
            atol=1e-4,
        )


def test_a_site_with_too_many_joint_values_is_refused_with_the_reason():
    kernel = nx.MarginalNUTS(coupled_model, site="w")
    with pytest.raises(ValueError, match="discrete latent sites"):
        kernel.prepare(jax.random.key(0), (Y,))
    with pytest.raises(ValueError, match="cannot be summed out.*max_joint_values=4"):
        nx.MarginalNUTS(pairs_model, max_joint_values=4).prepare(jax.random.key(0), (Y,))
    with pytest.raises(ValueError, match="max_joint_values"):
        nx.MarginalNUTS(pairs_model, max_joint_values=0)


@pytest.mark.slow
def test_marginal_nuts_summed_jointly_matches_the_exact_posterior():
    mcmc = MCMC(nx.MarginalNUTS(pairs_model), num_warmup=500, num_samples=2000, num_chains=2,
                chain_method="sequential", progress_bar=False)  # fmt: skip
    mcmc.run(jax.random.key(4), Y)
    samples = mcmc.get_samples(group_by_chain=True)
    z, mu = np.asarray(samples["z"], np.float64), np.asarray(samples["mu"], np.float64)
    stats = np.concatenate([z, mu[..., None], mu[..., None] ** 2], -1)
    grid = np.linspace(-6.0, 6.0, 4001)
    configs, joint = zip(*(_pairs_joint(m) for m in grid), strict=True)
    log_w = np.stack(joint)  # (grid, 8)
    w = np.exp(log_w - log_w.max())
    w /= w.sum()
    exact = np.concatenate([w.sum(0) @ configs[0], [w.sum(1) @ grid, w.sum(1) @ grid**2]])
    assert_mc_close(stats, exact)


@pytest.mark.slow
@pytest.mark.parametrize("chain_method", ["sequential", "vectorized"])
def test_marginal_nuts_matches_the_exact_posterior(chain_method):
    mcmc = MCMC(
        nx.MarginalNUTS(plate_model),
        num_warmup=500,
        num_samples=2000,
        num_chains=2,
        chain_method=chain_method,
        progress_bar=False,
    )
    mcmc.run(jax.random.key(3), Y)
    samples = mcmc.get_samples(group_by_chain=True)
    z, mu = np.asarray(samples["z"], np.float64), np.asarray(samples["mu"], np.float64)
    stats = np.concatenate([z, mu[..., None], mu[..., None] ** 2], -1)
    mean_z, mean_mu, second_mu = plate_model_exact(Y, W, PRIOR)
    assert_mc_close(stats, np.concatenate([mean_z, [mean_mu, second_mu]]))


def test_nuts_options_are_checked_by_name_and_reach_nuts():
    with pytest.raises(TypeError, match="unknown NUTS options \\['max_depth'\\]"):
        nx.MarginalNUTS(plate_model, max_depth=3)
    kernel = nx.MarginalNUTS(plate_model, max_tree_depth=1, dense_mass=True)
    mcmc = MCMC(kernel, num_warmup=20, num_samples=30, progress_bar=False)
    mcmc.run(jax.random.key(0), Y, extra_fields=("hmc_state.num_steps",))
    assert int(mcmc.get_extra_fields()["hmc_state.num_steps"].max()) <= 1
    assert mcmc.last_state.hmc_state.adapt_state.inverse_mass_matrix[("mu",)].shape == (1, 1)


def test_a_start_without_finite_density_is_refused():
    mcmc = MCMC(nx.MarginalNUTS(plate_model), num_warmup=5, num_samples=5, progress_bar=False)
    with pytest.raises(RuntimeError, match="'z' summed out has no finite log density"):
        mcmc.run(jax.random.key(0), Y, init_params={"mu": jnp.asarray(jnp.nan)})


def test_deterministic_sites_see_the_drawn_site():
    def counted(y):
        mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
        with numpyro.plate("rows", 3):
            z = numpyro.sample("z", dist.Bernoulli(PRIOR))
            numpyro.sample("y", dist.Normal(mu + jnp.asarray(W) * z, 1.0), obs=y)
        numpyro.deterministic("count", z.sum())

    mcmc = MCMC(nx.MarginalNUTS(counted), num_warmup=50, num_samples=200, progress_bar=False)
    mcmc.run(jax.random.key(1), Y)
    samples = mcmc.get_samples()
    assert np.asarray(samples["count"]).std() > 0
    np.testing.assert_array_equal(samples["count"], samples["z"].sum(-1))
