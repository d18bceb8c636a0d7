"""The Pyro kernels' per-step statistics record (``pyro_ext._record.StepRecord``)."""

import pytest

torch = pytest.importorskip("torch")

from pyro_ext._record import StepRecord  # noqa: E402


def test_record_keeps_every_step_in_order_whatever_the_value_types():
    """Steps of 0-dim tensors of several dtypes (a bool ``accepted``, a float64 statistic) and
    Python numbers come back as float64 columns in order, across block flushes, reads in the
    middle and a partial last block."""
    record = StepRecord(block=4)
    like = torch.zeros((), dtype=torch.float32)
    expected = []
    for t in range(11):
        values = {
            "accept_prob": torch.tensor(t / 10.0),
            "accepted": torch.tensor(t % 3 == 0),
            "hamming_distance": torch.tensor(float(t), dtype=torch.float64),
            "step_size": 0.5 if t < 6 else torch.tensor(0.25),  # a number, then a tensor
        }
        record.append(values, like)
        expected.append([t / 10.0, float(t % 3 == 0), float(t), 0.5 if t < 6 else 0.25])
        if t == 5:  # a read in the middle of a block
            assert record.recent("accept_prob", 2).tolist() == pytest.approx([0.4, 0.5])
    assert len(record) == 11
    columns = record.columns()
    assert list(columns) == ["accept_prob", "accepted", "hamming_distance", "step_size"]
    for j, name in enumerate(columns):
        assert columns[name].dtype == torch.float64
        assert columns[name].tolist() == pytest.approx([row[j] for row in expected])
    assert record.columns(3, 5)["hamming_distance"].tolist() == [3.0, 4.0]


def test_record_refuses_a_step_with_other_statistics():
    record = StepRecord()
    like = torch.zeros(())
    record.append({"a": torch.tensor(1.0), "b": 2.0}, like)
    with pytest.raises(ValueError, match="differ"):
        record.append({"a": torch.tensor(1.0)}, like)
    with pytest.raises(ValueError, match="differ"):
        record.append({"b": 2.0, "a": torch.tensor(1.0)}, like)
