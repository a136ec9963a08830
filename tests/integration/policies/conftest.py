"""Fixtures of the policy and operator-policy scenarios: the management API (clearing what
a test set) and a pika channel, both on the broker under test. The channel replaces, in
this directory, the integration conftest's ``ch``, which is aio-pika's.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from ..helpers import Http

# Policies and operator policies whose names start with these are cleared after each test.
PREFIXES = ("pt-", "opt-")


@pytest.fixture
def api(brokers: tuple[str, Http]) -> Iterator[Http]:
    """The management API; the test's policies and operator policies are cleared after it."""
    http = brokers[1]
    yield http
    for kind in ("policies", "operator-policies"):
        _status, found = http("GET", f"/api/{kind}/%2F")
        for policy in found or []:
            if policy["name"].startswith(PREFIXES):
                http("DELETE", f"/api/{kind}/%2F/" + urllib.parse.quote(policy["name"], safe=""))


@pytest.fixture
def ch(brokers: tuple[str, Http]) -> Iterator[BlockingChannel]:
    connection = pika.BlockingConnection(pika.URLParameters(brokers[0]))
    channel = connection.channel()
    yield channel
    if connection.is_open:
        connection.close()
