"""Quantization-aware training's modules and passes (public as ``flowserve.ao.quantization``);
they live under ``nn`` because ``nn.Graph`` prepares its modules with them
(``graph.config.enable_qat``)."""
