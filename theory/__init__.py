"""Checks of the CALDERA paper's theory (§4, Appendices B–F) against the library.

One module per result; each exposes pure check functions returning :class:`CheckResult` (measured quantity as a
ratio to the paper's bound, verdict, counterexample with a seed) and a ``run(profile)`` used by the report
(``python -m theory.report``). The Hypothesis property tests (``test_*.py``) sit beside the modules they check.
This package imports :mod:`caldera`; the library never imports it (``tests/test_import_graph.py``).
"""

from theory.common import ALPHA, PROFILES, CheckResult, Profile, get_profile

__all__ = ["ALPHA", "PROFILES", "CheckResult", "Profile", "get_profile"]
