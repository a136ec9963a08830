"""The traffic pipeline: a PySpark job over broker traffic traces and a topology.

Modules, in the order the data flows:

* :mod:`leveret.pipeline.schema`: the trace's ``StructType`` s (version 3 segments of
  ``broker/trace/``: rows and counts; versions 1 and 2: JSON lines read whole);
* :mod:`leveret.pipeline.inputs`: the inputs checked and the segments' dictionaries read before
  Spark starts (PyArrow, no Spark);
* :mod:`leveret.pipeline.topology`: topology sources (``leveret log dump`` lines, RabbitMQ
  ``definitions.json``) to topology events and projections (pure Python, no Spark);
* :mod:`leveret.pipeline.router`: routes trace keys with ``leveret.exchanges.routing.route``;
  what the driver runs, or Spark once per partition for many keys (pure Python, no Spark);
* :mod:`leveret.pipeline.transforms`: pure ``DataFrame -> DataFrame`` functions (the pass,
  distributed routing, the tables in Spark for traces too big for the driver);
* :mod:`leveret.pipeline.local`: every table from the pass's groups on the driver, in Arrow (the
  usual case);
* :mod:`leveret.pipeline.report`: the self-contained HTML report and its charts;
* :mod:`leveret.pipeline.progress`: stage log lines and task progress while the job runs;
* :mod:`leveret.pipeline.collect`: the summary and the report's rows, gathered from the tables;
* :mod:`leveret.pipeline.cli`: the job's options and arguments (no Spark import, for ``leveret``);
* :mod:`leveret.pipeline.job`: extract, transform, load, and the command line
  (``spark-submit pipeline/job.py`` or ``leveret analyze``).

Layers: ``pipeline`` imports pyspark, pyarrow, matplotlib and :mod:`exchanges` only, never
``broker`` or ``storage`` (``tests/test_layers.py``).
"""
