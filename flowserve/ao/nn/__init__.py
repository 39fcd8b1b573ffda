"""``flowserve.ao.nn``: PyTorch's ``torch.ao.nn`` names (``intrinsic``: fused float modules)."""
