"""A leaf's coordinates grouped by its plate axes (:class:`discrete_kernels.groups.GroupLayout`):
which axes are plates, each coordinate's group and place in it, and every joint value of a
group."""

import numpy as np

from discrete_kernels.domains import Binary, Categorical, Ordinal
from discrete_kernels.groups import GroupLayout, group_joint_values, plate_groups_of


def test_the_plates_among_a_sites_axes():
    frames = [("animals", -1, 4)]
    assert plate_groups_of((3, 4), (), frames) == {"animals": -1}
    assert plate_groups_of((3, 4), (2,), frames) is None  # an event shape
    assert plate_groups_of((3, 4), (), []) is None  # no plate
    assert plate_groups_of((3, 5), (), frames) is None  # a plate of another size


def test_a_group_holds_the_coordinates_along_the_inner_axes():
    layout = GroupLayout((3, 4), inner_axes=(0,))
    assert layout.group_shape == (1, 4) and layout.value_shape == (3, 1)
    assert layout.inner_shape == (3,)
    np.testing.assert_array_equal(layout.group_index(), np.tile(np.arange(4), (3, 1)))
    np.testing.assert_array_equal(layout.inner_index(), np.tile(np.arange(3)[:, None], (1, 4)))


def test_every_joint_value_of_a_group_once():
    layout = GroupLayout((2, 5), inner_axes=(0,))
    values = group_joint_values(Categorical(3), layout, 100)
    assert values is not None and values.shape == (9, 2, 1)
    assert len({tuple(v.ravel()) for v in values}) == 9
    assert group_joint_values(Binary(), GroupLayout((7, 2), (0,)), 100) is None  # 128 > 100
    # per-coordinate bounds differ between groups: not grouped
    bounded = Ordinal(4, 0, np.zeros((2, 5), int), np.full((2, 5), 2))
    assert group_joint_values(bounded, layout, 100) is None
