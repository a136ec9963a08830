"""tests/plugin: the pytest plugin (broker/testing.py) and the inspector (broker/inspect.py).

The project's tests/conftest.py overrides the plugin's ``amqp_url`` and ``leveret`` with its
own (a session-wide URL parametrised over Leveret and RabbitMQ, and the broker thread).
Importing the plugin's fixtures here registers them again at this directory's level, so
the tests below get the plugin's versions: a fresh vhost per test and its inspector.
Tests of the plugin as a user sees it run in a clean project through ``pytester``.
"""

# In-process pytester runs remove the modules first imported during the run from
# sys.modules afterwards. The broker and the clients are imported here first, so all runs
# share one copy of them (two copies of pamqp's classes cannot talk to each other), and so
# is hypothesis, which its pytest plugin imports at each run otherwise (~0.5 s).
import aio_pika  # noqa: F401
import hypothesis  # noqa: F401
import kombu  # noqa: F401
import pika  # noqa: F401

import leveret.server
from leveret.testing import amqp_url, leveret  # noqa: F401 - registered as fixtures here
