"""Random bits for names and ids, without a system call for each.

Checkpoint ids, temporary file names and timeline event ids only have to differ from
each other (manifests are signed; nothing relies on an id being hard to guess).  A
generator seeded once per process from the OS (and again in a forked child, which
must not repeat its parent's names) gives them; ``secrets`` asked the OS at every id,
three times in a small cell's save, and each call let the writer thread take over
the interpreter.
"""

from __future__ import annotations

import os
import random

_generator = random.Random()


def _reseed() -> None:
    _generator.seed(os.urandom(32))


_reseed()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reseed)


def random_bits(count: int) -> int:
    """*count* random bits as an int.

    >>> 0 <= random_bits(64) < 2**64
    True
    """
    return _generator.getrandbits(count)


def random_hex(count: int) -> str:
    """*count* random bytes as hex digits (``secrets.token_hex``, without the system call).

    >>> len(random_hex(6))
    12
    """
    return f"{_generator.getrandbits(8 * count):0{2 * count}x}"
