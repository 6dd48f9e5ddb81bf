"""Builds the C DLPack consumer (dlpack_consumer.c) with the system compiler, once per process."""

import importlib.util
import pathlib
import subprocess
import sysconfig
import tempfile

_module = None


def load():
    global _module
    if _module is None:
        source = pathlib.Path(__file__).with_name("dlpack_consumer.c")
        target = pathlib.Path(tempfile.mkdtemp()) / ("dlpack_consumer" + sysconfig.get_config_var("EXT_SUFFIX"))
        subprocess.run(
            ["cc", "-shared", "-fPIC", "-O2", "-I", sysconfig.get_paths()["include"], str(source), "-o", str(target)],
            check=True,
        )
        spec = importlib.util.spec_from_file_location("dlpack_consumer", target)
        _module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_module)
    return _module
