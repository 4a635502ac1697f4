"""cffi build script (out-of-line API mode) for the C core.

setup.py names it in ``cffi_modules``; setuptools then compiles the extension
``aisimulate_core._native`` from the sources beside this file. After editing
the C code, rebuild with ``pip install -e .`` (the editable install copies the
fresh module into the package directory).
"""

import os
import sys

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
# Every C file here is compiled. The declarations cffi binds are aisim_cdef.h (the shared status
# codes and the first structures) followed by each module's own ``*.cdef.h``, in name order, so
# a new module adds its two files and touches nothing shared.
SOURCES = sorted(name for name in os.listdir(HERE) if name.endswith(".c"))
MODULE_CDEFS = sorted(name for name in os.listdir(HERE) if name.endswith(".cdef.h"))
# every header, the internal ones a module's C files share included: editing one rebuilds
HEADERS = sorted(name for name in os.listdir(HERE) if name.endswith(".h"))


def _relative(path):
    # setuptools rejects absolute source paths; it runs from the project root
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return path


def _compile_args():
    if sys.platform == "win32":
        return ["/O2"]
    # no fused multiply-add: the C twins of Python arithmetic round every operation as Python does
    return ["-O2", "-std=c99", "-Wall", "-ffp-contract=off"]


ffibuilder = FFI()
for name in ("aisim_cdef.h",) + tuple(MODULE_CDEFS):
    with open(os.path.join(HERE, name), encoding="utf-8") as cdef_file:
        ffibuilder.cdef(cdef_file.read())

ffibuilder.set_source(
    "aisimulate_core._native",
    '#include "aisim.h"\n' + "".join(f'#include "{name}"\n' for name in MODULE_CDEFS),
    sources=[_relative(os.path.join(HERE, name)) for name in SOURCES],
    include_dirs=[_relative(HERE)],
    depends=[_relative(os.path.join(HERE, name)) for name in HEADERS],
    extra_compile_args=_compile_args(),
    libraries=[] if sys.platform == "win32" else ["m"],
)

