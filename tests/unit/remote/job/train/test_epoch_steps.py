"""An epoch's steps known before the trainer runs: numpy's shuffle reproduced draw for draw, and the
counts speculators 0.9.0's own sampler gave on these lengths (the real tier compares them live:
tests/real_engine/test_real_train_data.py)."""

from __future__ import annotations

import pytest

from remote.job.train import epoch_steps as es


def lengths(n: int, max_len: int) -> list[int]:
    return [(i * 37 + 11) % (max_len * 3 // 2) + 1 for i in range(n)]  # a third run past max_len


# (total_seq_len, rows, [(seed, epoch, train steps, validation batches)]): what
# MultipackDistributedBatchSamplerV2(num_replicas=1, rank=0) said, set_epoch(epoch), len()
SAMPLER_STEPS = [
    (64, 40, [(42, 0, 31, 3), (42, 1, 31, 4), (0, 0, 31, 3), (7, 3, 29, 4)]),
    (128, 57, [(42, 0, 44, 6), (42, 1, 43, 5), (0, 0, 43, 6), (7, 3, 45, 5)]),
    (256, 200, [(42, 0, 146, 17), (42, 1, 152, 16), (0, 0, 151, 17), (7, 3, 147, 18)]),
    (32, 25, [(42, 0, 19, 3), (42, 1, 18, 3), (0, 0, 16, 3), (7, 3, 18, 3)]),
]


@pytest.mark.parametrize("max_len,n,expected", SAMPLER_STEPS)
def test_the_steps_are_the_samplers(max_len, n, expected):
    rows = lengths(n, max_len)
    for seed, epoch, train, val in expected:
        assert es.steps_per_epoch(rows, max_len, 0.9, seed, epoch) == train
        assert es.validation_steps(rows, max_len, 0.9, epoch) == val


def test_the_shuffle_is_numpys_draw_for_draw():
    np = pytest.importorskip("numpy")
    for seed in (0, 1, 42, 43, 2**40 + 5):
        assert (
            es.seed_state(seed)
            == np.random.SeedSequence(seed).generate_state(4, np.uint64).tolist()
        )
        assert es.PCG64(seed).next64() == int(
            np.random.default_rng(seed).bit_generator.random_raw()
        )
        for n in (1, 2, 7, 300):
            assert es.permutation(seed, n) == np.random.default_rng(seed).permutation(n).tolist()


def test_a_batch_holds_rows_up_to_the_length_and_a_long_row_alone():
    assert es.packed_batches([10] * 6, 30, 0) == 2
    assert es.packed_batches([100, 100, 100], 30, 0) == 3  # clipped to 30: one a batch
    assert es.packed_batches([], 30, 0) == 0


def test_the_split_is_the_trainers():
    assert es.split_at(10) == 9 and es.split_at(300) == 270 and es.split_at(5) == 4
    assert es.steps_per_epoch([5] * 10, 5) == 9  # the tenth row validates
    assert es.validation_steps([5] * 10, 5) == 1
