"""gpuprobe's pytest plugin for a checkout that is not installed (``PYTHONPATH=. python3 -m pytest probes/``).

Installed, pytest loads the plugin by its ``pytest11`` entry point, named as the module is; pytest then skips
this line, as a plugin already registered under that name, so the plugin is registered once either way.
"""

pytest_plugins = ["gpuprobe.pytest_plugin"]
