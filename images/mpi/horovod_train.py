"""Data-parallel training with Horovod and TensorFlow on synthetic data (CPU): every rank trains a small
Keras model on its own shard, gradients are averaged with allreduce, and rank 0 reports the loss per epoch.

    horovodrun -np N python /home/mpiuser/horovod_train.py --epochs 2
"""

import argparse

import horovod.tensorflow.keras as hvd
import numpy as np
import tensorflow as tf


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--samples", type=int, default=2048)
    args = parser.parse_args()

    hvd.init()
    print(f"horovod rank {hvd.rank()} of {hvd.size()} (local rank {hvd.local_rank()})", flush=True)
    rng = np.random.default_rng(seed=hvd.rank())
    x = rng.normal(size=(args.samples, 16)).astype("float32")
    y = (x.sum(axis=1, keepdims=True) > 0).astype("float32")

    model = tf.keras.Sequential([tf.keras.layers.Dense(32, activation="relu"), tf.keras.layers.Dense(1, activation="sigmoid")])
    optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.05 * hvd.size()))
    model.compile(optimizer=optimizer, loss="binary_crossentropy", metrics=["accuracy"])
    history = model.fit(
        x, y, batch_size=64, epochs=args.epochs, verbose=0,
        callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), hvd.callbacks.MetricAverageCallback()],
    )
    if hvd.rank() == 0:
        for epoch, (loss, acc) in enumerate(zip(history.history["loss"], history.history["accuracy"]), 1):
            print(f"epoch {epoch}: loss {loss:.4f} accuracy {acc:.4f} over {hvd.size()} ranks", flush=True)


if __name__ == "__main__":
    main()
