"""`python -m devbuf matrix` survives what it runs: each row runs in a child process, and a cell that
crashes that process is a FAIL naming the signal, with faulthandler's stack, while the rest of the
row still runs."""

import os
import pathlib
import subprocess
import sys

from devbuf import _matrix


def test_a_cell_that_crashes_its_process_is_a_fail_and_the_row_goes_on(monkeypatch):
    here = str(pathlib.Path(__file__).parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")])))
    crashes = []
    cells = _matrix._row("host", ["first", "second", "third"], crashes, cells_of="crashing_cells")
    assert cells[0] == ("pass", "on host")
    assert cells[1] == ("FAIL", "second on host crashed the process (signal 11, SIGSEGV)")
    assert cells[2] == ("pass", "on host"), "the row did not go on after the crash"
    assert len(crashes) == 1 and "Segmentation fault" in crashes[0], crashes



def test_the_matrix_process_opens_no_runtime_before_its_children():
    # On an H200 machine, once a process had opened NVIDIA's OpenCL, its children's OpenCL loader
    # no longer listed NVIDIA's platform: every cell of that row failed as "no matrix row". The
    # runtimes (OpenCL drivers, CUDA, dpctl's SYCL) are loaded when devbuf first asks for devices.
    code = (
        "from devbuf import _matrix; labels = _matrix._labels(); "
        "maps = open('/proc/self/maps').read(); "
        "print(len(labels), [lib for lib in ('libintelocl', 'libpocl', 'libcuda', 'libDPCTLSycl') "
        "if lib in maps])"
    )
    listed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    count, opened = listed.stdout.split(" ", 1)
    assert int(count) >= 1 and opened.strip() == "[]", listed.stdout
