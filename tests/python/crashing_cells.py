"""A matrix row of three cells whose second crashes its process (test_matrix.py)."""

import ctypes
import json

from devbuf._matrix import CELL


def run_row(label, start):
    for index in range(start, 3):
        if index == 1:
            ctypes.string_at(0)  # reads address 0: SIGSEGV
        print(CELL + json.dumps([index, "pass", f"on {label}"]), flush=True)
