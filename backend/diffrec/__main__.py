"""``python -m diffrec`` runs the command line."""

from diffrec.cli import main

raise SystemExit(main())
