"""Crafting devbuf IPC handles by hand, for tests and the fuzzer: a handle's bytes as fields and
back (format 2: marker, device, kind, size, offset, len, read-only flag, payload), and the host
backend's payload (pid, fd, st_dev, st_ino)."""

import struct
from dataclasses import dataclass, replace

MAGIC = b"devbuf-ipc\x02"


@dataclass(frozen=True)
class Fields:
    device: bytes
    kind: bytes
    size: int
    offset: int
    len: int
    readonly: int
    payload: bytes

    @staticmethod
    def parse(raw):
        assert raw.startswith(MAGIC), raw[: len(MAGIC)]
        at = len(MAGIC)

        def field():
            nonlocal at
            (n,) = struct.unpack_from("<I", raw, at)
            at += 4 + n
            return raw[at - n : at]

        device, kind = field(), field()
        size, offset, length = struct.unpack_from("<QQQ", raw, at)
        at += 24
        readonly = raw[at]
        at += 1
        payload = field()
        assert at == len(raw)
        return Fields(device, kind, size, offset, length, readonly, payload)

    def encode(self):
        out = bytearray(MAGIC)
        for text in (self.device, self.kind):
            out += struct.pack("<I", len(text)) + text
        out += struct.pack("<QQQ", self.size, self.offset, self.len)
        out.append(self.readonly)
        out += struct.pack("<I", len(self.payload)) + self.payload
        return bytes(out)

    def but(self, **changes):
        return replace(self, **changes)


def host_payload(pid, fd, dev, ino):
    return struct.pack("<IiQQ", pid & 0xFFFFFFFF, fd, dev & (2**64 - 1), ino & (2**64 - 1))


def decode_host_payload(payload):
    """(pid, fd, st_dev, st_ino) of a host handle's payload."""
    return struct.unpack("<IiQQ", payload)
