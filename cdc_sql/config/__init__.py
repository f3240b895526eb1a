"""The pipeline YAML: loading with line numbers, ${VAR} interpolation, the typed model."""
from cdc_sql.config.model import Pipeline, Source, Table, Target, load_pipeline

__all__ = ["Pipeline", "Source", "Table", "Target", "load_pipeline"]
