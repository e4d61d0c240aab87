"""The tuning database: models, repository functions, cache keys."""
