"""Pure routing domain: exchange and binding model, projections, route functions.

No asyncio, no pamqp, no I/O. The broker and the Spark pipeline both route through
:func:`leveret.exchanges.routing.route` reading a :class:`leveret.exchanges.projection.Projection`.
"""
