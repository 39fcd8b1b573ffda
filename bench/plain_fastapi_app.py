"""The peer the serving bench compares against: a hand-written FastAPI + onnxruntime app.

What people write first: a pydantic body in the Open Inference Protocol's JSON
shape, one ``session.run`` per request (no batching), JSON out::

    python bench/plain_fastapi_app.py model.onnx 8100
"""

from __future__ import annotations

import sys

import numpy as np
import onnxruntime as ort
import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel


class Tensor(BaseModel):
    name: str
    shape: list[int]
    datatype: str
    data: list


class InferRequest(BaseModel):
    inputs: list[Tensor]


def build_app(model_path: str) -> FastAPI:
    session = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    input_name = session.get_inputs()[0].name
    output_name = session.get_outputs()[0].name
    app = FastAPI()

    @app.get("/v2/health/ready")
    def ready():
        return {"ready": True}

    @app.post("/v2/models/{name}/infer")
    def infer(name: str, request: InferRequest):
        tensor = request.inputs[0]
        x = np.asarray(tensor.data, dtype=np.float32).reshape(tensor.shape)
        y = session.run([output_name], {input_name: x})[0]
        return {"model_name": name, "outputs": [
            {"name": output_name, "shape": list(y.shape), "datatype": "FP32",
             "data": y.reshape(-1).tolist()}]}

    return app


if __name__ == "__main__":
    uvicorn.run(build_app(sys.argv[1]), host="127.0.0.1", port=int(sys.argv[2]),
                log_level="warning")
