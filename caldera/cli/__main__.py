"""``python -m caldera.cli``: the ``caldera`` command."""

from caldera.cli.app import main

raise SystemExit(main())
