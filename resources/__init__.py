"""Dagster resources of sluice. Each is a thin ConfigurableResource over the Dagster-free `sluice` package."""

from resources.compute import ComputeResource
from resources.settings import SluiceSettings
from resources.storage import StorageResource
from resources.tokenizer import TokenizerResource
from resources.training_loader import TrainingLoaderResource

__all__ = ["ComputeResource", "SluiceSettings", "StorageResource", "TokenizerResource", "TrainingLoaderResource"]
