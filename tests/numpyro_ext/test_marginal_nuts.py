"""MarginalNUTS: the model with its plate discrete site summed out equals the enumerated sum
over every configuration of the site, its conditional is the enumerated one and its draws
follow it, a site whose coordinates interact is summed over its joint values (refused past
``max_joint_values``), a site in a plate with an axis that is not one (a chain per animal,
written with ``scan`` or not) is summed per plate element, and (slow) runs match the exact
posterior. The enumeration tests'
power: they fail when the sum is replaced by a maximum (shown once by editing
:func:`discrete_kernels.tables.summed_out_log_density`); the joint tests fail when the joint
draw is tempered (``0.8 * logits``, shown once); so do the per-plate-element tests (draws, and
the slow run: z = 8.9)."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax.scipy.special import logsumexp
from numpyro import handlers
from numpyro.contrib.control_flow import scan
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


# --- a site in a plate with an axis that is not a plate: summed per plate element

OCCASIONS, ANIMALS = 3, 3
CAPTURES = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 0]], np.float32)  # (occasions, animals)


def scan_chain_model(captures):
    """Capture-recapture with ``scan`` over the occasions: per animal a chain of alive
    states (alive only after alive), recaptured alive with ``rho``."""
    phi = numpyro.sample("phi", dist.Beta(2.0, 2.0))
    rho = numpyro.sample("rho", dist.Beta(2.0, 2.0))

    def step(alive, y_t):
        with numpyro.plate("animals", ANIMALS):
            z = numpyro.sample("z", dist.Bernoulli(probs=phi * alive))
            numpyro.sample("y", dist.Bernoulli(probs=rho * z), obs=y_t)
        return z, None

    scan(step, jnp.ones(ANIMALS, jnp.int32), captures)


def chain_model(captures):
    """The same chains without ``scan``: ``z`` of shape (occasions, animals) in the animals
    plate, its occasions axis not a plate, the survival terms one factor per animal."""
    phi = numpyro.sample("phi", dist.Beta(2.0, 2.0))
    rho = numpyro.sample("rho", dist.Beta(2.0, 2.0))
    with numpyro.plate("animals", ANIMALS):
        z = numpyro.sample("z", dist.Bernoulli(0.5).expand([OCCASIONS, ANIMALS]))
        alive = jnp.concatenate([jnp.ones((1, ANIMALS)), z[:-1]], 0)
        survival = dist.Bernoulli(probs=phi * alive).log_prob(z).sum(0)
        numpyro.factor("survival", survival - dist.Bernoulli(0.5).log_prob(z).sum(0))
        numpyro.sample("y", dist.Bernoulli(probs=rho * z), obs=captures)
    return z


def coupled_chain_model(captures):
    """The chains with a term outside the plate over two animals' first states: z splits
    neither by coordinate nor by animal."""
    z = chain_model(captures)
    numpyro.factor("across", 0.8 * z[0, 0] * z[0, 1])


def _chain_configs() -> np.ndarray:
    """Every value of z, shape (2^(occasions x animals), occasions, animals)."""
    flat = np.array(list(itertools.product((0, 1), repeat=OCCASIONS * ANIMALS)), np.int32)
    return flat.reshape(-1, OCCASIONS, ANIMALS)


def _chain_joint(model, phi: float, rho: float) -> np.ndarray:
    configs = jnp.asarray(_chain_configs())
    values = {"phi": jnp.asarray(phi), "rho": jnp.asarray(rho)}
    at = jax.jit(jax.vmap(lambda z: log_density(model, (CAPTURES,), {}, {**values, "z": z})[0]))
    return np.asarray(at(configs), np.float64)


# the plain chain under -m slow (9 s): the scan form takes the same per-element sum and is
# the harder case (its occasions are not a plate), so it stays in the default run
@pytest.mark.parametrize(
    "model", [scan_chain_model, pytest.param(chain_model, marks=pytest.mark.slow)]
)
def test_a_chain_per_plate_element_is_summed_per_element_over_its_joint_values(model):
    """The summed model equals the brute-force sum over all 512 values of z; the
    conditional of each animal's chain is the brute-force one; draws follow it."""
    kernel = nx.MarginalNUTS(model)
    summed = kernel.prepare(jax.random.key(0), (CAPTURES,))
    assert kernel.joint_values is None  # per animal (8 values each), not the 512 joint ones
    configs = _chain_configs()
    codes = configs[:, 0, :] * 4 + configs[:, 1, :] * 2 + configs[:, 2, :]  # (512, animals)
    for phi, rho in [(0.7, 0.6), (0.3, 0.8)]:
        values = {"phi": jnp.asarray(phi), "rho": jnp.asarray(rho)}
        joint = _chain_joint(model, phi, rho)
        marginal = float(log_density(summed, (CAPTURES,), {}, values)[0])
        np.testing.assert_allclose(marginal, float(logsumexp(joint)), rtol=1e-5, atol=1e-4)
        weights = np.exp(joint - logsumexp(joint))
        exact = np.stack([np.bincount(codes[:, a], weights, minlength=8) for a in range(ANIMALS)])
        logits = kernel.conditional_logits(values, (CAPTURES,), {})
        assert logits.shape == (1, ANIMALS, 8)
        np.testing.assert_allclose(jax.nn.softmax(logits, -1)[0], exact, atol=1e-5)
    unconstrained = {k: jax.scipy.special.logit(v) for k, v in values.items()}  # as NUTS's
    draws = jax.jit(jax.vmap(lambda k: kernel._draw(unconstrained, k, (CAPTURES,), {})))(
        jax.random.split(jax.random.key(2), 20_000)
    )
    draws = np.asarray(draws)
    assert draws.shape == (20_000, OCCASIONS, ANIMALS)
    drawn = draws[:, 0, :] * 4 + draws[:, 1, :] * 2 + draws[:, 2, :]
    frequency = np.stack([np.bincount(drawn[:, a], minlength=8) for a in range(ANIMALS)]) / 20_000
    se = np.sqrt(exact * (1 - exact) / 20_000)
    assert np.all(np.abs(frequency - exact) <= 5 * se + 1e-12), (frequency, exact)


def test_a_term_across_plate_elements_is_found_and_the_site_summed_jointly():
    """A term coupling two animals fails the per-animal check at setup: the site is summed
    over its 512 joint values instead (right), or refused with both reasons. The check's
    power: with it skipped (``_group_split_mismatch`` returning None, shown once by hand),
    the per-animal sum drops the coupling and misses the brute-force sum by 0.80 nats."""
    kernel = nx.MarginalNUTS(coupled_chain_model)
    summed = kernel.prepare(jax.random.key(0), (CAPTURES,))
    assert kernel.joint_values is not None and kernel.joint_values.shape == (512, 3, 3)
    values = {"phi": jnp.asarray(0.7), "rho": jnp.asarray(0.6)}
    joint = _chain_joint(coupled_chain_model, 0.7, 0.6)
    marginal = float(log_density(summed, (CAPTURES,), {}, values)[0])
    np.testing.assert_allclose(marginal, float(logsumexp(joint)), rtol=1e-5, atol=1e-4)
    with pytest.raises(
        ValueError,
        match="not a plate; nor summed per element of plate\\(s\\) 'animals': changing one "
        ".*max_joint_values=100",
    ):
        nx.MarginalNUTS(coupled_chain_model, max_joint_values=100).prepare(
            jax.random.key(0), (CAPTURES,)
        )
    with pytest.raises(ValueError, match="more than max_joint_values=4 joint values each"):
        nx.MarginalNUTS(chain_model, max_joint_values=4).prepare(jax.random.key(0), (CAPTURES,))


@pytest.mark.slow
def test_marginal_nuts_per_plate_element_matches_the_exact_posterior():
    """MCMC on the scan model (vectorised chains) against the brute-force posterior over a
    grid of (phi, rho)."""
    mcmc = MCMC(nx.MarginalNUTS(scan_chain_model), num_warmup=500, num_samples=2000,
                num_chains=2, chain_method="vectorized", progress_bar=False)  # fmt: skip
    mcmc.run(jax.random.key(5), CAPTURES)
    samples = mcmc.get_samples(group_by_chain=True)
    z = np.asarray(samples["z"], np.float64).reshape(2, 2000, -1)
    phi, rho = (np.asarray(samples[k], np.float64) for k in ("phi", "rho"))
    stats = np.concatenate([z, phi[..., None], rho[..., None]], -1)
    grid = (np.arange(40) + 0.5) / 40  # midpoints: the Beta priors are in the model
    configs = jnp.asarray(_chain_configs())

    def joint_at(p: jax.Array, r: jax.Array) -> jax.Array:
        def one(z: jax.Array) -> jax.Array:
            return log_density(scan_chain_model, (CAPTURES,), {}, {"phi": p, "rho": r, "z": z})[0]

        return jax.vmap(one)(configs)

    p, r = (a.ravel() for a in np.meshgrid(grid, grid, indexing="ij"))
    log_w = np.asarray(jax.jit(lambda p, r: jax.lax.map(lambda a: joint_at(*a), (p, r)))(p, r))
    w = np.exp(log_w - log_w.max())  # (grid points, 512)
    w /= w.sum()
    flat = np.asarray(configs, np.float64).reshape(512, -1)
    total = np.concatenate([np.einsum("gm,mk->k", w, flat), [w.sum(1) @ p, w.sum(1) @ r]])
    assert_mc_close(stats, total)
