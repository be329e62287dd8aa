"""Packaging metadata lives in pyproject.toml; this file builds the C kernels' extension and ships
``caldera-transformers.pth`` (see ``caldera_transformers_hook.py``) at the root of site-packages, in a wheel and in
an editable install.

The extension ``caldera.kernels._caldera_layer`` (sources in ``kernels/cpu/``; ``caldera.kernels.native`` loads
it) is optional: without a C compiler or the Python headers setuptools warns ("building optional extension ...
failed") and the install still succeeds; caldera then warns once at run time (``NativeKernelWarning``) and uses
its Numba kernels. No ``-march=native``: the AVX2 variant is chosen at run time, so a wheel runs on any CPU.
``-ffp-contract=off`` keeps the scalar code's float arithmetic as written (no fused multiply-adds the source does
not ask for), whichever compiler builds it.
"""

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

PTH = "caldera-transformers.pth"
CPU = "kernels/cpu"


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

setup(cmdclass={"build_py": BuildPyWithPth}, ext_modules=[KERNELS])
