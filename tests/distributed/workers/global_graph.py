"""One rank of a launched run that hands global tensors to an ``nn.Graph``: a module made
global, trained with local inputs and with global ones; each refusal's message goes to
OUT/rank<r>.txt, one line each."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import flowserve as flow  # noqa: E402
import flowserve.nn as nn  # noqa: E402
from flowserve.errors import GraphError  # noqa: E402


class Train(nn.Graph):
    def __init__(self, model, opt):
        super().__init__()
        self.model = model
        self.add_optimizer(opt)

    def build(self, x):
        loss = self.model(x).sum()
        loss.backward()
        return loss


out = Path(sys.argv[1])
placement = flow.placement.all("cpu")
model = nn.Linear(3, 2).to_global(placement=placement, sbp=flow.sbp.broadcast)
opt = flow.optim.SGD(model.parameters(), lr=0.1)
lines = []
for x in (flow.ones(4, 3), flow.ones(4, 3).to_global(placement=placement, sbp=flow.sbp.split(0))):
    try:
        Train(model, opt)(x)
        lines.append("ran")
    except GraphError as exc:
        lines.append(str(exc).replace("\n", " "))
model(flow.ones(4, 3, placement=placement, sbp=flow.sbp.split(0))).sum().backward()  # eager global still works
opt.step()
lines.append(f"eager {model.weight.numpy().tolist()}")
(out / f"rank{flow.env.get_rank()}.txt").write_text("\n".join(lines) + "\n")
