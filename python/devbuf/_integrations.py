"""Registers devbuf with Dask and Ray when, and only when, the program uses them: at
``import devbuf`` for those already imported, else right after their own import completes.
``import devbuf`` never imports them."""

import importlib.abc
import importlib.util
import sys
import warnings


def _register(module_name):
    try:
        if module_name == "dask.sizeof":
            from . import _distributed

            _distributed.register_sizeof()
        elif module_name == "distributed.protocol":
            from . import _distributed

            _distributed.register_serializers()
        elif module_name == "ray":
            from . import _ray

            _ray.register_serializers()
    except Exception as err:  # a broken integration must not break the user's import
        warnings.warn(f"devbuf: could not register with {module_name}: {err!r}", RuntimeWarning, stacklevel=2)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for the watched modules it wraps the real loader so that devbuf
    registers once the module has run."""

    def __init__(self, names):
        self.pending = set(names)

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.pending:
            return None
        self.pending.discard(fullname)
        if not self.pending:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname) if fullname not in sys.modules else None
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module):
            run(module)
            _register(fullname)

        loader.exec_module = exec_module
        return spec


def install():
    watched = []
    for name in ("dask.sizeof", "distributed.protocol", "ray"):
        if name in sys.modules:
            _register(name)
        else:
            watched.append(name)
    if watched:
        sys.meta_path.insert(0, _AfterImport(watched))
