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


def test_the_matrix_fits_100_columns_unless_asked_for_the_wide_table():
    checks = ["alloc", "align", "copy", "fill", "busy_free", "kind_of", "foreign", "extent", "deleter",
              "subview", "threads", "oom", "events", "cross", "handed_out", "hints", "interop_memory",
              "interop_handles", "interop_streams", "pool_export", "pool_busy", "fixed_size_export", "adaptors"]
    columns = checks + ["numpy", "dpctl", "dpnp", "numba", "cupy", "torch"]
    width = len("sycl:opencl:cpu:0")
    unavailable = ["skip[1]"] * len(checks) + ["skip[2]"] * 4 + ["skip[3]"] * 2
    mixed = ["pass"] * 10 + ["FAIL[4]"] + ["skip[5]"] * (len(columns) - 11)
    lines = [_matrix.header(columns, width, wide=False)]
    for cells in (unavailable, mixed, ["pass"] * len(columns)):
        lines += _matrix.row_line("sycl:opencl:cpu:0", columns, cells, width, False, len(checks)).splitlines()
    assert max(len(line) for line in lines) <= _matrix.WIDTH, "\n".join(lines)
    assert "skip[1]: every check; skip[2]: numpy, dpctl, dpnp, numba; skip[3]: cupy, torch" in " ".join(
        " ".join(lines).split())
    # FAILs first, named by column.
    assert "10 18 1 FAIL[4]: threads; skip[5]: oom, events," in " ".join(" ".join(lines).split())
    wide = _matrix.row_line("host", columns, mixed, width, True)
    assert wide.split() == ["host"] + mixed and len(wide) > 300


def test_the_matrix_command_takes_wide():
    from devbuf import __main__

    seen = []
    original = _matrix.matrix
    try:
        _matrix.matrix = lambda wide=False: seen.append(wide) or 0
        assert __main__.main(["matrix", "--wide"]) == 0 and __main__.main(["matrix"]) == 0
    finally:
        _matrix.matrix = original
    assert seen == [True, False]
