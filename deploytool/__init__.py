"""deploytool: the local side. Ships `remote/` to a GPU host, drives it, shows the answer."""

__version__ = "0.1.0"
