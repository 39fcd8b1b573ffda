"""Train a tiny sequence labeller with CTC loss in an nn.Graph, then save and export it.

Each sample is a sequence of 1 to 4 labels (of 5); every label is spoken as 2 to 4 noisy
frames of its own feature vector. The model sees the frames only (no alignment) and learns,
through ``nn.CTCLoss``, to emit the labels; greedy decoding (best class per frame, repeats
and blanks dropped) reads them back. The model flattens the batch and time into one dim
(``x.view(N * T, F)``), which stays a dynamic batch in the saved graph.

Run: python examples/ctc_graph_train.py [--out DIR]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

import flowserve as flow
import flowserve.nn as nn
import flowserve.nn.functional as F
from flowserve.exporter import export

LABELS, FEATURES, FRAMES, BLANK = 5, 8, 16, 0
RNG = np.random.default_rng(0)
VOICES = RNG.standard_normal((LABELS + 1, FEATURES)).astype(np.float32) * 2  # one per class; 0 is silence


def batch(n: int):
    """Frames (N, T, F), padded targets (N, 4), input and target lengths."""
    frames = np.tile(VOICES[BLANK], (n, FRAMES, 1))
    targets, target_lengths, lengths = np.zeros((n, 4), np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64)
    for i in range(n):
        labels = RNG.integers(1, LABELS + 1, RNG.integers(1, 5))
        t = 0
        for label in labels:
            span = RNG.integers(2, 4)
            frames[i, t:t + span] = VOICES[label]
            t += span + 1  # one frame of silence between labels
        targets[i, :len(labels)], target_lengths[i], lengths[i] = labels, len(labels), t
    frames += RNG.standard_normal(frames.shape).astype(np.float32) * 0.5
    return frames.astype(np.float32), targets, lengths, target_lengths


class Labeller(nn.Module):
    def __init__(self):
        super().__init__()
        self.frame = nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, LABELS + 1))

    def forward(self, x):  # (N, T, F) -> log-probabilities (N, T, classes)
        n, t, f = x.shape
        return self.frame(x.view(n * t, f)).view(n, t, -1).log_softmax(-1)


class TrainGraph(nn.Graph):
    def __init__(self, model, optimizer):
        super().__init__()
        self.model, self.ctc = model, nn.CTCLoss(blank=BLANK)
        self.add_optimizer(optimizer)

    def build(self, frames, targets, lengths, target_lengths):
        log_probs = self.model(frames).transpose(0, 1)  # CTC reads (T, N, classes)
        loss = self.ctc(log_probs, targets, lengths, target_lengths)
        loss.backward()
        return loss


class DecodeGraph(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, frames):
        return self.model(frames)


def greedy(log_probs: np.ndarray, length: int) -> list:
    best = log_probs[:length].argmax(-1)
    return [int(c) for i, c in enumerate(best) if c != BLANK and (i == 0 or c != best[i - 1])]


def main(out: Path) -> None:
    flow.manual_seed(0)
    model = Labeller()
    graph = TrainGraph(model, flow.optim.Adam(model.parameters(), lr=0.01))
    for step in range(150):
        loss = graph(*[flow.tensor(a) for a in batch(16)])
        if step % 50 == 0 or step == 149:
            print(f"step {step:3d}  ctc loss {float(loss):.3f}")
    model.eval()
    decode = DecodeGraph(model)
    frames, targets, lengths, target_lengths = batch(32)
    log_probs = decode(flow.tensor(frames)).numpy()
    right = sum(greedy(log_probs[i], lengths[i]) == targets[i, :target_lengths[i]].tolist() for i in range(32))
    print(f"greedy decoding: {right}/32 label sequences exactly right")
    flow.save(decode, out / "labeller")
    export(out / "labeller", out / "labeller.onnx")  # checked at batch sizes 2 and 5 (a dynamic batch)
    print(f"saved {out / 'labeller'} and exported {out / 'labeller.onnx'}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.out is None:
        with tempfile.TemporaryDirectory() as tmp:
            main(Path(tmp))
    else:
        main(args.out)
