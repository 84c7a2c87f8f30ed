"""The analysts' reports: plain functions over SQLAlchemy Core, each reading the per-request view
`request_outcomes` on a connection it is given, and answering with the models of services/analytics/models.py."""
