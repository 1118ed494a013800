"""Train an MLP classifier written in plain numpy, compiled by irc.jit and differentiated by irc.grad.

    python examples/train_mlp.py

The loss below is ordinary numpy: it runs eagerly on numpy arrays (the last lines call it
that way) and compiles unchanged under ``irc.jit``.  ``irc.grad`` differentiates it
symbolically (the ``grad`` pass), and the training step donates the parameters, so each step
writes the new parameters into the old ones' buffers instead of allocating.
"""

from __future__ import annotations

import time

import numpy as np

import irc


def make_data(rng, n: int, classes: int = 3, dims: int = 2):
    """Points around ``classes`` centres on a circle, with noise: a task a linear model cannot
    separate as well as a hidden layer can."""
    labels = rng.integers(0, classes, n)
    angles = 2 * np.pi * labels / classes
    centres = np.stack([np.cos(angles), np.sin(angles)], axis=1) * 2.0
    x = centres + rng.standard_normal((n, dims)) * 0.8
    x = np.concatenate([x, x[:, :1] * x[:, 1:2]], axis=1)  # one product feature
    return x.astype(np.float32), np.eye(classes, dtype=np.float32)[labels], labels


def init(rng, sizes):
    params = {}
    for k, (m, n) in enumerate(zip(sizes[:-1], sizes[1:])):
        params[f"w{k}"] = (rng.standard_normal((m, n)) * np.sqrt(2.0 / m)).astype(np.float32)
        params[f"b{k}"] = np.zeros(n, np.float32)
    return params


def forward(params, x):
    h = x
    layers = len(params) // 2
    for k in range(layers):  # a Python loop over the layers: unrolled while tracing
        h = h @ params[f"w{k}"] + params[f"b{k}"]
        if k < layers - 1:
            h = np.maximum(h, 0.0)
    return h


def loss(params, x, y):
    """Mean cross-entropy of the softmax of the logits, written the numerically careful way."""
    logits = forward(params, x)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))
    return -np.mean(np.sum(log_probs * y, axis=1))


def sgd_step(params, x, y, lr):
    value, grads = irc.value_and_grad(loss)(params, x, y)
    return {k: params[k] - lr * grads[k] for k in params}, value


def main() -> None:
    rng = np.random.default_rng(0)
    x, y, labels = make_data(rng, 512)
    params = init(rng, [3, 64, 64, 3])
    step = irc.jit(sgd_step, donate_argnums=0)

    start = time.perf_counter()
    params, value = step(params, x, y, 0.1)
    print(f"first step (trace + grad + compile): {time.perf_counter() - start:.2f} s, loss {float(value):.4f}")
    start = time.perf_counter()
    for epoch in range(1, 301):
        params, value = step(params, x, y, 0.1)
        if epoch % 50 == 0:
            print(f"step {epoch:4d}  loss {float(value):.4f}")
    print(f"300 steps: {time.perf_counter() - start:.2f} s")

    # The same numpy functions run eagerly on the trained parameters.
    accuracy = np.mean(np.argmax(forward(params, x), axis=1) == labels)
    x_test, y_test, labels_test = make_data(np.random.default_rng(1), 512)
    test_accuracy = np.mean(np.argmax(forward(params, x_test), axis=1) == labels_test)
    print(f"train accuracy {accuracy:.3f}, test accuracy {test_accuracy:.3f}, "
          f"test loss {loss(params, x_test, y_test):.4f} (eager numpy)")


if __name__ == "__main__":
    main()
