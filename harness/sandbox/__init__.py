"""The candidate's process and its walls: namespaces, cgroups and rlimits (isolation), the worker process and its
typed protocol (runner, worker, protocol), builds (build), and stale-state cleanup.
"""
