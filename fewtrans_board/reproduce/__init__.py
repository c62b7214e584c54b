"""One-command reproduction of the three papers' tables and figures.

``target`` reads the declarative target files, ``planner`` turns one into commands with
device-time estimates (``costs``), ``execute`` runs them with resume, and ``report``
compares the measured cells with the paper's (``compare``).
"""
