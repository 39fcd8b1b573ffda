"""How a graph runs, stage by stage (each stage a value in, a value out):

1. ``trace``     ``flowserve.nn.graph.trace.trace_build``: ``build()`` once on lazy inputs ->
                 ``Traced`` (IR, state, signature, batch marks);
2. ``passes``    ``flowserve.nn.graph.passes.GRAPH_PASSES`` (one ``PassManager`` list) rewrite
                 the IR as the config and the modules' options ask;
3. ``execute``   ``flowserve.nn.graph.executor.make_executor``: the executor kind the IR needs
                 (one session, segments between collectives, a pipeline stage);
4. ``deploy``    ``flowserve.nn.graph.inference.deployable_state``: what ``flow.save`` and
                 export write, read from the traces the calls made.
"""

from __future__ import annotations

from flowserve import env
from flowserve.nn.graph.passes import PassContext, run_graph_passes
from flowserve.nn.graph.trace import Traced, trace_build


def pass_context(graph, traced: Traced) -> PassContext:
    """What the graph passes read of ``graph`` (config, modules' options) and of the trace."""
    return PassContext(options=dict(graph.config.options), training=graph.training,
                       modules=graph.graph_modules(), forward_values=traced.forward_values,
                       world_size=env.get_world_size(), constants=traced.constants)


def trace_and_rewrite(graph, args: tuple, kwargs: dict, names: list[str] | None = None,
                      on_start=None) -> Traced:
    """Stages 1 and 2: the trace of ``graph.build`` on ``args``/``kwargs``, its IR rewritten
    by the graph passes (the passes that changed it in ``ir.attrs["passes"]``)."""
    traced = trace_build(graph, args, kwargs, names, on_start)
    run_graph_passes(traced.ir, pass_context(graph, traced))
    traced.prune_state()
    return traced
