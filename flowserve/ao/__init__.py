"""Algorithm optimisation: ``flowserve.ao.quantization`` (quantization-aware training)."""
