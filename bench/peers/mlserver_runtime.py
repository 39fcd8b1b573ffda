"""An MLServer custom runtime running an ONNX file with onnxruntime (adaptive batching
is MLServer's, set by ``max_batch_size`` / ``max_batch_time`` in model-settings.json)."""

from __future__ import annotations

from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse

from onnx_models import session_and_signature


class OnnxRuntimeModel(MLModel):
    """``parameters.uri`` names the ONNX file; one input, one output."""

    async def load(self) -> bool:
        self._session, (self._input, _), (self._output, _) = session_and_signature(
            self.settings.parameters.uri)
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        x = NumpyCodec.decode_input(payload.inputs[0])
        y = self._session.run([self._output], {self._input: x})[0]
        return InferenceResponse(model_name=self.name, model_version=self.version,
                                 outputs=[NumpyCodec.encode_output(self._output, y)])
