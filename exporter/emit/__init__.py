"""Emitters of the fused groups, one module per family (registered in ``exporter/fused.py``)."""
