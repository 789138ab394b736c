"""The CNI plugin, ``podnet-cni`` (``podnet.cni.plugin``, one self-contained file).

Nothing here imports another podnet module, nor anything outside the standard library:
the container runtime starts the plugin for every sandbox, and a DaemonSet installs
``plugin.py`` onto the host as a single executable file.
"""
