"""The stages of a run, each a function of ``(context, monitor)`` in a module of its own; ``run/launch.py`` puts
them in order."""
