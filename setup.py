"""Packaging metadata lives in pyproject.toml; this file only ships ``caldera-transformers.pth`` (see
``caldera_transformers_hook.py``) at the root of site-packages, in a wheel and in an editable install."""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "caldera-transformers.pth"


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


setup(cmdclass={"build_py": BuildPyWithPth})
