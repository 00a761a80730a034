"""The archive: the one SQLite database object (database), its migrations, views, seal, export to a FlashInfer-Bench
trace set and transfer between archives. Only this package speaks SQL.
"""
