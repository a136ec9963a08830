"""Erlang's ``erlang:phash2/1`` and the jump consistent hash of RabbitMQ's consistent-hash
exchange, bit for bit, so that Leveret sends a message to the same queue RabbitMQ would.

Two pieces of the Erlang runtime are reproduced here:

* ``phash2`` (erts ``make_hash2``, erl_term_hashing.c): Bob Jenkins' lookup2 mix over the
  term. The terms a header or property value becomes are covered: binaries, atoms
  (``undefined``, a header's type tag), integers below 2^64, floats, tuples
  (``{longstr, <<"v">>}``) and lists (arrays and tables). Erlang documents the function
  as portable: the same value on every architecture and ERTS version.
* ``rand:uniform_s/1`` on an ``exs1024`` state seeded with ``{K, K, K}`` (stdlib rand.erl:
  xorshift1024*, seeded through xorshift64*), which the exchange's jump hash draws from.

Checked against ``erl`` (OTP 25) by the golden values in tests/routing/test_chash.py.
"""

from __future__ import annotations

import struct

_M32 = 0xFFFFFFFF
_M64 = 0xFFFFFFFFFFFFFFFF
_HCONST = 0x9E3779B9  # the golden ratio
_HCONST_2 = 0x3C6EF372
_HCONST_3 = 0xDAA66D2B  # HCONST * n mod 2^32, as make_hash2 names them
_HCONST_4 = 0x78DDE6E4
_HCONST_9 = 0x8FF34781
_HCONST_10 = 0x2E2AC13A
_HCONST_11 = 0xCC623AF3
_HCONST_12 = 0x6A99B4AC
_HCONST_13 = 0x08D12E65
PHASH2_RANGE = 1 << 27  # erlang:phash2/1's default range
_NIL = 2  # what make_hash2 mixes in for a [] (its NIL_DEF), found against erl
_NIL_FIRST = 3468870702  # make_hash2's value for a [] seen first


class Atom(str):
    """An Erlang atom (``undefined``, ``longstr``): hashed by name, unlike a binary."""

    __slots__ = ()


UNDEFINED = Atom("undefined")


def _mix(a: int, b: int, c: int) -> tuple[int, int, int]:
    a = (a - b - c) & _M32 ^ (c >> 13)
    b = (b - c - a) & _M32 ^ (a << 8) & _M32
    c = (c - a - b) & _M32 ^ (b >> 13)
    a = (a - b - c) & _M32 ^ (c >> 12)
    b = (b - c - a) & _M32 ^ (a << 16) & _M32
    c = (c - a - b) & _M32 ^ (b >> 5)
    a = (a - b - c) & _M32 ^ (c >> 3)
    b = (b - c - a) & _M32 ^ (a << 10) & _M32
    c = (c - a - b) & _M32 ^ (b >> 15)
    return a, b, c


def _block_hash(data: bytes, initval: int) -> int:
    a = b = _HCONST
    c = initval
    full = len(data) - len(data) % 12
    for i in range(0, full, 12):
        a = (a + int.from_bytes(data[i : i + 4], "little")) & _M32
        b = (b + int.from_bytes(data[i + 4 : i + 8], "little")) & _M32
        c = (c + int.from_bytes(data[i + 8 : i + 12], "little")) & _M32
        a, b, c = _mix(a, b, c)
    tail = data[full:]
    c = (c + len(data)) & _M32
    # The tail's bytes 0-3 go to a, 4-7 to b and 8-10 to c's upper three bytes (the
    # lowest byte of c holds the length).
    a = (a + int.from_bytes(tail[0:4], "little")) & _M32
    b = (b + int.from_bytes(tail[4:8], "little")) & _M32
    c = (c + (int.from_bytes(tail[8:11], "little") << 8)) & _M32
    return _mix(a, b, c)[2]


def _uint32_hash(value: int, const: int, hash_: int) -> int:
    return _mix((const + value) & _M32, const, hash_)[2]


def _atom_value(name: str) -> int:
    """The atom table's hash of an atom's name (erts atom.c: hashpjw over its bytes)."""
    h = 0
    for byte in name.encode("latin-1"):
        h = ((h << 4) + byte) & _M32
        g = h & 0xF0000000
        if g:
            h ^= g >> 24
            h ^= g
    return h


def _integer(value: int, hash_: int) -> int:
    if -(1 << 27) <= value < (1 << 27):
        if value < 0:
            hash_ = _uint32_hash(-value, _HCONST, hash_)  # negatives are mixed twice
        return _uint32_hash(value & _M32, _HCONST, hash_)
    # Wider smalls and one-digit bignums: the magnitude's two words, the sign in the constant.
    if not -(1 << 64) < value < (1 << 64):
        raise ValueError(f"{value} is wider than 64 bits")
    const, t = (_HCONST_10, -value) if value < 0 else (_HCONST_11, value)
    return _mix((const + (t & _M32)) & _M32, (const + (t >> 32)) & _M32, hash_)[2]


def _is_byte(item: object) -> bool:
    return type(item) is int and 0 <= item <= 255


def make_hash2(term: object) -> int:
    """erts ``make_hash2``: the 32-bit hash before ``phash2`` takes it into range.

    A work stack visits the term depth first, as the C code does: a tuple mixes in its
    arity and then its elements in order; a list first folds a leading run of bytes four at
    a time (its string optimisation), then visits its head and its tail.
    """
    hash_ = 0
    stack = [term]
    while stack:
        item = stack.pop()
        if isinstance(item, Atom):
            value = _atom_value(item)
            # An atom seen first is taken as it is ("fast, but the poor hash value should
            # be mixed"); later ones are mixed in.
            hash_ = value if hash_ == 0 else _uint32_hash(value, _HCONST_3, hash_)
        elif isinstance(item, bytes):
            con = (_HCONST_13 + hash_) & _M32
            hash_ = _block_hash(item, con) if item else con
        elif type(item) is int:
            hash_ = _integer(item, hash_)
        elif type(item) is float:
            bits = struct.unpack("<Q", struct.pack("<d", item + 0.0))[0]  # -0.0 as 0.0
            hash_ = _mix(
                (_HCONST_12 + (bits >> 32)) & _M32, (_HCONST_12 + (bits & _M32)) & _M32, hash_
            )[2]
        elif isinstance(item, tuple):
            hash_ = _uint32_hash(len(item), _HCONST_9, hash_)
            stack.extend(reversed(item))
        elif isinstance(item, list):
            if not item:
                hash_ = _NIL_FIRST if hash_ == 0 else _uint32_hash(_NIL, _HCONST_2, hash_)
                continue
            run = 0
            folded = count = 0
            while run < len(item) and _is_byte(item[run]):
                folded = ((folded << 8) + item[run]) & _M32
                if count == 3:
                    hash_ = _uint32_hash(folded, _HCONST_4, hash_)
                    folded = count = 0
                else:
                    count += 1
                run += 1
            if count:
                hash_ = _uint32_hash(folded, _HCONST_4, hash_)
            if run == len(item):
                stack.append([])
            else:
                stack.append(item[run + 1 :])
                stack.append(item[run])
        else:
            raise TypeError(f"no Erlang term for {item!r}")
    return hash_


def phash2(term: object) -> int:
    """``erlang:phash2(Term)``: a portable hash in ``0 .. 2^27 - 1``."""
    if type(term) is bytes and term:  # a routing key: skip the work stack
        return _block_hash(term, _HCONST_13) & (PHASH2_RANGE - 1)
    return make_hash2(term) & (PHASH2_RANGE - 1)


def _exs1024_state(seed: int) -> list[int]:
    """``rand:seed_s(exs1024, {Seed, Seed, Seed})``: sixteen xorshift64* outputs from a
    seed made of three 21-bit multiples, newest first (rand.erl conses each onto its list)."""
    low = seed & 0x1FFFFF
    r = (
        ((((low + 1) * 2097131) & 0x1FFFFF) << 43)
        | ((((low + 1) * 2097133) & 0x1FFFFF) << 22)
        | ((((low + 1) * 2097143) & 0x1FFFFF) << 1)
        | 1
    )
    state = [0] * 16
    for i in range(15, -1, -1):
        r ^= r >> 12
        r ^= (r << 25) & _M64
        r ^= r >> 27
        state[i] = (r * 2685821657736338717) & _M64
    return state


def jump_consistent_hash(key: int, buckets: int) -> int:
    """The bucket (``0 .. buckets - 1``) for ``key``, as the exchange's
    ``jump_consistent_hash/2`` picks it: Lamping and Veach's jump hash, drawing each jump
    from ``rand:uniform_s/1`` on the exs1024 (xorshift1024*) state seeded with the key."""
    if buckets == 1:
        return 0
    state = _exs1024_state(key)
    chosen, jump, p = -1, 0, 0
    while jump < buckets:
        chosen = jump
        s0 = state[p]
        p = (p + 1) & 15
        s1 = state[p]
        s1 ^= (s1 << 31) & _M64
        s1 ^= s1 >> 11
        s0 ^= s0 >> 30
        state[p] = s0 ^ s1
        # uniform_s/1: the top 53 bits of the 64-bit output as a float in [0, 1).
        draw = (((state[p] * 1181783497276652981) & _M64) >> 11) * 2.0**-53
        jump = int((chosen + 1) / draw)
    return chosen
