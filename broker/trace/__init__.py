"""The traffic trace (``leveret serve --trace-dir``): columnar segments for the Spark pipeline.

One module per concern: :mod:`~leveret.trace.schema` (the file format, schema version 3,
documented there, and the dictionary ids), :mod:`~leveret.trace.recorder` (the publish path:
one shared int per row), :mod:`~leveret.trace.writer` (the thread that writes them),
:mod:`~leveret.trace.segment` (one segment's files) and :mod:`~leveret.trace.reading`
(``leveret trace dump`` and ``convert``).

Rule at the door: the trace sits beside the node, whose events its recorder subscribes to:
it may import :mod:`leveret.node`, :mod:`leveret.config` and the domain, never the
session, the wire or the operator packages; the node, the wire, the server and the
operator packages import it.
"""

from leveret.trace.reading import convert, read_dictionary, read_messages, segment_files
from leveret.trace.schema import (
    ID_BITS,
    SCHEMA_VERSION,
    TraceError,
    key_fragment,
    key_id,
    queues_fragment,
    require_arrow,
    schemas,
)
from leveret.trace.segment import Segment
from leveret.trace.writer import TraceWriter

__all__ = [
    "ID_BITS",
    "SCHEMA_VERSION",
    "Segment",
    "TraceError",
    "TraceWriter",
    "convert",
    "key_fragment",
    "key_id",
    "queues_fragment",
    "read_dictionary",
    "read_messages",
    "require_arrow",
    "schemas",
    "segment_files",
]
