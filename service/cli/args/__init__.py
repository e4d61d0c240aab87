"""The argument parsers of the commands, one module per command group, each defining ``register(subparsers)``.

These modules import only the standard library and light parts of warpmap: building the whole
parser (for ``--help`` or any command) must not pay for NVRTC, SQLAlchemy or numpy. Each parser names
its implementation as ``handler="module:function"``; :func:`service.cli.main` imports that one only.
"""
