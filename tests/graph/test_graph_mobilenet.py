"""The documented MobileNetV2 graph (seeds: "Training in Graph Mode"): mixed precision
training against float32, and the repr / debug output before and after the first call."""

import numpy as np
import pytest

import flowserve as flow
import flowserve.nn as nn
from flowserve.amp import GradScaler

models = pytest.importorskip("flowserve.models")

BATCH = 8
# At initialisation the depthwise weights are tiny (kaiming fan_out) and batch-statistics
# BatchNorm makes the loss scale-invariant in them, so their gradients are huge: with the
# documented lr=1e-3 five SGD steps on random images are chaotic (float32 eager and float32
# graph already drift apart by ~0.1). lr=1e-7 keeps training smooth (eager and graph agree
# to 1e-3), so the comparison below measures precision, not chaos.
LR = 1e-7


def documented_model():
    flow.manual_seed(0)
    model = models.mobilenet_v2()
    model.classifer = nn.Sequential(nn.Dropout(0.2), nn.Linear(model.last_channel, 10))  # the seed's line
    model.classifier[0].p = 0.0  # no random dropout mask: runs must be comparable
    model.train()
    return model


class GraphMobileNetV2(flow.nn.Graph):
    def __init__(self, model, amp_dtype=None):
        super().__init__()
        self.model = model
        self.loss_fn = nn.CrossEntropyLoss()
        self.add_optimizer(flow.optim.SGD(model.parameters(), lr=LR))
        if amp_dtype is not None:
            self.config.enable_amp(True, dtype=amp_dtype)
            self.set_grad_scaler(GradScaler(init_scale=2.0**12))

    def build(self, x, y):
        y_pred = self.model(x)
        loss = self.loss_fn(y_pred, y)
        loss.backward()
        return loss


def cifar_batch():
    rng = np.random.default_rng(0)
    return (flow.tensor(rng.random((BATCH, 3, 32, 32), dtype=np.float32)),
            flow.tensor(rng.integers(0, 1000, size=BATCH)))


def losses(amp_dtype=None, steps: int = 5) -> np.ndarray:
    x, y = cifar_batch()
    graph = GraphMobileNetV2(documented_model(), amp_dtype)
    return np.array([float(graph(x, y).numpy()) for _ in range(steps)])


@pytest.fixture(scope="module")
def float32_losses():
    return losses()


@pytest.mark.parametrize("dtype", [flow.float16, flow.bfloat16])
def test_amp_trains_like_float32(float32_losses, dtype):
    # Rounding through float16 (11 significant bits) or bfloat16 (8) at each of the 52
    # convolutions, each followed by BatchNorm over a batch of 8, leaves the pooled features
    # 5-10% (float16) and 30-60% (bfloat16) off float32 at initialisation (measured); on the
    # loss (about 6.9: 1000 classes) that is up to 0.04 (float16) and 0.09 (bfloat16), inside
    # the 2e-2 of float32 (relative) this test allows. float16 gradients scaled by 2**12 overflow at
    # first: the grad scaler skips those steps (the loss stays put) and halves the scale.
    amp = losses(dtype)
    np.testing.assert_allclose(amp, float32_losses, rtol=2e-2)
    assert np.all(np.diff(float32_losses) < 0)


def test_repr_and_debug_of_the_documented_graph(capsys):
    graph = GraphMobileNetV2(documented_model())
    before = repr(graph)
    assert before.startswith(f"(GRAPH:{graph.name}:GraphMobileNetV2): (")
    assert "  (CONFIG:config:GraphConfig(training=True, ))" in before
    assert "(MODULE:model:MobileNetV2()): (" in before
    assert "(MODULE:model.features.0:ConvBNActivation()): (" in before
    assert "(MODULE:model.features.0.0:Conv2d(3, 32, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), " \
           "bias=False)): (" in before
    assert "(PARAMETER:model.features.0.0.weight:tensor(..., size=(32, 3, 3, 3), dtype=flowserve.float32, " \
           "requires_grad=True)): ()" in before
    assert "(BUFFER:model.features.0.1.running_mean:tensor(..., size=(32,), dtype=flowserve.float32)): ()" in before
    assert "(MODULE:model.classifer:Sequential()): (" in before
    assert "(MODULE:model.classifer.0:Dropout(p=0.2, inplace=False)): ()" in before
    assert before.endswith("  (MODULE:loss_fn:CrossEntropyLoss()): ()\n)")
    assert "INPUT" not in before and "OUTPUT" not in before
    graph.debug(1)
    graph(*cifar_batch())
    out = capsys.readouterr().out
    assert f"(GRAPH:{graph.name}:GraphMobileNetV2) start building graph." in out
    assert "building graph Done! Cost time:" in out and "building plan Done! Cost time:" in out
    assert "(MODULE:model.features.0.0:Conv2d(3, 32, kernel_size=(3, 3)" in out
    assert "(INPUT:_model.features.0.0-input_0:tensor(..., is_lazy='True', size=(8, 3, 32, 32)" in out
    after = repr(graph)
    assert f"(INPUT:_{graph.name}-input_0:tensor(..., size=(8, 3, 32, 32), dtype=flowserve.float32))" in after
    assert f"(INPUT:_{graph.name}-input_1:tensor(..., size=(8,), dtype=flowserve.int64))" in after
    assert "(INPUT:_model-input_0:tensor(..., is_lazy='True', size=(8, 3, 32, 32), dtype=flowserve.float32))" in after
    assert "(OUTPUT:_model.features.0.0-output_0:tensor(..., is_lazy='True', size=(8, 32, 16, 16), " \
           "dtype=flowserve.float32))" in after
    assert f"(OUTPUT:_{graph.name}-output_0:tensor(..., size=(), dtype=flowserve.float32))" in after
