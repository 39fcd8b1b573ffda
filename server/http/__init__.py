"""The HTTP front end over the ``DataPlane``: Open Inference Protocol REST.

``app``: the routes and the outer ASGI app (``build_http_app``, ``FrontDoor``);
``codec``: REST bodies (JSON and the binary tensor extension) <-> ``InferenceRequest`` /
``InferenceResponse``; ``schemas``: the JSON bodies' pydantic models; ``json_arrays``:
large numeric JSON arrays parsed by numpy.
"""
