"""The optimizer steps of one training epoch, known before the trainer starts, exactly as speculators
0.9.0 packs them on one GPU (`MultipackDistributedBatchSamplerV2` with `num_replicas=1`).

The trainer trains on the first `int(n * train_ratio)` rows, clips each row's length to
`total_seq_len`, shuffles them with numpy's `default_rng(seed + epoch).permutation` and packs the
shuffled rows greedily in order: a batch takes rows while their lengths sum to at most
`total_seq_len` (its binary search over the LPT packing comes to exactly that with one replica).
The count depends on the shuffle, so numpy's generator is reproduced here in plain Python: its
SeedSequence, PCG64 (XSL-RR, 128-bit state) and the Fisher-Yates shuffle over `random_interval`
(masked rejection on 32-bit draws, two per 64-bit output). It is compared with the real sampler in
tests/real_engine/test_real_train_data.py. Each epoch reshuffles, so epochs differ by a step or so;
validation packs the rest of the rows with seed 0 + epoch the same way."""

from __future__ import annotations

M32 = 0xFFFFFFFF
M64 = (1 << 64) - 1
M128 = (1 << 128) - 1
PCG_MULT = (2549297995355413924 << 64) | 4865540595714422341


def _hashmix(value: int, h: list[int]) -> int:
    value ^= h[0]
    h[0] = (h[0] * 0x931E8875) & M32
    value = (value * h[0]) & M32
    return value ^ (value >> 16)


def _mix(x: int, y: int) -> int:
    r = (0xCA01F9DD * x - 0x4973F715 * y) & M32
    return r ^ (r >> 16)


def seed_state(seed: int) -> list[int]:
    """numpy's `SeedSequence(seed).generate_state(4, uint64)`: PCG64's seed and stream."""
    words = []
    while True:  # the integer as 32-bit words, lowest first
        words.append(seed & M32)
        seed >>= 32
        if not seed:
            break
    h = [0x43B0D7E5]
    pool = [_hashmix(words[i] if i < len(words) else 0, h) for i in range(4)]
    for src in range(4):
        for dst in range(4):
            if src != dst:
                pool[dst] = _mix(pool[dst], _hashmix(pool[src], h))
    for src in range(4, len(words)):
        for dst in range(4):
            pool[dst] = _mix(pool[dst], _hashmix(words[src], h))
    out, hb = [], 0x8B51F9DD
    for i in range(8):
        v = pool[i % 4] ^ hb
        hb = (hb * 0x58F38DED) & M32
        v = (v * hb) & M32
        out.append(v ^ (v >> 16))
    return [out[2 * i] | (out[2 * i + 1] << 32) for i in range(4)]


class PCG64:
    """numpy's PCG64 bit generator, with its buffered 32-bit draws."""

    def __init__(self, seed: int):
        s = seed_state(seed)
        self.inc = ((((s[2] << 64) | s[3]) << 1) | 1) & M128
        self.state = 0
        self._step()
        self.state = (self.state + ((s[0] << 64) | s[1])) & M128
        self._step()
        self._half: int | None = None

    def _step(self) -> None:
        self.state = (self.state * PCG_MULT + self.inc) & M128

    def next64(self) -> int:
        self._step()
        s = self.state
        x, rot = ((s >> 64) ^ s) & M64, s >> 122
        return ((x >> rot) | (x << (64 - rot))) & M64

    def next32(self) -> int:
        if self._half is not None:
            v, self._half = self._half, None
            return v
        v = self.next64()
        self._half = v >> 32
        return v & M32

    def interval(self, top: int) -> int:
        """A draw in [0, top], as numpy's `random_interval`."""
        if top == 0:
            return 0
        mask = top
        for shift in (1, 2, 4, 8, 16, 32):
            mask |= mask >> shift
        draw = self.next32 if top <= M32 else self.next64
        while True:
            v = draw() & mask
            if v <= top:
                return v


def permutation(seed: int, n: int) -> list[int]:
    """`np.random.default_rng(seed).permutation(n)`."""
    gen = PCG64(seed)
    order = list(range(n))
    for i in range(n - 1, 0, -1):
        j = gen.interval(i)
        order[i], order[j] = order[j], order[i]
    return order


def packed_batches(lengths: list[int], max_len: int, seed: int) -> int:
    """How many batches the sampler makes of these rows (one replica)."""
    clipped = [min(int(n), max_len) for n in lengths]
    batches, fill = 0, max_len + 1  # no batch open yet
    for i in permutation(seed, len(clipped)):
        if fill + clipped[i] > max_len:
            batches, fill = batches + 1, 0
        fill += clipped[i]
    return batches


def split_at(n: int, train_ratio: float = 0.9) -> int:
    """The first row of validation: the trainer's own `int(len(data) * train_ratio)`."""
    return int(n * train_ratio)


def steps_per_epoch(
    lengths: list[int], total_seq_len: int, train_ratio: float = 0.9, seed: int = 42, epoch: int = 0
) -> int:
    """The optimizer steps of training epoch `epoch` over rows of these `seq_len`s, in order."""
    return packed_batches(
        lengths[: split_at(len(lengths), train_ratio)], total_seq_len, seed + epoch
    )


def validation_steps(
    lengths: list[int], total_seq_len: int, train_ratio: float = 0.9, epoch: int = 0
) -> int:
    """The batches of epoch `epoch`'s validation (its sampler keeps the default seed, 0)."""
    return packed_batches(lengths[split_at(len(lengths), train_ratio) :], total_seq_len, epoch)
