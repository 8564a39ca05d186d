"""CUDA's `torch.randint` values reproduced on the host, for small draws (one thread block), as
evidence for a rule the twin does not have yet (fixtures/run/README.md, blind85/cg08).

    python validation/run/philox_randint.py      (prints blind85/cg08's three batch widths)

ATen's `random_from_to_kernel` (aten/src/ATen/native/cuda/DistributionTemplates.h) runs
`distribution_nullary_kernel` with `curand4` (Philox4x32-10): thread i calls
`curand_init(seed, i, offset)` and writes element i + k * threads of the 4 words it draws, each
`word % range + low`; the generator's offset then advances by
((numel - 1) / (256 * grid * 4) + 1) * 4, grid = min(SMs * 2048 / 256, ceil(numel / 256)).
cg08 seeds 8508 and launches 4 random kernels per step (`lengths`, `ids`, `labels`, the classifier's
dropout, each advancing the offset by 4): this gives 380, 377 and 345, the widths the H200 printed
(fixtures/run/truth_blind85_h200.tar.xz, rec/cg08*.out)."""

M0, M1 = 0xD2511F53, 0xCD9E8D57
W0, W1 = 0x9E3779B9, 0xBB67AE85
MASK = 0xFFFFFFFF


def philox(key, ctr):
    """Philox4x32-10 (curand's): 10 rounds over the 4-word counter with the 2-word key."""
    k0, k1 = key & MASK, (key >> 32) & MASK
    c = list(ctr)
    for _ in range(10):
        p0, p1 = M0 * c[0], M1 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k0, p1 & MASK, (p0 >> 32) ^ c[3] ^ k1, p0 & MASK]
        k0, k1 = (k0 + W0) & MASK, (k1 + W1) & MASK
    return c


def counter_offset(numel, sms=132):
    """How far one launch advances the generator's offset (132 SMs: the H200's, the H100's)."""
    grid = min(sms * 8, (numel + 255) // 256)
    return ((numel - 1) // (256 * grid * 4) + 1) * 4


def randint_one_block(seed, offset, numel, low, high):
    """A draw of at most 256 elements: thread i's first word (curand_init's subsequence i, the
    counter's low words offset / 4)."""
    assert numel <= 256 and high - low < 1 << 32
    o = offset // 4
    return [philox(seed, [o & MASK, o >> 32, i, 0])[0] % (high - low) + low for i in range(numel)]


if __name__ == "__main__":
    seed, offset, B, L = 8508, 0, 16, 384
    for step in range(3):
        width = max(randint_one_block(seed, offset, B, L // 4, L + 1))
        offset += counter_offset(B)  # lengths
        offset += (
            counter_offset(B * width) + counter_offset(B) + counter_offset(B * 768)
        )  # ids, labels, dropout
        print(f"step {step} width {width}")
