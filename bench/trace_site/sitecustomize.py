"""Imported at interpreter start when bench/trace_site is on PYTHONPATH (bench/window_trace.py puts
it there for the standalone it starts): installs the stage recorder's server hooks."""

import stage_trace

_path = stage_trace.server_trace_path()
if _path is not None:
    stage_trace.install_server_hooks(_path)
