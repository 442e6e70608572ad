"""Federated fine-tuning, app side: the no-download QA task, its metrics, the cached base model, presets."""
