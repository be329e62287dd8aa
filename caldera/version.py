"""The version of this caldera (``caldera.__version__``), where every layer of the package may read it: the
checkpoint writer records it in a checkpoint's provenance."""

__version__ = "0.1.0"
