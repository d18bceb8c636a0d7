"""Small enumerable targets with analytic gradients, in numpy float64, for the core tests."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import discrete_kernels as dk


@dataclass
class Target:
    """``log_density(leaves) -> f`` and ``local_fn(leaves) -> (f, locals)`` on few states."""

    name: str
    domains: tuple
    shapes: tuple
    is_table: tuple
    local_fn: Callable

    def states(self) -> list[tuple[np.ndarray, ...]]:
        per_leaf = []
        for domain, shape in zip(self.domains, self.shapes):
            n = int(np.prod(shape))
            values = range(domain.low, domain.low + domain.num_values)
            leaf_states = []
            for combo in itertools.product(values, repeat=n):
                x = np.asarray(combo, dtype=np.int64).reshape(shape)
                if isinstance(domain, dk.Ordinal) and domain.lower is not None:
                    if np.any(x < domain.lower) or np.any(x > domain.upper):
                        continue
                leaf_states.append(x)
            per_leaf.append(leaf_states)
        return [tuple(c) for c in itertools.product(*per_leaf)]

    def log_density(self, leaves) -> float:
        return float(self.local_fn(leaves)[0])

    def exact_pi(self) -> np.ndarray:
        f = np.array([self.log_density(s) for s in self.states()])
        p = np.exp(f - f.max())
        return p / p.sum()


def binary_target() -> Target:
    rng = np.random.default_rng(1)
    d = 4
    w = rng.normal(scale=0.6, size=(d, d))
    w = (w + w.T) / 2
    b = rng.normal(size=d)

    def local_fn(leaves):
        x = leaves[0].astype(float)
        s = x.sum()
        # a cubic term so that the first-order proposal is not exact
        f = x @ w @ x + b @ x + 0.2 * s**3 / d
        g = 2 * w @ x + b + 0.6 * s**2 / d
        return f, (g,)

    return Target("binary", (dk.Binary(),), ((d,),), (False,), local_fn)


def ordinal_target(bounded: bool = False) -> Target:
    rng = np.random.default_rng(2)
    d, num_values = 3, 4
    a = rng.normal(scale=0.3, size=(d, d))
    a = a @ a.T + 0.2 * np.eye(d)
    domain = (
        dk.Ordinal(num_values, low=-1, lower=np.array([-1, 0, -1]), upper=np.array([2, 2, 1]))
        if bounded
        else dk.Ordinal(num_values, low=-1)
    )

    def local_fn(leaves):
        x = leaves[0].astype(float)
        c = x - 0.4
        f = -0.5 * c @ a @ c + 0.3 * np.sum(np.sin(2 * x))
        g = -a @ c + 0.6 * np.cos(2 * x)
        return f, (g,)

    return Target(
        "ordinal" + ("-bounded" if bounded else ""), (domain,), ((d,),), (False,), local_fn
    )


def categorical_target(exact: bool) -> Target:
    rng = np.random.default_rng(3)
    d, k = 3, 3
    theta = rng.normal(size=(d, k))
    coupling = rng.normal(scale=0.7, size=(d, d, k, k))

    def f_onehot(h):
        f = np.sum(theta * h)
        for i in range(d):
            for j in range(i + 1, d):
                f += h[i] @ coupling[i, j] @ h[j]
        return f

    def grad_onehot(h):
        g = theta.copy()
        for i in range(d):
            for j in range(i + 1, d):
                g[i] += coupling[i, j] @ h[j]
                g[j] += coupling[i, j].T @ h[i]
        return g

    def local_fn(leaves):
        x = leaves[0]
        h = np.eye(k)[x]
        f = f_onehot(h)
        if not exact:
            return f, (grad_onehot(h),)
        batch = dk.tables.single_site_substitutions(dk.Categorical(k), x)
        table = np.array([f_onehot(np.eye(k)[y]) for y in batch]).reshape(d, k)
        return f, (table,)

    name = "categorical-" + ("exact" if exact else "onehot")
    return Target(name, (dk.Categorical(k),), ((d,),), (True,), local_fn)


def mixed_target() -> Target:
    """A binary leaf and an ordinal leaf coupled together."""

    def local_fn(leaves):
        x = leaves[0].astype(float)
        y = leaves[1].astype(float)
        f = (
            0.8 * x[0] * y[0]
            - 0.5 * x[1] * y[0]
            + 0.3 * y[0] ** 2
            - 0.4 * x.sum()
            + 0.1 * y[0] ** 3
        )
        gx = np.array([0.8 * y[0] - 0.4, -0.5 * y[0] - 0.4])
        gy = np.array([0.8 * x[0] - 0.5 * x[1] + 0.6 * y[0] + 0.3 * y[0] ** 2])
        return f, (gx, gy)

    return Target(
        "binary+ordinal", (dk.Binary(), dk.Ordinal(5)), ((2,), (1,)), (False, False), local_fn
    )


ALL_TARGETS = [
    binary_target,
    ordinal_target,
    lambda: ordinal_target(bounded=True),
    lambda: categorical_target(exact=False),
    lambda: categorical_target(exact=True),
    mixed_target,
]
