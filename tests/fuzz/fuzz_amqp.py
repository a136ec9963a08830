"""Coverage-guided fuzzing of the frame reader, the handshake and the session with atheris
(libFuzzer for Python): ``python -m tests.fuzz.fuzz_amqp [libFuzzer flags] [CORPUS_DIR...]``.

The target is tests/fuzz/target.py (the real Connection, a fake transport, no socket);
Leveret's modules and pamqp are instrumented for edge coverage. ``make fuzz`` runs it for
FUZZ_SECONDS with the committed corpus (tests/fuzz/corpus/) as seeds, new inputs kept in
build/fuzz-corpus/, and ends with one line of totals: executions, executions per second,
coverage (libFuzzer's ``cov``: instrumented edges reached; ``ft``: features). A crash is
written by libFuzzer as ``crash-<sha1>`` in the current directory (``-artifact_prefix=``
moves it): replay it with ``python -m tests.fuzz.fuzz_amqp crash-<sha1>``, fix the broker,
and add the input to tests/fuzz/regressions/ (tests/fuzz/test_fuzz.py replays them all).
"""

from __future__ import annotations

import base64
import sys

import atheris

with atheris.instrument_imports(include=["leveret", "pamqp"]):
    from tests.fuzz.target import run


def test_one_input(data: bytes) -> None:
    """One fuzzer input: a violation or an exception is a crash for libFuzzer (the input
    is printed too, in base64, in case libFuzzer cannot write its crash file)."""
    try:
        run(data)
    except BaseException:
        print(f"crashing input (base64): {base64.b64encode(data).decode()}", file=sys.stderr)
        raise


def main() -> None:
    """Hand the command line to libFuzzer (it exits the process when done)."""
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
