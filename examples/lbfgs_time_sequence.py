"""Time-sequence prediction with L-BFGS (pytorch/examples' ``time_sequence_prediction``, small):
two stacked ``LSTMCell``s learn sine waves, trained by ``flow.optim.LBFGS`` with a closure, then
predict the waves' continuation. Only the import differs from the PyTorch script.

    python examples/lbfgs_time_sequence.py [--steps 4]
"""

import argparse

import numpy as np

import flowserve as torch  # the PyTorch script's code below runs unchanged
import flowserve.nn as nn


class Sequence(nn.Module):
    def __init__(self, hidden=24):
        super().__init__()
        self.hidden = hidden
        self.lstm1 = nn.LSTMCell(1, hidden)
        self.lstm2 = nn.LSTMCell(hidden, hidden)
        self.linear = nn.Linear(hidden, 1)

    def forward(self, input, future=0):
        outputs = []
        h_t = c_t = torch.zeros(input.size(0), self.hidden, dtype=input.dtype)
        h_t2 = c_t2 = torch.zeros(input.size(0), self.hidden, dtype=input.dtype)
        output = None
        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        for _ in range(future):  # predict the continuation from the model's own outputs
            h_t, c_t = self.lstm1(output, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        return torch.cat(outputs, dim=1)


def sine_waves(n=12, length=40, period=20.0, seed=2):
    shifts = np.random.default_rng(seed).integers(-4 * int(period), 4 * int(period), (n, 1))
    return np.sin((np.arange(length) + shifts) / period).astype(np.float32)


def main(steps: int) -> None:
    torch.manual_seed(0)
    data = sine_waves()
    input, target = torch.from_numpy(data[3:, :-1]), torch.from_numpy(data[3:, 1:])
    test_input, test_target = torch.from_numpy(data[:3, :-1]), torch.from_numpy(data[:3, 1:])
    seq = Sequence()
    criterion = nn.MSELoss()
    optimizer = torch.optim.LBFGS(seq.parameters(), lr=0.8, max_iter=8, line_search_fn="strong_wolfe")
    losses = []
    for i in range(steps):
        def closure():
            optimizer.zero_grad()
            loss = criterion(seq(input), target)
            loss.backward()
            return loss

        losses.append(float(optimizer.step(closure)))
        with torch.no_grad():
            future = 10
            pred = seq(test_input, future=future)
            test_loss = float(criterion(pred[:, :-future], test_target))
        print(f"step {i}: train loss {losses[-1]:.5f}, test loss {test_loss:.5f}, "
              f"prediction {tuple(pred.shape)} ({future} steps ahead)")
    print(f"train loss fell from {losses[0]:.5f} to {losses[-1]:.5f}: {losses[-1] < losses[0]}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    main(parser.parse_args().steps)
