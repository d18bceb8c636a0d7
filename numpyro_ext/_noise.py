"""The noise of a step, drawn with JAX's RNG in the shapes a sampler's spec asks for."""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jax import random

from discrete_kernels import NoiseShapes, StepNoise

__all__ = ["draw_noise"]


def _uniforms(key: jax.Array, shapes: Sequence[tuple]) -> tuple[tuple, jax.Array]:
    """All uniforms of one step from one draw: the proposal noise per leaf (in order) and,
    last, the MH uniform.

    The draw has an even length: on XLA's CPU backend threefry costs 2-3x more for an odd
    count above about 2,000 (10,001 uniforms 297 us against 90-96 us for 10,000 or 10,002; a
    step of one chain of a 100x100 lattice 437-521 against 182-194 us; ``docs/benchmarks.md``,
    the small-models paragraph). With JAX's partitionable
    threefry (its default) a longer draw keeps the same first values, so the padding changes
    no number the step uses."""
    sizes = [math.prod(shape) for shape in shapes]
    total = sum(sizes) + 1
    flat = random.uniform(key, (total + total % 2,))
    pieces, start = [], 0
    for shape, size in zip(shapes, sizes):
        pieces.append(jnp.reshape(flat[start : start + size], shape))
        start += size
    return tuple(pieces), flat[total - 1]


def draw_noise(rng_key: jax.Array, shapes: NoiseShapes) -> tuple[jax.Array, StepNoise]:
    """The next key and one step's noise in a spec's shapes (all uniforms from one draw; the
    normals and a permutation, if asked for, from their own keys)."""
    normals = permutation = None
    if shapes.permutation:
        rng_key, key_perm = random.split(rng_key)
        permutation = random.permutation(key_perm, shapes.permutation)
    if shapes.num_normals:
        rng_key, key_draw, key_normal = random.split(rng_key, 3)
        dtype = jnp.result_type(float)
        count = shapes.num_normals
        # an even count, as for the uniforms (_uniforms)
        normals = random.normal(key_normal, (count + count % 2,), dtype)[:count]
    else:
        rng_key, key_draw = random.split(rng_key)
    uniforms, accept_uniform = _uniforms(key_draw, shapes.uniforms)
    return rng_key, StepNoise(uniforms, accept_uniform, normals, permutation)
