"""The agent pipeline: prompt -> LLM -> extracted candidate -> evaluator -> feedback -> better candidate."""
