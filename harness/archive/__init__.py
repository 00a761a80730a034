"""The archive: the one SQLite database object (database), its migrations, views, seal, export to a FlashInfer-Bench
trace set and transfer between archives, and the named queries the rest asks of it (queries: the review's and
report's reads; controller_tables: the controller's tables; profiles: the profiles table). Only this package
speaks SQL.
"""
