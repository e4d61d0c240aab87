"""The warpmap service: settings, the REST API, the worker and the command line."""
