"""Isolated local X desktops that OSWorld's own ``desktop_env.DesktopEnv`` drives.

:mod:`~rla_core.envs.desktop.desktop` starts one desktop (Xvfb, D-Bus, AT-SPI, jwm and our server) in a
bubblewrap sandbox with its own network namespace; :mod:`~rla_core.envs.desktop.server` is our
implementation of OSWorld's in-desktop server protocol; :mod:`~rla_core.envs.desktop.channel` carries the
host's loopback ports to the desktop's UNIX sockets; :mod:`~rla_core.envs.desktop.provider` plugs desktops
into ``desktop_env`` through its provider factory; :mod:`~rla_core.envs.desktop.pool` keeps N of them.
See docs/osworld.md.
"""
