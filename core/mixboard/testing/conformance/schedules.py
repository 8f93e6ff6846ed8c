"""The steps of each case: per step, (sequence, new tokens) pairs.

A sequence's first pair is its prompt (or the prompt's first chunk); a pair
of 1 after earlier tokens is a decode. The runner puts a step's decodes
first, as a runner does. Lengths are chosen to cross the sizes kernels cut
their work at: blocks of the paged cache, chunks of an SSD scan (4 and 5 in
the small shapes, 64, 128 and 256 in real ones), tiles of 16 to 128 keys,
split-KV boundaries at 256, 512 and 1024, and launch grids of 32 sequences.
"""

from __future__ import annotations

Step = list[tuple[str, int]]

# --------------------------------------------------------------------------- quick: small sizes

RAGGED = [[("a", 5), ("b", 1), ("c", 11), ("d", 3)]]
DECODE_AFTER_PREFILL = [[("a", 6), ("b", 3), ("c", 9)]] + [[("a", 1), ("b", 1), ("c", 1)]] * 4
CHUNKED = [
    [("a", 5), ("b", 3)],
    [("b", 1), ("a", 4), ("c", 6)],
    [("b", 1), ("a", 7), ("c", 2)],
    [("a", 1), ("b", 1), ("c", 1)],
]
MIXED = [
    [("a", 4), ("b", 2), ("c", 6)],
    [("a", 1), ("c", 1), ("b", 3), ("d", 5), ("e", 1)],
    [("a", 1), ("b", 1), ("c", 1), ("d", 1), ("e", 1)],
    [("a", 1), ("d", 2), ("e", 3)],
]
LONG = [[("a", 40), ("b", 3)], [("a", 1), ("b", 1)], [("a", 1), ("b", 1)]]
ISOLATION = [
    [("a", 5), ("b", 7)],
    [("a", 1)],  # b is parked: its records must not move
    [("b", 1), ("c", 4)],
    [("b", 1), ("e", 6)],  # a is done; e takes its slot and blocks, with what a left there
    [("e", 1), ("b", 1), ("c", 1)],
]
SHAPE = [[("a", 7), ("b", 2)], [("a", 1), ("b", 4), ("c", 3)], [("a", 1), ("b", 1), ("c", 1)]]

# --------------------------------------------------------------------------- quick: graph capture (capture.py)

# Prompts, then a step of decodes recorded as a graph would record it, then two replayed from that
# recording: other sequences (other contexts, slots and blocks, a longer max_seq_len), then the recorded
# ones a token on (a crosses into a new block of 4).
CAPTURE_DECODE = [
    [("a", 7), ("b", 2), ("c", 9), ("d", 3), ("e", 13), ("f", 6)],
    [("a", 1), ("b", 1), ("c", 1)],
    [("d", 1), ("e", 1), ("f", 1)],
    [("a", 1), ("b", 1), ("c", 1)],
]
# Every step of 9 tokens and 4 sequences replays the first one's recording: 2, then 1, then 3 decodes
# beside continued prefills and fresh prompts of other lengths.
CAPTURE_MIXED = [
    [("a", 7), ("b", 2), ("c", 9), ("d", 3), ("e", 13), ("f", 6)],
    [("a", 1), ("b", 1), ("c", 4), ("g", 3)],
    [("d", 1), ("e", 2), ("f", 3), ("h", 3)],
    [("a", 1), ("b", 1), ("c", 1), ("g", 6)],
]

# --------------------------------------------------------------------------- quick: real sizes, cheap

# Prompts over several blocks of 16 and of 7; b fills its first block of 16 exactly, then crosses it.
BLOCKS = [
    [("a", 37), ("b", 15), ("c", 1)],
    [("b", 1), ("c", 1), ("a", 11), ("d", 17)],
    [("a", 1), ("b", 1), ("c", 1), ("d", 1)],
    [("a", 1), ("b", 1), ("c", 1), ("d", 1)],
]
# Decodes of sequences whose slots (and blocks) are handed out in order, as a runner does: a
# backend's in-place path for consecutive records runs (steps 2 and 4), and its gather path (step 3).
CONSECUTIVE = [
    [("a", 4), ("b", 2), ("c", 6), ("d", 3)],
    [("a", 1), ("b", 1), ("c", 1), ("d", 1)],
    [("a", 1), ("b", 1), ("c", 5), ("d", 1), ("e", 3)],
    [("a", 1), ("b", 1), ("c", 1), ("d", 1), ("e", 1)],
]
# A prompt past 256 tokens (a chunk of 256 and a part, tiles of 64 and 128 keys) beside short ones,
# continued by a chunk that starts inside a block and a tile.
PREFILL_300 = [
    [("a", 300), ("b", 1), ("c", 17)],
    [("b", 1), ("c", 1), ("a", 45), ("d", 70)],
    [("a", 1), ("b", 1), ("c", 1), ("d", 1)],
]


def many_sequences(n: int, longest: int) -> list[Step]:
    """``n`` sequences: prompts of 1 to ``longest`` tokens, then a step of
    ``n`` sequences where most decode beside continued prefills and fresh
    prompts, then ``n`` decodes. Past a launch grid or batch of 32."""
    names = [f"s{i}" for i in range(n)]
    fresh, resumed = n // 10, n // 12
    prompted = names[: n - fresh]
    prompts = [(s, 1 + (i * 37) % longest) for i, s in enumerate(prompted)]
    decodes = [(s, 1) for s in prompted[: len(prompted) - resumed]]
    chunks = [(s, 2 + (i * 5) % 9) for i, s in enumerate(prompted[len(prompted) - resumed:])]
    news = [(s, 1 + (i * 3) % 7) for i, s in enumerate(names[n - fresh:])]
    mixed = decodes[: len(decodes) // 2] + chunks + decodes[len(decodes) // 2:] + news  # the runner sorts
    return [prompts, mixed, [(s, 1) for s in names]]


MANY = many_sequences(40, 9)  # step 2: 33 decodes, 3 continued prefills, 4 fresh prompts

# --------------------------------------------------------------------------- thorough: long runs


# One long fresh prompt beside short ones, then decodes: every tile, chunk and split of a long prefill.
def long_prefill(length: int) -> list[Step]:
    return [[("a", length), ("b", 1), ("c", 17)], [("a", 1), ("b", 1), ("c", 1)], [("a", 1), ("b", 1), ("c", 1)]]


# A prompt of 2500 tokens in chunks of 1024, 1024 and 452 (as a runner with 1024 tokens a step feeds it),
# beside decodes and a fresh prompt: prefills continuing after a long context.
LONG_CHUNKED = [
    [("a", 1024), ("b", 5)],
    [("b", 1), ("a", 1024), ("c", 300)],
    [("b", 1), ("c", 1), ("a", 452)],
    [("a", 1), ("b", 1), ("c", 1)],
]


def long_decode(steps: int) -> list[Step]:
    """Prompts of 1000, 490, 250 and 3 tokens, then ``steps`` steps of
    decodes: they cross 1024, 512 and 256 keys (split-KV boundaries)."""
    prompts = [("a", 1000), ("b", 490), ("c", 250), ("d", 3)]
    return [prompts] + [[(s, 1) for s, _ in prompts] for _ in range(steps)]


# Each long shape: a long prompt, a continued chunk beside a fresh prompt, then decodes.
LONG_SHAPE = [[("a", 700), ("b", 5)], [("b", 1), ("a", 333), ("c", 129)], [("a", 1), ("b", 1), ("c", 1)]]
