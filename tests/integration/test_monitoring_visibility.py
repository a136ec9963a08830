"""What a ``monitoring`` user sees of vhosts it has no permissions on: the vhost itself
(list_visible_vhosts: monitors see every vhost) but not its queues, exchanges or bindings,
which rabbit_mgmt_util:filter_vhost/3 narrows to the vhosts the user may log in to for everyone
but administrators (rabbit_mgmt_wm_queues, _exchanges, _bindings; observed on RabbitMQ 3.10.8).
Runs against RabbitMQ too with ``-m rabbitmq``.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator

import pytest

from .helpers import PASSWORD, Http, Tenant, unique

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def foreign(tenant: Tenant) -> Iterator[str]:
    """A vhost the tenant user has no permissions on, with a queue ``hidden`` in it."""
    vhost = unique("lt-foreign")
    quoted = urllib.parse.quote(vhost, safe="")
    assert tenant.api("PUT", f"/api/vhosts/{quoted}", {})[0] == 201
    assert tenant.api("PUT", f"/api/queues/{quoted}/hidden", {"durable": False})[0] == 201
    yield vhost
    tenant.api("DELETE", f"/api/vhosts/{quoted}")


@pytest.mark.parametrize("tags", ["monitoring", "management"])
def test_queues_exchanges_and_bindings_of_vhosts_without_permissions_are_not_listed(
    tenant: Tenant, foreign: str, tags: str
) -> None:
    assert tenant.api("PUT", f"/api/users/{tenant.user}", {"password": PASSWORD, "tags": tags})[
        0
    ] in (201, 204)
    assert tenant.api("PUT", tenant.path("queues", "mine"), {"durable": False})[0] == 201
    viewer = Http(tenant.api.base, tenant.user, PASSWORD)
    for kind in ("queues", "exchanges", "bindings"):
        status, items = viewer("GET", f"/api/{kind}")
        assert status == 200, items
        vhosts = {item["vhost"] for item in items}
        assert foreign not in vhosts, kind
        assert tenant.vhost in vhosts, kind
    status, vhosts_listed = viewer("GET", "/api/vhosts")
    names = {item["name"] for item in vhosts_listed}
    # Monitors see every vhost in the vhost list; management users only their own.
    assert (foreign in names) == (tags == "monitoring")


def test_an_administrator_sees_the_queues_of_every_vhost(tenant: Tenant, foreign: str) -> None:
    status, items = tenant.api("GET", "/api/queues")
    assert status == 200
    assert (foreign, "hidden") in {(item["vhost"], item["name"]) for item in items}
