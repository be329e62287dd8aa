"""Packaging metadata lives in pyproject.toml; this file builds the C kernels' extension and ships
``caldera-transformers.pth`` (see ``caldera_transformers_hook.py``) at the root of site-packages, in a wheel and in
an editable install.

The extension ``caldera.kernels._caldera_layer`` (sources in ``caldera/kernels/c/``; ``caldera.kernels.native`` loads
it) is optional: without a C compiler or the Python headers setuptools warns ("building optional extension ...
failed") and the install still succeeds; caldera then warns once at run time (``NativeKernelWarning``) and uses
its Numba kernels. No ``-march=native``: the AVX2 variant is chosen at run time, so a wheel runs on any CPU.
``-ffp-contract=off`` keeps the scalar code's float arithmetic as written (no fused multiply-adds the source does
not ask for), whichever compiler builds it. Next to the built module goes ``<module file>.sha256``, its sha256:
``caldera.kernels.native`` checks it before it loads the module, so a truncated or damaged build falls back to
the Numba kernels with a warning instead of crashing the interpreter.
"""

import hashlib
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

PTH = "caldera-transformers.pth"
CPU = "caldera/kernels/c"
#: Suffix of the file that records a built module's sha256 (read by caldera.kernels.native before loading it).
HASH_SUFFIX = ".sha256"


def record_hash(path):
    """Write ``<path>.sha256``: the hex sha256 of the module file ``path`` as it was just built."""
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    with open(path + HASH_SUFFIX, "w") as f:
        f.write(digest + "\n")


class BuildExtWithHash(build_ext):
    """build_ext, plus the sha256 record of each built module next to it (in ``build_lib``, hence in a wheel, and
    in the source tree for an in-place or editable build)."""

    def build_extension(self, ext):
        super().build_extension(ext)  # an optional extension that fails raises here: no record is written
        record_hash(self.get_ext_fullpath(ext.name))

    def copy_extensions_to_source(self):
        super().copy_extensions_to_source()
        build_py = self.get_finalized_command("build_py")
        for ext in self.extensions:
            inplace_file, regular_file = self._get_inplace_equivalent(build_py, ext)
            if os.path.exists(regular_file + HASH_SUFFIX):
                self.copy_file(regular_file + HASH_SUFFIX, inplace_file + HASH_SUFFIX, level=self.verbose)

    def get_outputs(self):
        out = super().get_outputs()
        return out if self.inplace else out + [self.get_ext_fullpath(e.name) + HASH_SUFFIX for e in self.extensions]


class BuildPyWithPth(build_py):
    """build_py, plus the .pth at the root of what is installed: ``build_lib`` for a wheel; for ``pip install -e``
    (editable_mode) the editable wheel's own folder (the ``install`` command's ``install_lib``), since setuptools
    leaves ``build_lib`` out of an editable wheel."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            dest = self.get_finalized_command("install").install_lib
        else:
            dest = self.build_lib
        self.copy_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), PTH), os.path.join(dest, PTH),
                       preserve_mode=False)

    def get_outputs(self, include_bytecode=True):
        out = super().get_outputs(include_bytecode)
        return out if getattr(self, "editable_mode", False) else [*out, os.path.join(self.build_lib, PTH)]


KERNELS = Extension(
    "caldera.kernels._caldera_layer",
    sources=[f"{CPU}/caldera_module.c", f"{CPU}/caldera_layer.c", f"{CPU}/caldera_layer_avx2.c"],
    depends=[f"{CPU}/caldera_layer.h"],
    include_dirs=[CPU],
    extra_compile_args=[] if sys.platform == "win32" else ["-O3", "-ffp-contract=off"],
    optional=True,
)

setup(cmdclass={"build_py": BuildPyWithPth, "build_ext": BuildExtWithHash}, ext_modules=[KERNELS])
