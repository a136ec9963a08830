"""garagemq (a Go AMQP 0-9-1 broker; Debian's ``garagemq`` package) as a private node for
``run.py``: its own ports, config file and database directory, wiped at each start.

``apt-get install -y garagemq`` installs ``/usr/bin/garagemq`` and a default config,
``/etc/garagemq/config.yaml``, of which :data:`CONFIG` is a copy with the addresses and
paths changed: the AMQP listener on a free port of 127.0.0.1, the admin HTTP server (which
garagemq always starts; it cannot be turned off) on another, the badger database in the
scratch directory. The package's systemd unit is not used: the bench starts the binary
itself (``garagemq --config FILE --log-level warning``) and stops it at the end, like a
private RabbitMQ node (``rabbitmq_node.sh``).

Known on the Debian build 0.0~git20200204.15e6a9d (2020): the topic exchange misroutes
(``loadgen/topic.py``'s reference check finds more enqueued messages than the bindings
match), so ``run.py`` prints "wrong routes" for it instead of a figure. Reduced by hand: a
binding ``wbl.#`` takes the routing keys ``wblt.x`` and ``wblt`` (a word followed by ``#``
matches as a string prefix, not as a whole word), while ``ab.cd`` and ``wbl.*`` match as
they should.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from workloads import ChildBroker, free_port

BINARY = "garagemq"
INSTALL_HINT = "apt-get install garagemq"

# /etc/garagemq/config.yaml of the Debian package; {placeholders} filled in per start. The
# password is the MD5 of "guest" (security.passwordCheck md5), as in the package's file.
CONFIG = """\
proto: amqp-rabbit
users:
  - username: guest
    password: 084e0343a0486ff05530df6c705c8bb4
tcp:
  ip: 127.0.0.1
  port: {port}
  nodelay: false
  readBufSize: 196608
  writeBufSize: 196608
admin:
  ip: 127.0.0.1
  port: {admin_port}
queue:
  shardSize: 8192
  maxMessagesInRam: 131072
db:
  defaultPath: {db}
  engine: badger
vhost:
  defaultPath: /
security:
  passwordCheck: md5
connection:
  channelsMax: 4096
  frameMaxSize: 65536
"""


def binary() -> str | None:
    """The garagemq executable on PATH, or None."""
    return shutil.which(BINARY)


def version() -> str:
    """The installed package's version (dpkg), or "unknown"."""
    try:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Version}", BINARY],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


class GaragemqProcess(ChildBroker):
    """garagemq as a child process with a config file and database of its own."""

    kind = "garagemq"
    # Its database's INFO lines (whatever --log-level says), and the error it logs for the
    # bench's start-up probe (a TCP connect that sends no protocol header).
    noise = ("badger ", 'msg="Error on read protocol header"')

    def __init__(self, log_path: Path, executable: str) -> None:
        super().__init__(log_path)
        self.executable = executable
        self.admin_port = free_port()

    def prepare(self, scratch: Path) -> None:
        text = CONFIG.format(port=self.port, admin_port=self.admin_port, db=scratch / "db")
        (scratch / "config.yaml").write_text(text)

    def command(self, scratch: Path) -> list[str]:
        config = scratch / "config.yaml"
        return [self.executable, "--config", str(config), "--log-level", "warning"]
