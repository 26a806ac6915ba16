"""Local X desktops that speak OSWorld's in-desktop HTTP server protocol (issue 28, part 1; partial).

:mod:`rla_core.envs.desktop.server` is our own implementation of a subset of the protocol;
:mod:`rla_core.envs.desktop.desktop` starts one desktop (Xvfb + jwm + that server) as one process group.
"""
