"""Small blocks (exact mode keeps those of at most 512 bytes by page, the rest
in a hashed table), profiled two ways by tests/test_memory.py: under
tracemalloc and under pyprof. Sizes on both sides of 512 bytes, pages filled
and emptied in a shuffled order (their records given back and reused), blocks
grown by realloc from one side to the other. Prints {line: net bytes}."""
import random

from memtruth import measure


def small_bytes(n):
    return [bytes(i % 600) for i in range(n)]          # 33 to 632 bytes each


def drop_shuffled(blocks, keep_every):
    order = list(range(len(blocks)))
    random.Random(7).shuffle(order)
    for i in order:
        if i % keep_every:
            blocks[i] = None
    return [b for b in blocks if b is not None]


def grow_across(n):
    out = []
    for i in range(n):
        buf = bytearray(16 * (i % 20))
        for _ in range(40):
            buf.extend(b"x" * 16)          # realloc over 512 bytes, in place or moved
        out.append(buf)
    return out


def refill(n):
    return [str(i) * (i % 30) for i in range(n)]


def run():
    keep = []
    keep.append(drop_shuffled(small_bytes(60_000), 5))
    keep.append(grow_across(2_000))
    keep.append(refill(40_000))                        # into the pages emptied above
    keep.append(drop_shuffled(small_bytes(20_000), 2))
    return keep


def main():
    measure(run, __file__)


if __name__ == "__main__":
    main()
