"""The traffic pipeline: a PySpark job over broker traffic traces and a topology.

Modules, in the order the data flows:

* :mod:`leveret.pipeline.schema`: the trace's ``StructType`` s (versions 1 and 2 of
  ``broker/trace.py``: message lines, the key index, whole lines);
* :mod:`leveret.pipeline.topology`: topology sources (``leveret log dump`` lines, RabbitMQ
  ``definitions.json``) to topology events and projections (pure Python, no Spark);
* :mod:`leveret.pipeline.router`: routes trace keys with ``leveret.exchanges.routing.route``;
  what Spark runs once per partition (pure Python, no Spark);
* :mod:`leveret.pipeline.transforms`: pure ``DataFrame -> DataFrame`` functions (aggregate, route,
  reports, what-if);
* :mod:`leveret.pipeline.report`: the self-contained HTML report and its charts;
* :mod:`leveret.pipeline.progress`: stage log lines and task progress while the job runs;
* :mod:`leveret.pipeline.collect`: the summary and the report's rows, gathered from the tables;
* :mod:`leveret.pipeline.cli`: the job's options and arguments (no Spark import, for ``leveret``);
* :mod:`leveret.pipeline.job`: extract, transform, load, and the command line
  (``spark-submit pipeline/job.py`` or ``leveret analyze``).

Layers: ``pipeline`` imports pyspark, matplotlib and :mod:`exchanges` only, never ``broker``
or ``storage`` (``tests/test_layers.py``).
"""
