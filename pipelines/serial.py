"""Where ``build_pipeline`` and ``serial_pipeline`` lived before the run assembly was written once
(``pipelines.build``, ``pipelines.assembly``): an import of it names the new spelling."""
raise ImportError("baton: pipelines.serial was renamed: import build_pipeline and serial_pipeline from pipelines "
                  "(from pipelines import build_pipeline), rank_seed from pipelines.assembly")
