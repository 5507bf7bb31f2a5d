"""The work a request does in tests/programs/attach_servers.py (a module of its own, so
that --lines-of can name it: attach_work:handler_work)."""


def handler_work(n):
    total = 0
    for i in range(n):
        total += i * i
    kept = make_blocks(n // 64)
    return total + kept - kept


def make_blocks(k):
    """k blocks of bytes(1000), allocated here (the memory modes' ground truth)."""
    blocks = []
    for _ in range(k):
        blocks.append(bytes(1000))
    return len(blocks)


def expected(n):
    return sum(i * i for i in range(n))
