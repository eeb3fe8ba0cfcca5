"""The version of a3fast, in one place: the package, the command line, the service and the pages
it writes all read it from here."""

__version__ = "0.1.0"
