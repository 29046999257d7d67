"""Subcommands of the ``diffrec`` command line (see ``diffrec.cli``)."""
