"""Read an offline W&B run (``<save_dir>/wandb/offline-run-*/run-*.wandb``) without syncing it.

The file is a LevelDB-style log: a 7-byte header (``":W&B"``, magic ``0xBEE1``, version 0),
then 32 KiB blocks of chunks, each ``crc32 (4) | length (2) | type (1) | payload``, where a
record's protobuf (``wandb.proto.wandb_internal_pb2.Record``) is split over FULL or
FIRST/MIDDLE/LAST chunks.  Used by the tests to check what a run logged, and handy for
looking at offline runs on a cluster with no network.
"""

from __future__ import annotations

import json
import struct
import time
import zlib
from pathlib import Path
from typing import Any

_BLOCK = 32 * 1024
_HEADER = struct.Struct("<4sHB")
_CHUNK = struct.Struct("<IHB")
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def iter_records(path: str | Path) -> list[bytes]:
    """The raw protobuf payloads of every record in a ``.wandb`` file, checksums verified."""
    data = Path(path).read_bytes()
    ident, magic, version = _HEADER.unpack_from(data, 0)
    if ident != b":W&B" or magic != 0xBEE1 or version != 0:
        raise ValueError(f"{path} is not a W&B run file (header {ident!r}, {magic:#x}, {version})")
    records, pending, pos = [], b"", _HEADER.size
    while pos + _CHUNK.size <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _CHUNK.size:  # block trailer: zero padding
            pos += left
            continue
        crc, length, kind = _CHUNK.unpack_from(data, pos)
        if length == 0 and kind == 0:
            break
        payload = data[pos + _CHUNK.size : pos + _CHUNK.size + length]
        if zlib.crc32(bytes([kind]) + payload) & 0xFFFFFFFF != crc:
            raise ValueError(f"{path}: checksum mismatch in the chunk at byte {pos}")
        pos += _CHUNK.size + length
        if kind == _FULL:
            records.append(payload)
        elif kind == _FIRST:
            pending = payload
        elif kind == _MIDDLE:
            pending += payload
        elif kind == _LAST:
            records.append(pending + payload)
            pending = b""
    return records


def read_offline_run(path: str | Path, wait: float = 0.0) -> dict[str, Any]:
    """Summarise a run file: ``{"history": [{key: value}], "config": {key: value},
    "summary": {key: value}, "record_types": {type: count}, "exit_code": int | None}`` (values
    decoded from JSON; ``exit_code`` from the run's exit record, ``None`` if it has none).

    ``wait``: seconds to wait for the run's exit record (its last).  W&B's service writes the
    file in the background: ``run.finish()`` (or the end of the process) can return before the
    records reach the disk (seen on a loaded 2-core machine: a 7-byte file, complete 0.1 s
    later), so read a finished run with ``wait > 0``."""
    deadline = time.monotonic() + wait
    while True:
        out = _read(path)
        if out["exit_code"] is not None or time.monotonic() >= deadline:
            return out
        time.sleep(0.05)


def _read(path: str | Path) -> dict[str, Any]:
    from wandb.proto import wandb_internal_pb2 as pb

    out: dict[str, Any] = {"history": [], "config": {}, "summary": {}, "record_types": {}, "exit_code": None}
    for payload in iter_records(path):
        rec = pb.Record()
        rec.ParseFromString(payload)
        kind = rec.WhichOneof("record_type")
        out["record_types"][kind] = out["record_types"].get(kind, 0) + 1
        if kind == "history":
            out["history"].append({_key(i): json.loads(i.value_json) for i in rec.history.item})
        elif kind == "config":
            out["config"].update({_key(i): json.loads(i.value_json) for i in rec.config.update})
        elif kind == "exit":
            out["exit_code"] = rec.exit.exit_code
        elif kind == "summary":
            out["summary"].update({_key(i): json.loads(i.value_json) for i in rec.summary.update})
    return out


def _key(item: Any) -> str:
    return item.key or "/".join(item.nested_key)
