"""Airflow plugins of the provider (registered through ``get_provider_info()["plugins"]``)."""
