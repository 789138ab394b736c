"""The application layer: what composes the engine, the providers and the cluster into
the ``podnet`` command — the CLI, the controller host (``podnet run``), the demo and the
read-only ``status`` / ``audit`` commands. Nothing in core imports it."""
