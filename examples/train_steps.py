"""A toy training loop with pyprof.step(): logistic regression by minibatch
gradient descent in pure Python, with a data loader whose cost varies from
batch to batch (every fourth batch reads "from disk").

    python -m pyprof -o train.cprof examples/train_steps.py
    pyprof stats train.cprof                        # mean and CV per function over steps
    pyprof view train.cprof --view code --step 3    # what step 3 did
"""
import math
import random
import time

import pyprof

rng = random.Random(7)
FEATURES = 20
DATA = [([rng.gauss(0, 1) for _ in range(FEATURES)], rng.random() < 0.5) for _ in range(4000)]


def load_batch(step, size=200):
    if step % 4 == 0:
        time.sleep(0.01)                     # a slow read now and then
    start = (step * size) % len(DATA)
    return DATA[start:start + size]


def predict(w, x):
    z = sum(wi * xi for wi, xi in zip(w, x))
    return 1.0 / (1.0 + math.exp(-z))


def gradient(w, batch):
    g = [0.0] * len(w)
    for x, y in batch:
        err = predict(w, x) - y
        for i, xi in enumerate(x):
            g[i] += err * xi
    return [gi / len(batch) for gi in g]


def train(steps=12, lr=0.1):
    w = [0.0] * FEATURES
    for step in range(steps):
        with pyprof.step(f"batch {step}"):
            batch = load_batch(step)
            g = gradient(w, batch)
            w = [wi - lr * gi for wi, gi in zip(w, g)]
    return w


if __name__ == "__main__":
    weights = train()
    print(f"trained {len(weights)} weights")
