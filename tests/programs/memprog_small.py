"""Small blocks (exact mode keeps those of at most 512 bytes by page, the rest
in a hashed table), profiled two ways by tests/test_memory.py: under
tracemalloc and under pyprof. Sizes on both sides of 512 bytes, pages filled
and emptied in a shuffled order (their records given back and reused), blocks
grown by realloc from one side to the other. Prints {line: net bytes}."""
import random

from memtruth import measure


def small_bytes(n):
    out = [None] * n                    # lists on lines of their own: CPython's list
    for i in range(n):                  # free list makes their headers differ by run
        out[i] = bytes(i % 600)         # 33 to 632 bytes each
    return out


def drop_shuffled(blocks, keep_every):
    order = list(range(len(blocks)))
    random.Random(7).shuffle(order)
    for i in order:
        if i % keep_every:
            blocks[i] = None
    return blocks


def grow_across(n):
    out = [None] * n
    for i in range(n):
        buf = bytearray(16 * (i % 20))
        for _ in range(40):
            buf.extend(b"x" * 16)          # realloc over 512 bytes, in place or moved
        out[i] = buf
    return out


def refill(n):
    out = [None] * n
    for i in range(n):
        out[i] = str(i) * (i % 30)         # into the pages emptied above
    return out


def run():
    keep = []
    keep.append(drop_shuffled(small_bytes(60_000), 5))
    keep.append(grow_across(2_000))
    keep.append(refill(40_000))
    keep.append(drop_shuffled(small_bytes(20_000), 2))
    return keep


def main():
    measure(run, __file__)


if __name__ == "__main__":
    main()
