"""A safetensors file's header, read and bounded before anything else is: the tensor names, dtypes and shapes.

The format is 8 bytes (the header's length, little-endian) then that many bytes of JSON, then the data. A
hostile file can claim a header of 2^63 bytes, or hold 800,000 entries in a 54 MB header that a page would parse
on every run; this reader refuses both before parsing (``MAX_HEADER_BYTES``, ``MAX_ENTRIES``), and checks that
every tensor's bytes lie inside the file and match its shape, so that nothing later trusts a number the file
made up. Reading the data itself is left to the safetensors library, after this check.
"""
from __future__ import annotations

import json
import math
import struct

from core.serve.folder_files import open_inside

MAX_HEADER_BYTES = 4 * 2**20  # GPT-2 small's header is about 15 KB; medium's 40 KB
MAX_ENTRIES = 4096            # GPT-2 XL has under 600 tensors
ITEM_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
              "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}


def read_header(folder, name: str, max_header_bytes: int = MAX_HEADER_BYTES,
                max_entries: int = MAX_ENTRIES) -> dict[str, tuple[tuple[int, ...], str]]:
    """{tensor name: (shape, dtype)} of ``folder/name``, opened only inside its folder (core.serve.folder_files).
    ValueError saying what is wrong: a header too large or too long, not JSON, entries without a known dtype, a
    shape whose bytes do not match its offsets, offsets outside the file."""
    with open_inside(folder, name) as f:
        f.seek(0, 2)
        size = f.tell()
        f.seek(0)
        head = f.read(8)
        if len(head) < 8:
            raise ValueError("the file is too short to be safetensors")
        (n,) = struct.unpack("<Q", head)
        if n > max_header_bytes:
            raise ValueError(f"its header claims {n:,} bytes, more than the {max_header_bytes:,} this app reads")
        if 8 + n > size:
            raise ValueError(f"its header claims {n:,} bytes but the file has {size:,}")
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ValueError("its header is not JSON") from None
    if not isinstance(header, dict):
        raise ValueError("its header is not a JSON object")
    header.pop("__metadata__", None)
    if len(header) > max_entries:
        raise ValueError(f"its header lists {len(header):,} tensors, more than the {max_entries:,} this app reads")
    data_bytes = size - 8 - n
    out = {}
    for key, spec in header.items():
        if not isinstance(spec, dict):
            raise ValueError(f"entry {key[:80]!r} is not an object")
        dtype, shape, offsets = spec.get("dtype"), spec.get("shape"), spec.get("data_offsets")
        if dtype not in ITEM_BYTES:
            raise ValueError(f"{key[:80]} has an unknown dtype {str(dtype)[:20]!r}")
        if not (isinstance(shape, list) and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                                for s in shape) and len(shape) <= 8):
            raise ValueError(f"{key[:80]} has a malformed shape")
        if not (isinstance(offsets, list) and len(offsets) == 2
                and all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
                and 0 <= offsets[0] <= offsets[1] <= data_bytes):
            raise ValueError(f"{key[:80]}'s data lies outside the file")
        if offsets[1] - offsets[0] != math.prod(shape) * ITEM_BYTES[dtype]:
            raise ValueError(f"{key[:80]}'s shape {tuple(shape)} does not match its {offsets[1] - offsets[0]:,} bytes")
        out[key] = (tuple(shape), dtype)
    return out
