"""The second process of the ordering machine's IPC rule (ordering_machine.py): reads hex-encoded
devbuf IPC handles, one a line, opens each, and answers with the bytes it reads there
(zlib-compressed, hex-encoded, one line), then lets go of the memory."""

import sys
import zlib

import devbuf

for line in sys.stdin:
    view = devbuf.open_ipc(bytes.fromhex(line.strip()))
    data = view.to_bytes()
    view.close()
    del view
    print(zlib.compress(data).hex(), flush=True)
