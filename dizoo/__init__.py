"""Environments and runnable configs: ``dizoo/<family>/<env>/config/<env>_<algo>[_ddp]_config.py``."""
