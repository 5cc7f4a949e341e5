"""dropboxmq_spec: the TLA+ specification (package data: the modules, models/, mutants/, traces/,
witnesses/, PROTOCOL.md) and its tooling: ``tlc`` runs TLC and SANY, ``tlc_models`` the models of
``dropboxmq spec check``, ``tlc_traces`` trace validation, ``trace`` reads a recorded trace,
``cli`` is the ``dropboxmq spec`` verb."""
