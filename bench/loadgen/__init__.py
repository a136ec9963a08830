"""The project's AMQP 0-9-1 load generator: ``wire.py`` (raw frames over asyncio) and one
script per workload kind, each run as a fresh process by ``bench/run.py`` and
``bench/profile.py`` (see ``bench/workloads.py``) and printing one JSON object on its last
stdout line. A package only so that the scripts in ``bench/`` can ``from loadgen import
wire``; the scripts here import ``wire`` as their sibling."""
